"""``placewise export PLANSET.json --out DIR``: one partition set per bucket, weights shared.

``export_plan_set(ps, out_dir)`` writes, in a fresh hidden folder renamed into place at
the end (``placewise.export``'s staging: a failure leaves nothing half-written):

- ``DIR/BUCKET/``: each bucket's plan exported by ``placewise.export.export_plan`` (its
  partition ``.onnx`` files and ``manifest.json``, which plain onnxruntime chains);
- ``DIR/shared-weights.bin``: every initializer of at least ``SHARE_MIN_BYTES``, identical
  ones (same dtype, dims and bytes) written once, whichever bucket and partition holds
  them. Each partition file refers to its initializers there as ONNX external data
  (``location``, ``offset``, ``length``). onnxruntime refuses external data outside a
  model's own folder (``../`` is "External data path escapes model directory"), so each
  bucket folder holds the same file as a *hard link* (one copy of the bytes on disk); where
  the file system cannot link, the file is copied and ``linked`` is False;
- ``DIR/planset-export.json``: the buckets (name, folder, lower, upper), the plan set's
  fingerprint, and the bytes written against the bytes each bucket's own export took
  without sharing.

Before the folder is put in place every partition is opened in a plain onnxruntime session
(``verified_sessions``). Note that the ``onnx`` Python package's
``onnx.load(..., load_external_data=True)`` refuses external data with more than one hard
link ("potential hardlink attack"); onnxruntime loads it, and ``onnx.load(path,
load_external_data=False)`` reads the graph.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from placewise.adapt.planset.file import load_plan_set
from placewise.adapt.planset.record import PlanSet
from placewise.errors import InputError, UnsupportedError
from placewise.export import (
    MANIFEST_FILE,
    _check_out_dir,
    _plan_machine,
    _staging,
    export_plan,
    load_manifest,
    manifest_to_json,
)
from placewise.graph.onnx_data import SHARE_MIN_BYTES, WeightsFile, light_copy, resolve_locations
from placewise.io import atomic_write_json

__all__ = ["SHARED_FILE", "SHARE_MIN_BYTES", "export_plan_set"]

#: the shared weights file's name (in the export folder and, linked, in each bucket's)
SHARED_FILE = "shared-weights.bin"
Progress = Callable[[str, float], None]


def _files_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _unique_bytes(folder: Path) -> int:
    seen: set[tuple[int, int]] = set()
    total = 0
    for p in folder.rglob("*"):
        if p.is_file():
            st = p.stat()
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def _share(root: Path, buckets: list[str]) -> dict[str, Any]:
    """Move every large initializer of every bucket's partitions into one shared file
    (module docstring; ``graph.onnx_data.WeightsFile``: identical tensors once); the
    manifests name it as each partition's external data."""
    # lazy: onnx is heavy to import, loaded only when this runs
    import onnx

    old: set[Path] = set()  # data files the partitions read before sharing
    with WeightsFile(root / SHARED_FILE) as shared:
        for name in buckets:
            folder = root / name
            man = load_manifest(folder / MANIFEST_FILE)
            parts = []
            for p in man.partitions:
                path = folder / p.file
                model = resolve_locations(onnx.load(str(path), load_external_data=False),
                                          folder)
                before = shared.references
                onnx.save_model(light_copy(model, shared.put, min_bytes=SHARE_MIN_BYTES),
                                str(path))
                if p.external_data is not None:
                    old.add(folder / p.external_data)
                moved = shared.references > before
                parts.append(p.model_copy(update={"external_data": SHARED_FILE if moved
                                                  else None}))
            atomic_write_json(folder / MANIFEST_FILE, manifest_to_json(
                man.model_copy(update={"partitions": tuple(parts)})))
            with contextlib.suppress(OSError):  # as readable as the partition files beside it
                shutil.copymode(folder / man.partitions[0].file, folder / MANIFEST_FILE)
    for f in old:
        with contextlib.suppress(OSError):
            f.unlink()
    linked = True
    for name in buckets:
        dst = root / name / SHARED_FILE
        try:
            os.link(shared.path, dst)
        except OSError:
            shutil.copyfile(shared.path, dst)
            linked = False
    return {"shared_file": SHARED_FILE, "shared_bytes": shared.size,
            "initializers": shared.tensors, "references": shared.references,
            "linked": linked}


