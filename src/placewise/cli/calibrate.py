"""``placewise calibrate import``: profiles taken on the target by its own tools, as a
calibration (the library is ``placewise.calibrate.imports``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from placewise.calibrate.imports.read import detect_format, read_profile
from placewise.cli import (
    JsonOpt,
    _load_graph,
    _print_json,
    _table,
    app,
    out,
    resolve_machine,
)
from placewise.errors import ProfileError
from placewise.io import check_output_path
from placewise.records import to_json
from placewise.units import format_seconds

__all__ = ["calibrate_app", "calibrate_import", "detect_format"]

calibrate_app = typer.Typer(no_args_is_help=True,
                            help="Calibrations from measurements: profiles taken on the target.")
app.add_typer(calibrate_app, name="calibrate")

@calibrate_app.command("import")
def calibrate_import(
    profiles: Annotated[list[Path], typer.Argument(help="PROFILE files taken on the target: onnxruntime profiling JSON (any execution provider), trtexec --exportProfile, torch.profiler traces")],
    model: Annotated[str, typer.Option("--model", help="MODEL that was profiled: .onnx (or .pt2, zoo:NAME for torch traces)")],
    hw: Annotated[str, typer.Option("--hw", help="The target: preset, YAML path, or 'local'")],
    out_file: Annotated[Path, typer.Option("--out", help="Write the calibration here (JSON)")],
    device: Annotated[str | None, typer.Option("--device", help="The machine's device the profiles ran on (default: the one device of that kind)")] = None,
    batch: Annotated[int | None, typer.Option(help="The batch the profiles ran at (checked)")] = None,
    shape: Annotated[list[str] | None, typer.Option("--shape", help="Bind an input: NAME=DIMS (as profiled)")] = None,
    value: Annotated[list[str] | None, typer.Option("--value", help="Give an input a value: NAME=NUMBER or NAME=N1,N2,...")] = None,
    precision: Annotated[str | None, typer.Option("--precision", help="The precision the profiles computed in (checked; default the model's own): fp32, fp16, bf16, int8")] = None,
    layer_info: Annotated[Path | None, typer.Option("--layer-info", help="trtexec --exportLayerInfo JSON beside a trtexec profile")] = None,
    subgraphs: Annotated[Path | None, typer.Option("--subgraphs", help="Folder of the subgraphs onnxruntime's TensorRT provider dumped (trt_dump_subgraphs): the ONNX nodes of each TRTKernel_graph_* node")] = None,
    profiler_cost: Annotated[str, typer.Option("--profiler-cost", help="remove: take onnxruntime's own per-node profiling cost (the time of a node that does no work) off CPU nodes; keep: the times as timed")] = "remove",
    trtexec_log: Annotated[Path | None, typer.Option("--trtexec-log", help="trtexec's console log beside a trtexec profile (its TensorRT version, device, and which layers ran on the DLA)")] = None,
    into: Annotated[Path | None, typer.Option("--into", help="Add the imported device(s) into this calibration (another device's import, or placewise's own profile of the host) and write the whole to --out")] = None,
    tool_version: Annotated[str, typer.Option("--tool-version", help="The profiling tool's version, where the file does not record it (onnxruntime)")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Import profiles measured on the target as a calibration: each measured node becomes
    a calibrated key with its provenance; ops nobody measured keep the roofline."""
    from placewise.calibrate.imports.build import import_calibration

    check_output_path(out_file, place="--out")
    if batch is not None and batch <= 0:
        raise ProfileError(f"batch must be a positive integer, got {batch}", place="--batch")
    if len(tool_version) > 200 or not tool_version.isprintable():
        raise ProfileError("expected a short printable version (at most 200 characters)",
                           place="--tool-version")
    paths = [os.fspath(p) for p in profiles]
    formats = [detect_format(p) for p in paths]
    if "onnxruntime" in formats and not model.lower().endswith(".onnx"):
        raise ProfileError("an onnxruntime profile names the nodes of the ONNX file it ran: "
                           "give that .onnx file as --model", place="--model")
    for opt, flag in ((layer_info, "--layer-info"), (trtexec_log, "--trtexec-log")):
        if opt is not None and "trtexec" not in formats:
            raise ProfileError(f"{flag} is for trtexec profiles; none was given", place=flag)
    base = None
    if into is not None:
        from placewise.cost.calibration import load_calibration

        base = load_calibration(into)  # refused before the profiles are read
    if profiler_cost not in ("remove", "keep"):
        raise ProfileError(f"expected remove or keep, got {profiler_cost!r}",
                           place="--profiler-cost")
    read = [read_profile(p, tool_version=tool_version, layer_info=layer_info,  # before the model
                         trtexec_log=trtexec_log, profiler_cost=profiler_cost)
            for p in paths]
    graph = _load_graph(model, shape, batch, value)
    onnx_model = None
    if model.lower().endswith(".onnx"):
        from placewise.graph.onnx_import import read_onnx_as_is

        onnx_model = read_onnx_as_is(model)
    if "torch.profiler" in formats:
        from placewise.calibrate.imports.torch_trace import align_torch

        read = [align_torch(p, graph) if f == "torch.profiler" else p
                for p, f in zip(read, formats, strict=True)]
    machine = resolve_machine(hw)
    region_nodes: dict[str, tuple[str, ...]] = {}
    if subgraphs is not None:
        from placewise.calibrate.imports.onnxruntime import subgraph_nodes

        labels = [r.label for p in read for r in p.regions if not r.nodes]
        region_nodes = subgraph_nodes(subgraphs, labels)
    cal, report = import_calibration(read, graph, machine, device=device, batch=batch,
                                     precision=precision, onnx_model=onnx_model,
                                     model_ref=model, region_nodes=region_nodes)
    if base is not None:
        from placewise.calibrate.imports.merge import merge_into

        cal = merge_into(base, cal, file=str(into))
    cal.save(out_file)
    doc = {"out": str(out_file), "model": model, "machine": machine.name,
           "calibration_fingerprint": cal.fingerprint(), **to_json(report)}
    if as_json:
        _print_json(doc)
        return
    _render(doc)


