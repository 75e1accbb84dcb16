"""Placement search: baselines, HEFT, exact DP and CP-SAT, boundary local search, auto.

The entry point is ``plan_search(problem, strategy=..., objective=..., time_limit_s=...,
seed=..., progress=...) -> SearchResult``. Every strategy scores its plans with the one
scheduler (``placewise.schedule.evaluate``); strategies only *estimate* on their own.

- ``space``: candidates per vertex (devices x precisions), pruning with reasons, the
  crossing-cost model mirroring the scheduler's policy, the deterministic work budget;
- ``baselines``: ``single:DEVICE`` and ``greedy``;
- ``heft``: HEFT with insertion (and a load-balancing variant for throughput);
- ``dp``: exact DP on series-parallel graphs (latency) and chains (stage partitioning);
- ``cpsat``: joint placement and scheduling with OR-Tools CP-SAT, with a proven bound;
- ``exhaustive``: enumeration of small spaces (the reference);
- ``local``: simulated annealing over boundary, region and precision moves;
- ``auto``: chooses among them by size and budget, never worse than the best baseline;
- ``result``: ``SearchResult`` and the tracker that scores and records.
"""

from placewise.search.api import STRATEGIES, Strategy, parse_strategy, plan_search
from placewise.search.baselines import greedy_placement, single_placement
from placewise.search.cpsat import CpsatOutcome, cpsat_search
from placewise.search.dp import DpOutcome, dp_search, graph_shape
from placewise.search.exhaustive import ExhaustiveOutcome, exhaustive_search
from placewise.search.heft import heft_placement
from placewise.search.local import LocalOutcome, local_search
from placewise.search.result import Alternative, SearchResult, Tracker, rank_key
from placewise.search.space import DEFAULT_DTYPES, Budget, Comm, Model, SearchSpace

__all__ = [
    "DEFAULT_DTYPES",
    "STRATEGIES",
    "Alternative",
    "Budget",
    "Comm",
    "CpsatOutcome",
    "DpOutcome",
    "ExhaustiveOutcome",
    "LocalOutcome",
    "Model",
    "SearchResult",
    "SearchSpace",
    "Strategy",
    "Tracker",
    "cpsat_search",
    "dp_search",
    "exhaustive_search",
    "graph_shape",
    "greedy_placement",
    "heft_placement",
    "local_search",
    "parse_strategy",
    "plan_search",
    "rank_key",
    "single_placement",
]
