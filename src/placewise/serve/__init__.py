"""The plan as a loaded service (issue 14): arrival processes (``arrivals``), request
classes and Triton's queue policy (``queue``), registry-keyed batchers (``policies``), the
simulator (``sim``), the plan's per-batch service times (``service``), the figures a run
reports (``report``) and the real load generator driving the executor (``real``).
"""

from placewise.serve.arrivals import gamma_arrivals, poisson_arrivals
from placewise.serve.policies import BATCHERS, Batcher, parse_batching
from placewise.serve.queue import Admission, RequestClass, RequestQueue, parse_class
from placewise.serve.sim import (
    ClosedLoop,
    ServeResult,
    StageTimes,
    Workload,
    chain,
    quantile_ci,
    simulate,
)

__all__ = [
    "BATCHERS",
    "Admission",
    "Batcher",
    "ClosedLoop",
    "RequestClass",
    "RequestQueue",
    "ServeResult",
    "StageTimes",
    "Workload",
    "chain",
    "gamma_arrivals",
    "parse_batching",
    "parse_class",
    "poisson_arrivals",
    "quantile_ci",
    "simulate",
]
