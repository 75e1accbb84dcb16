"""``placewise llm``: decoder LLMs -- where layers and cache live (plan), served with
iteration-level batching (serve), and run for real on this machine (run). Rendered here;
the library is ``placewise.llm`` and ``placewise.serve.llm``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from placewise.cli import JsonOpt, _print_json, _progress, _table, app, out, resolve_machine
from placewise.errors import InputError
from placewise.records import to_json
from placewise.units import format_bytes, format_seconds

__all__ = ["llm_app"]

llm_app = typer.Typer(no_args_is_help=True,
                      help="Decoder LLMs: offloading plans, serving, real decode runs.")
app.add_typer(llm_app, name="llm")

ModelArg = Annotated[str, typer.Argument(
    help="DECODER: a shipped config (llama-2-7b, llama-2-13b, mistral-7b, llama-3-8b, "
         "codellama-13b; @q4 for llama.cpp Q4_0 weights), a config.json, or an .onnx "
         "decoder with past_key_values inputs")]
HwOpt = Annotated[str, typer.Option("--hw", help="Machine: preset, YAML path, or local")]


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"{what} {text!r}: expected comma-separated integers") from None
    if not vals or min(vals) < 1:
        raise InputError(f"{what} {text!r}: expected integers >= 1")
    return vals


@llm_app.command("plan")
def llm_plan(
    model: ModelArg,
    hw: HwOpt = "h100-sxm-server",
    batch: Annotated[str, typer.Option(help="Batch sizes (sequences decoding together)")] = "1",
    context: Annotated[str, typer.Option(help="Context lengths (tokens per sequence)")] = "4096",
    prompt: Annotated[int, typer.Option(help="Prompt tokens of the prefill reported")] = 512,
    accel: Annotated[str | None, typer.Option(help="The accelerator (default: the device "
                                                   "with the highest peak)")] = None,
    calibration: Annotated[Path | None, typer.Option(help="Calibration JSON")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Which layers' weights and cache live where, per batch and context (searched), with
    decode tokens/s, prefill time and the llama.cpp "layers that fit" baseline."""
    from placewise.cost.load import load_cost_model
    from placewise.llm.plan import plan_llm
    from placewise.llm.spec import resolve_spec

    spec = resolve_spec(model)
    machine = resolve_machine(hw)
    cm = load_cost_model(machine, calibration)
    if prompt < 1:
        raise InputError(f"--prompt {prompt}: expected >= 1")
    if accel is not None and accel not in machine.device_names:
        raise InputError(f"--accel {accel}: no such device on {machine.name} "
                         f"({', '.join(machine.device_names)})")
    with _progress("searching policies") as cb:
        p = plan_llm(spec, machine, cm, batches=_ints(batch, "--batch"),
                     contexts=_ints(context, "--context"), prompt=prompt, accel=accel,
                     progress=cb)
    if as_json:
        _print_json(to_json(p))
        return
    _render_plan(to_json(p))


def _policy_text(r: dict[str, Any] | None) -> str:
    if r is None:
        return "does not fit"
    names = ("res", "w-slow", "kv-slow", "both-slow", "host")
    parts = [f"{n} {c}" for n, c in zip(names, r["counts"], strict=True) if c]
    return " ".join(parts)


def _render_plan(p: dict[str, Any]) -> None:
    out.print(f"[bold]{p['model']}[/bold] on {p['machine']}: weights "
              f"{format_bytes(p['weight_bytes'])}, cache {format_bytes(p['kv_bytes_per_token'])}"
              f" per token; accelerator {p['accel']}, host {p['host']}")
    for name, cap, bw in p["pools"]:
        out.print(f"  memory {name}: {format_bytes(cap)} at {format_bytes(bw)}/s")
    rows = []
    for c in p["cells"]:
        s, lc = c["searched"], c["llamacpp"]
        rows.append([c["batch"], c["context"], _policy_text(s),
                     f"{s['tokens_per_s']:.1f}" if s else "-",
                     format_seconds(s["prefill_s"]) if s else "-",
                     _policy_text(lc), f"{lc['tokens_per_s']:.1f}" if lc else "-",
                     f"{s['tokens_per_s'] / lc['tokens_per_s']:.2f}x" if s and lc else "-"])
    out.print(_table("layers by class (searched vs llama.cpp)",
                     ["batch", "context", "searched", "tok/s", f"prefill {p['prompt']}",
                      "llama.cpp", "tok/s", "gain"], rows, right=(0, 1, 3, 4, 6, 7)))
    best: dict[int, dict[str, Any]] = {}
    for c in p["cells"]:
        s = c["searched"]
        if s and (c["context"] not in best
                  or s["tokens_per_s"] > best[c["context"]]["searched"]["tokens_per_s"]):
            best[c["context"]] = c
        if c["searched"] is None:
            ruled = ", ".join(f"{k}: {v}" for k, v in c["ruled_out"] if v)
            out.print(f"  batch {c['batch']} context {c['context']}: nothing fits "
                      f"({c['tried']} tried; ruled out by {ruled})")
        if c["note"]:
            out.print(f"  batch {c['batch']} context {c['context']}: {c['note']}")
    for ctx, c in sorted(best.items()):
        out.print(f"  context {ctx}: most tokens/s at batch {c['batch']} "
                  f"({c['searched']['tokens_per_s']:.1f})")