def _render(doc: dict[str, Any]) -> None:
    rows = [[os.path.basename(p["file"]), f"{p['tool']} {p['tool_version']}".strip(), p["engine"],
             f"{p['runs']} (+{p['warmup_dropped']} warm-up)", p["profiled_nodes"],
             p["matched_nodes"], p["ops_covered"]] for p in doc["profiles"]]
    out.print(_table(f"imported onto {doc['device']} of {doc['machine']}",
                     ["profile", "tool", "ran on", "runs", "nodes", "matched", "ops"], rows))
    out.print(f"{doc['matched_nodes']} of {doc['profiled_nodes']} profiled nodes matched; "
              f"{doc['ops_covered']} of {doc['graph_ops']} ops covered "
              f"({100 * doc['measured_share']:.1f}% of the model's roofline time on "
              f"{doc['device']} now measured); {doc['measurements']} keys "
              f"({doc['precision'] or '-'}); {doc['split_nodes']} nodes covering several ops "
              f"split by roofline time", markup=False)
    if doc["unattributed"]:
        out.print(f"unattributed (compiled subgraphs that do not name their nodes): "
                  f"{', '.join(doc['unattributed'][:5])}"
                  + (" ..." if len(doc["unattributed"]) > 5 else ""), markup=False)
    if doc["unmatched"]:
        out.print(f"{len(doc['unmatched'])} nodes name no op of the model: "
                  f"{', '.join(doc['unmatched'][:5])}"
                  + (" ..." if len(doc["unmatched"]) > 5 else ""), markup=False)
    if doc["other_engine"]:
        out.print(f"{len(doc['other_engine'])} nodes ran on another kind of device: left out",
                  markup=False)
    over = doc["run_overhead_s"]
    out.print(f"copies {doc['copies']} (links fitted: {', '.join(doc['links']) or 'none'}); "
              f"reformats {doc['reformats']} ({doc['reformats_attributed']} joined the ops "
              f"they serve, {doc['conversions']} conversion keys); run overhead "
              + (f"{format_seconds(over)} (n={doc['run_overhead_n']})" if over is not None
                 else "not timed")
              + (f"; between nodes {format_seconds(doc['node_gaps_s'])} (the profiler's "
                 f"own cost included: not charged)" if doc["node_gaps_s"] is not None
                 else ""), markup=False)
    for note in doc["notes"]:
        out.print(f"  {note}", markup=False)
    for p in doc["profiles"]:
        for note in p["notes"]:
            out.print(f"  {os.path.basename(p['file'])}: {note}", markup=False)
    out.print(f"wrote {doc['out']} ({doc['calibration_fingerprint']})", markup=False)
