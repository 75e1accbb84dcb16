"""torch.profiler Chrome traces: real CUDA traces published by HolisticTraceAnalysis (see
tests/data/target_profiles/SOURCES.md; kept outside the repository, tests/calibrate/
target_profiles.py: the tests that need them skip without them) and real CPU traces taken here,
in the test, with the installed torch; files broken on purpose from the latter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placewise.calibrate.imports.torch_trace import align_torch, read_torch_trace
from placewise.errors import ProfileError
from tests.calibrate.target_profiles import shared_file

WHAT = "real CUDA torch.profiler traces"


def _alexnet() -> Path:
    return shared_file("torch/alexnet_a100.trace.json", WHAT)


def _sampled() -> Path:
    return shared_file("torch/sampled_rank0.trace.json", WHAT)


def _events(path: Path) -> list[dict]:
    return json.loads(path.read_text())["traceEvents"]


def test_cuda_kernels_attributed_through_correlation() -> None:
    alexnet = _alexnet()
    p = read_torch_trace(alexnet)
    assert p.source.device == "NVIDIA A100-PG509-200" and p.source.date_from == "file"
    assert p.runs == 1 and p.warmup_dropped == 0  # no ProfilerStep: one run, said so
    assert any("one run" in n for n in p.notes)
    ev = _events(alexnet)
    kernels = [e for e in ev if e.get("cat") in ("kernel", "gpu_memset")]
    gpu = [r for r in p.regions if r.engine == "gpu"]
    # every kernel and memset is in exactly one GPU region's time: none lost, none twice
    assert not any("could not be tied" in n for n in p.notes)
    assert sum(r.samples_s[0] for r in gpu) == pytest.approx(
        sum(e["dur"] for e in kernels) * 1e-6)
    assert all(len(r.launch_s) == 1 and r.launch_s[0] > 0 for r in gpu)
    conv = [r for r in gpu if r.op_type == "aten::conv2d"]
    # AlexNet's five convolutions in each of the trace's two forward passes, with kernels
    assert len(conv) == sum(e["name"] == "aten::conv2d" for e in ev) == 10
    # taken without record_shapes: no shapes, no input types, so no precision
    assert all(r.precision == "" and r.in_shapes == () for r in conv)
    cpu = [r for r in p.regions if r.engine == "cpu"]
    assert cpu and all(r.launch_s == () for r in cpu)
    # top-level ops only: aten::addmm under aten::linear is not a region of its own
    assert not any(r.op_type == "aten::addmm" for r in p.regions)


def test_pageable_copies_with_bytes_and_direction() -> None:
    alexnet = _alexnet()
    p = read_torch_trace(alexnet)
    ev = [e for e in _events(alexnet) if e.get("cat") == "gpu_memcpy"]
    assert len(p.transfers) == len(ev) == 16
    for t in p.transfers:
        assert t.kind == "copy" and (t.src, t.dst) == ("host", "device")
        assert t.pinned is False  # "Memcpy HtoD (Pageable -> Device)"
    assert sorted(t.nbytes for t in p.transfers) == sorted(e["args"]["bytes"] for e in ev)


def test_steps_warmup_and_pinned_versus_pageable() -> None:
    sampled = _sampled()
    p = read_torch_trace(sampled)
    assert p.runs == 1 and p.warmup_dropped == 1  # ProfilerStep#551 dropped, #552 kept
    steps = sorted((e for e in _events(sampled) if e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    assert p.run_samples_s == (steps[1]["dur"] * 1e-6,)
    pinned = [t for t in p.transfers if t.pinned is True]
    pageable = [t for t in p.transfers if t.pinned is False]
    d2d = [t for t in p.transfers if t.pinned is None]
    assert pinned and pageable and d2d
    assert all(t.label.startswith("Memcpy HtoD (Pinned -> Device)") for t in pinned)
    assert all((t.src, t.dst) == ("device", "device") for t in d2d)
    assert any((t.src, t.dst) == ("device", "host") for t in pageable)
    # the kept step's copies only: the warm-up step's 786432-byte copies come once each
    kept = [e for e in _events(sampled) if e.get("cat") == "gpu_memcpy"
            and "Pinned" in e["name"] and e["ts"] >= steps[1]["ts"]]
    assert sorted(t.nbytes for t in pinned) == sorted(e["args"]["bytes"] for e in kept)
    # "forward" is recorded as a cpu_op in this trace: an annotation, not an op
    assert not any(r.op_type == "forward" for r in p.regions)
    assert {r.engine for r in p.regions} == {"cpu", "gpu"}


# ---- real CPU traces taken here ------------------------------------------------------------
def _tiny():  # type: ignore[no-untyped-def]
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 32)
            self.act = torch.nn.ReLU()
            self.fc2 = torch.nn.Linear(32, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.fc2(self.act(self.fc1(x))), dim=-1)

    torch.manual_seed(0)
    return Tiny().eval(), (torch.randn(8, 16),)


def _trace(tmp_path: Path, *, modules: bool, steps: int = 4) -> Path:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    model, args = _tiny()
    out = tmp_path / f"trace_{modules}.json"
    with torch.no_grad(), profile(
            activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=modules,
            with_modules=modules,
            schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
            on_trace_ready=lambda prof: prof.export_chrome_trace(str(out))) as prof:
        for _ in range(steps + 1):
            model(*args)
            prof.step()
    assert out.exists()
    return out


def test_cpu_trace_steps_modules_and_alignment(tmp_path: Path) -> None:
    from placewise.graph.torch_import import import_module

    path = _trace(tmp_path, modules=True)
    p = read_torch_trace(path)
    assert p.runs == 3 and p.warmup_dropped == 1  # 4 ProfilerSteps, the first dropped
    assert {r.engine for r in p.regions} == {"cpu"} and p.transfers == ()
    by_type = [r.op_type for r in sorted(p.regions, key=lambda r: r.seq)]
    assert by_type == ["aten::linear", "aten::relu", "aten::linear", "aten::softmax"]
    assert all(len(r.samples_s) == 3 for r in p.regions)
    paths = [r.module_path for r in sorted(p.regions, key=lambda r: r.seq)]
    assert paths[0].endswith("Linear_0") and paths[2].endswith("Linear_1")
    assert paths[1].endswith("ReLU_0") and paths[0].split("/")[0].startswith("Tiny")
    assert p.precision == "fp32"
    assert p.regions[0].in_shapes[0] == (8, 16)

    model, args = _tiny()
    graph = import_module(model, args, name="tiny")
    aligned = align_torch(p, graph)
    names = {r.op_type + "@" + r.module_path: r.nodes for r in aligned.regions}
    ops = {op.name: op for op in graph.ops}
    for r in aligned.regions:
        assert len(r.nodes) == 1, r
        op = ops[r.nodes[0]]
        assert op.provenance.source_op.split(".")[1] == r.op_type.split("::")[1]
    fc2 = next(r for r in aligned.regions if r.module_path.endswith("Linear_1"))
    assert ops[fc2.nodes[0]].provenance.module_path == "fc2"
    assert any("aligned 4 of 4" in n for n in aligned.notes), aligned.notes
    assert len(names) == 4


def test_cpu_trace_without_modules_aligns_by_order(tmp_path: Path) -> None:
    from placewise.graph.torch_import import import_module

    p = read_torch_trace(_trace(tmp_path, modules=False, steps=2))
    assert all(r.module_path == "" for r in p.regions)
    assert any("no nn.Module frames" in n for n in p.notes)
    model, args = _tiny()
    aligned = align_torch(p, import_module(model, args, name="tiny"))
    assert all(len(r.nodes) == 1 for r in aligned.regions)
    # a graph of another model aligns only what its op types allow
    other = import_module(__import__("torch").nn.Linear(16, 3), (args[0],), name="lin")
    partial = align_torch(p, other)
    assert sum(1 for r in partial.regions if r.nodes) == 1
    assert any("aligned 1 of 4" in n for n in partial.notes)


# ---- refusals ------------------------------------------------------------------------------
def _refused(path: Path) -> str:
    with pytest.raises(ProfileError) as exc:
        read_torch_trace(path)
    line = str(exc.value)
    assert "\n" not in line and str(path) in line
    return line


def test_truncated_and_wrong_top_level(tmp_path: Path) -> None:
    # broken copies of a real trace, taken here with the installed torch
    text = _trace(tmp_path, modules=False, steps=1).read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 3])
    assert "not valid JSON" in _refused(cut)
    for body, word in (("[]", "expected a JSON object"), ('{"traceEvents": 3}', "not a list"),
                       ('{"traceEvents": []}', "no aten op"), ("[" * 100 + "]" * 100,
                                                             "nested more than")):
        f = tmp_path / "x.json"
        f.write_text(body)
        assert word in _refused(f)


def test_hostile_numbers(tmp_path: Path) -> None:
    text = _trace(tmp_path, modules=False, steps=1).read_text()
    doc = json.loads(text)
    assert read_torch_trace(_write(tmp_path, "whole.json", text)).regions  # reads as taken
    i = next(k for k, e in enumerate(doc["traceEvents"])
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("aten::"))
    for bad, word in ((-3, "not a time"), (1e30, "not a time"), ("12", "a number")):
        d = json.loads(text)
        d["traceEvents"][i]["dur"] = bad
        line = _refused(_write(tmp_path, "bad.json", json.dumps(d)))
        assert f"traceEvents[{i}].dur" in line and word in line, line
    d = json.loads(text)
    d["traceEvents"][i]["dur"] = "__nan__"
    nan = json.dumps(d).replace('"__nan__"', "NaN")
    assert "not finite" in _refused(_write(tmp_path, "nan.json", nan))


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path
