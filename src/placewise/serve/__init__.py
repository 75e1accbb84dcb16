"""The plan as a loaded service (issue 14, begun): arrival processes, registry-keyed
batching policies, and a simulator of a batcher in front of a pipeline of stages.

``sim.simulate`` is the core; the ``serve`` command, request classes, priorities,
replicas and the real load generator are still to come.
"""

from placewise.serve.arrivals import gamma_arrivals, poisson_arrivals
from placewise.serve.policies import BATCHERS, Batcher, parse_batching
from placewise.serve.sim import ServeResult, quantile_ci, simulate

__all__ = [
    "BATCHERS",
    "Batcher",
    "ServeResult",
    "gamma_arrivals",
    "parse_batching",
    "poisson_arrivals",
    "quantile_ci",
    "simulate",
]
