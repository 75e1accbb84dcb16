"""Validate a plan: run it for real on this machine and put every prediction next to reality.

``validate_plan(plan)`` (``run``) loads the plan's model source, checks that the plan was
made for this graph and for this machine's local devices (``--hw local``), and runs it
with the executor (``placewise.runtime.executor``) through the measurement campaign
calibration runs too (``placewise.runtime.campaign``: warm-up, then phases 1-3):

1. **isolated requests**: ``requests`` requests one at a time (after a short warm-up), each
   on its own seeded inputs: end-to-end latency as the client sees it (inputs written to
   shared memory -> outputs copied back), p50/p90/p99 with the sample count;
2. **a pipelined stream**: requests kept in flight (``in_flight``, default
   ``max(8, 2 x devices + 2)``, so that the client's own scheduling delays do not starve
   the workers; workers sleep rather than poll when idle in this phase) for at least
   ``stream_s`` seconds: sustained throughput (requests/s = batch / the campaign's stream
   period, ``campaign.stream_period``: completions after the pipeline has filled);
3. **solo replay**: each device alone replays one request's steps (medians): the
   uncontended cost of exactly what the executor runs;
4. **memory**: live tensor bytes per device (weights + activations + received copies,
   storages counted once) over the isolated requests, against the plan's per-device peak;
   process RSS is reported beside it (it includes the Python and library footprint, which
   the plan does not model), and the shared-memory block of transfer slots in the tags
   (``shared_memory_bytes``: allocated once for the run, not counted per device);
5. **quality** (``quality``): outputs against a single-device fp32 reference on the same
   inputs (relative L2, max abs, cosine; top-1 agreement for outputs that look like
   logits: a float output of a contraction op with a last dimension of at least 2);
6. **baseline** (``baseline``): a whole-model onnxruntime session using all usable cores
   on the same requests (fp32; also int8 dynamic quantization when the plan computes in
   int8), isolated latency and back-to-back throughput, reported whichever wins.

**Attribution** (``attribution``, no global correction factor): the measured critical path
of the median-latency isolated request, split into terms (``TERMS``) against the plan's
own tasks, adding up exactly to measured minus predicted latency; per task the same split;
throughput attributed on the measured bottleneck device.

The report's records are in ``records``. The library never prints:
``render_validation(report)`` (``render``) returns the text the CLI shows and
``report.to_json()`` the object of ``--json``.
"""

from placewise.precision.metrics import OutputQuality
from placewise.validate.quality import output_quality
from placewise.validate.records import (
    TERMS,
    Attribution,
    BaselineReport,
    LatencyStats,
    MemoryComparison,
    StepShare,
    TaskShare,
    ThroughputAttribution,
    ValidationReport,
    latency_stats,
)
from placewise.validate.render import render_validation
from placewise.validate.run import validate_plan

__all__ = [
    "TERMS",
    "Attribution",
    "BaselineReport",
    "LatencyStats",
    "MemoryComparison",
    "OutputQuality",
    "StepShare",
    "TaskShare",
    "ThroughputAttribution",
    "ValidationReport",
    "latency_stats",
    "output_quality",
    "render_validation",
    "validate_plan",
]
