"""Plan sets: plans for a shape envelope (``placewise plan MODEL --envelope ...``).

A **plan set** covers an *envelope* of input shapes (``parse_envelope``: per axis a sorted
list of sizes; axes ``batch`` and ``seq``) with **buckets**: contiguous ranges of the
envelope's grid, each served by the plan of the grid point at its upper corner (a shape
is served in the smallest bucket covering it, padded up). ``build_plan_set``:

1. plans every grid point through the one planning core (``placewise.planning``:
   ``build_problem`` + ``plan_model``, as ``placewise plan`` and a sweep cell do), each
   under its own ``time_limit_s``. ``batch`` is the plan's batch; ``seq`` is the sequence
   length: the ``seq`` option of a zoo model (``zoo:bert?seq=128``), or the one symbolic
   non-leading input dimension of an ONNX file, bound through the input shapes
   (``--shape``); a model without the axis is refused (``InputError``);
2. chooses how many buckets and where their edges fall (``planset.choice``:
   the expected latency over the shape ``Mix`` plus a stated compile and memory cost per
   extra bucket; the choice, the alternatives and why are kept in ``choice``);
3. buckets whose best placement is the same (the same device and precision for every
   vertex; neighbours or not) share one **plan entry** (``plans[bucket.plan_index]``: the
   plan at the largest upper corner among them); every bucket still keeps its own plan at its own
   upper corner (``plan_of(bucket)``, the same placement at that shape), so that it is
   served without padding up to the shared entry's shape;
4. records the **padding** cost per grid point (the latency served at its bucket's upper
   corner, and in the next bucket up, minus at its own grid point) and the **residency**
   of all bucket plans (weights once per device: ``choice.resident_bytes``).

**The file** (``save_plan_set`` / ``load_plan_set``): JSON, ``"format":
"placewise-planset"``, ``"version": 1``; the plan entries and the bucket plans as plan
documents (``placewise.plan_file``; a bucket plan identical to its entry is stored once);
``fingerprints``: the machine, the calibration, every plan's ``plan_fingerprint``, and the
plan set's own (sha256 of the document without it). Loading checks every fingerprint, that
the buckets cover the grid exactly once and that each bucket plan has its entry's
placement: a corrupt or edited file is a ``SpecError`` naming file, place and problem.

The package's rooms: ``record`` (the set, its envelope and its document), ``mix`` (shape
mixes), ``choice`` (the bucket choice, pure functions of per-grid-point facts), ``build``
(planning the grid), ``file`` (the checked loader), ``export`` and ``report`` (explain and
check).

>>> parse_envelope(["batch=1,2,4", "seq=32..128:pow2"])
{'batch': [1, 2, 4], 'seq': [32, 64, 128]}
"""

from placewise.adapt.planset.build import build_plan_set, grid_facts, plan_memories, plan_weights
from placewise.adapt.planset.choice import ChoiceCosts
from placewise.adapt.planset.export import SHARED_FILE, export_plan_set
from placewise.adapt.planset.file import load_plan_or_set, load_plan_set, plan_set_from_json
from placewise.adapt.planset.mix import AXES, Mix, load_mix, mix_of_trace
from placewise.adapt.planset.record import (
    FORMAT,
    MAX_GRID_POINTS,
    VERSION,
    Bucket,
    PlanSet,
    dumps_plan_set,
    is_plan_set,
    parse_envelope,
    plan_set_to_json,
    save_plan_set,
)
from placewise.adapt.planset.report import (
    check_plan_set,
    explain_plan_set,
    planset_findings_json,
    render_plan_set,
)

__all__ = [
    "AXES",
    "FORMAT",
    "MAX_GRID_POINTS",
    "SHARED_FILE",
    "VERSION",
    "Bucket",
    "ChoiceCosts",
    "Mix",
    "PlanSet",
    "build_plan_set",
    "check_plan_set",
    "dumps_plan_set",
    "explain_plan_set",
    "export_plan_set",
    "grid_facts",
    "is_plan_set",
    "load_mix",
    "load_plan_or_set",
    "load_plan_set",
    "mix_of_trace",
    "parse_envelope",
    "plan_memories",
    "plan_set_from_json",
    "plan_set_to_json",
    "plan_weights",
    "planset_findings_json",
    "render_plan_set",
    "save_plan_set",
]