def _verify(root: Path, buckets: list[str]) -> int:
    """Open every partition of every bucket in a plain onnxruntime session (CPU provider:
    the check is that its weights load from the shared file); the number opened."""
    # lazy: onnxruntime is heavy to import, loaded only when this runs
    import onnxruntime as ort

    # lazy: onnxruntime (placewise.onnxrt imports it) is heavy to import, loaded only when this runs
    from placewise.onnxrt import new_session

    n = 0
    for name in buckets:
        for p in load_manifest(root / name / MANIFEST_FILE).partitions:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            try:
                new_session(str(root / name / p.file), opts,
                            providers=["CPUExecutionProvider"])
            except Exception as exc:  # onnxruntime raises its own types
                raise UnsupportedError(f"bucket {name!r}, partition {p.name!r}: onnxruntime "
                                       f"does not load it with the shared weights: "
                                       f"{' '.join(str(exc).split())[:300]}") from None
            n += 1
    return n


def export_plan_set(ps: Any, out_dir: str | os.PathLike[str], *, machine: Any = None,
                    force: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """Write ``ps`` (a ``PlanSet`` or its file) as one partition set per bucket sharing
    one weights file (module docstring); returns the summary ``planset-export.json``
    holds. ``machine``: the plan set's machine (default: its preset or this machine).
    ``InputError`` as ``export_plan`` raises it; nothing is written then."""
    report: Progress = progress or (lambda _m, _f: None)
    file: str | None = None
    if not isinstance(ps, PlanSet):
        file = os.fspath(ps)
        ps = load_plan_set(file)
    target = _check_out_dir(out_dir, force=force,
                            protect=[f for f in (file, ps.model) if f and
                                     not f.startswith("zoo:")])
    machine = _plan_machine(ps.plans[0], machine, file)
    names = [b.name for b in ps.buckets]
    if len(set(names)) != len(names):
        raise InputError("two buckets have one name", file=file, place="buckets")
    with _staging(target, force=force) as tmp:
        rows = []
        for i, b in enumerate(ps.buckets):
            report(f"exporting bucket {b.name}", 0.8 * i / len(ps.buckets))
            man = export_plan(ps.plan_of(b), tmp / b.name, machine=machine,
                              source=_source(b))
            rows.append({"name": b.name, "folder": b.name, "lower": b.lower,
                         "upper": b.upper, "plan_index": b.plan_index,
                         "partitions": len(man.partitions),
                         "bytes_without_sharing": _files_bytes(tmp / b.name)})
        report("sharing the weights", 0.85)
        without = sum(r["bytes_without_sharing"] for r in rows)
        shared = _share(tmp, names)
        report("loading every partition in onnxruntime", 0.9)
        shared["verified_sessions"] = _verify(tmp, names)
        for r in rows:
            r["bytes"] = _files_bytes(tmp / r["folder"])
        summary = {"format": "placewise-planset-export", "version": 1, "model": ps.model,
                   "machine": ps.machine, "planset_fingerprint": ps.fingerprint(),
                   "buckets": rows, **shared, "bytes_without_sharing": without}
        atomic_write_json(tmp / "planset-export.json", summary)
        summary["bytes_written"] = _unique_bytes(tmp)
        summary["bytes_apparent"] = _files_bytes(tmp)
        atomic_write_json(tmp / "planset-export.json", summary)
    report("done", 1.0)
    return {"out": str(target), **summary}


def _source(b: Any) -> Any:
    """The bucket's model source at its upper corner (its ref, shapes and batch)."""
    # lazy: torch (runtime.opexec imports it) is heavy to import, loaded only when this runs
    from placewise.runtime.opexec import load_source

    kwargs: dict[str, Any] = {}
    if b.shapes:
        kwargs["shapes"] = {k: tuple(v) for k, v in b.shapes.items()}
    if b.batch is not None:
        kwargs["batch"] = b.batch
    return load_source(b.model_ref, **kwargs)
