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
    names = ("res", "w-slow", "kv-slow", "both-slow", "host", "host-attn")
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


# ---- serve -----------------------------------------------------------------------------------

def _requests(rate: float | None, requests: int, prompt: str, output: str,
              trace: Path | None, seed: int) -> list[Any]:
    from placewise.serve.llm import load_llm_trace, poisson_llm_requests

    if trace is not None:
        if rate is not None:
            raise InputError("--rate and --trace exclude each other: a trace has its arrivals")
        return load_llm_trace(trace)
    if rate is None:
        raise InputError("give --rate (requests/s, Poisson) or --trace")
    if requests < 1:
        raise InputError(f"--requests {requests}: expected >= 1")
    return poisson_llm_requests(rate, requests, prompt, output, seed=seed)


def load_step_file(path: Path) -> Any:
    """The measured step model in a file written by ``llm run --out``."""
    from pydantic import TypeAdapter, ValidationError

    from placewise.io import load_json, place_of
    from placewise.llm.steps import MeasuredStep

    data = load_json(path, what="step model (llm run --out)")
    if not isinstance(data, dict) or not isinstance(data.get("step"), dict):
        raise InputError("no measured step model (an `llm run --out` file has one under "
                         "'step')", file=str(path), place="step")
    try:
        return TypeAdapter(MeasuredStep).validate_python(data["step"])
    except ValidationError as e:
        raise InputError(e.errors()[0]["msg"], file=str(path),
                         place=place_of(("step", *e.errors()[0]["loc"]))) from None


def _local_device(device: str) -> tuple[Any, int]:
    """This machine and the threads to run with on its ``device``, the process pinned to
    the device's cores (``runtime.opexec.pin_process``); exit 2 for a device it lacks."""
    from placewise.runtime.opexec import pin_process  # loads torch

    machine = resolve_machine("local")
    if device not in machine.device_names:
        raise InputError(f"--device {device}: not a device of this machine "
                         f"({', '.join(machine.device_names)})")
    cores = machine.device(device).cores
    return machine, pin_process(cores) if cores else 1


@llm_app.command("serve")
def llm_serve(
    model: ModelArg,
    hw: HwOpt = "h100-sxm-server",
    rate: Annotated[float | None, typer.Option(help="Poisson arrivals, requests/s")] = None,
    requests: Annotated[int, typer.Option(help="Requests to draw (with --rate)")] = 2000,
    prompt: Annotated[str, typer.Option(help="Prompt lengths: fixed:N, uniform:A-B, "
                                             "lognormal:MEAN,SIGMA")] = "lognormal:512,0.8",
    output: Annotated[str, typer.Option(help="Output lengths (as --prompt)")] = "lognormal:128,0.8",
    trace: Annotated[Path | None, typer.Option(help="Replay a trace (CSV such as the Azure "
                                                    "LLM trace, or JSON lines)")] = None,
    max_seqs: Annotated[int | None, typer.Option(
        help="Sequences in a batch (default: the most, up to 256, whose cache keeps every "
             "layer on the accelerator; 64 with --step)")] = None,
    context: Annotated[int, typer.Option(help="Cache tokens reserved per sequence (the "
                                               "policy is searched for max-seqs x context)")] = 2048,
    max_batch_tokens: Annotated[int, typer.Option(help="New tokens per iteration")] = 2048,
    chunked: Annotated[bool, typer.Option("--chunked/--prefill-first",
                                          help="Sarathi chunked prefill, or vLLM v0 "
                                               "prefill-first iterations")] = True,
    step_file: Annotated[Path | None, typer.Option(
        "--step", help="A measured step model (`llm run --out`) instead of the cost model")] = None,
    ttft_slo: Annotated[float, typer.Option(help="TTFT objective for goodput, s")] = 1.0,
    tpot_slo: Annotated[float, typer.Option(help="TPOT objective for goodput, s")] = 0.1,
    seed: Annotated[int, typer.Option(help="Seed of arrivals and lengths")] = 0,
    accel: Annotated[str | None, typer.Option(help="The accelerator")] = None,
    calibration: Annotated[Path | None, typer.Option(help="Calibration JSON")] = None,
    real: Annotated[bool, typer.Option("--real", help="Also serve the .onnx decoder for real "
                                                      "on --device (needs --step, "
                                                      "--prefill-first)")] = False,
    device: Annotated[str, typer.Option(help="With --real: the local device")] = "cpu1",
    as_json: JsonOpt = False,
) -> None:
    """Serve a decoder with iteration-level batching, simulated (and with --real, for real
    on this machine): TTFT, TPOT and end-to-end percentiles, tokens/s and goodput at the
    objectives; with --real, where the real iterations' time went."""
    from placewise.serve.llm import LLMPolicy, simulate_llm

    if real and (step_file is None or chunked):
        raise InputError("--real serves the decoder as the simulation of a measured step "
                         "model does: give --step (from `placewise llm run MODEL --out F`) "
                         "and --prefill-first")
    reqs = _requests(rate, requests, prompt, output, trace, seed)
    if context < 1 or (max_seqs is not None and max_seqs < 1):
        raise InputError("--max-seqs and --context must be >= 1")
    info: dict[str, Any] = {"model": model, "requests": len(reqs)}
    if step_file is not None:
        step: Any = load_step_file(step_file)
        max_seqs = max_seqs or 64
        info["step"] = {"source": str(step_file), "measured": to_json(step)}
    else:
        from placewise.cost.load import load_cost_model
        from placewise.llm.plan import serving_step
        from placewise.llm.spec import resolve_spec

        spec = resolve_spec(model)
        machine = resolve_machine(hw)
        step, priced = serving_step(spec, machine, load_cost_model(machine, calibration),
                                    max_seqs=max_seqs, context=context, accel=accel)
        info["step"] = {"source": f"cost model on {machine.name}", "policy": to_json(priced)}
        max_seqs = priced.batch
    # the real engine pads every batch to its longest sequence: its simulation prices that
    policy = LLMPolicy(kv_capacity_tokens=max_seqs * context, max_seqs=max_seqs,
                       max_batch_tokens=max_batch_tokens, chunked_prefill=chunked, padded=real)
    info["policy"] = to_json(policy)
    with _progress("simulating"):
        res = simulate_llm(reqs, step, policy, seed=seed)
    info["result"] = res.summary(ttft_slo_s=ttft_slo, tpot_slo_s=tpot_slo)
    if real:
        info["real"] = _serve_real(reqs, model, policy, step, device, seed,
                                   (ttft_slo, tpot_slo))
    if as_json:
        _print_json(info)
        return
    _render_serve(info)


def _serve_real(reqs: list[Any], model: str, policy: Any, step: Any, device: str, seed: int,
                slo: tuple[float, float]) -> dict[str, Any]:
    from placewise.serve.llm_real import iteration_terms, serve_llm_real

    if not model.lower().endswith(".onnx"):
        raise InputError(f"{model}: --real runs an .onnx decoder (`placewise llm export`)")
    _, threads = _local_device(device)
    with _progress("serving for real"):
        res, records = serve_llm_real(reqs, model, policy, threads=threads, seed=seed)
    return {"device": device, "result": res.summary(ttft_slo_s=slo[0], tpot_slo_s=slo[1]),
            "terms_s": iteration_terms(records, step)}


def _render_serve(info: dict[str, Any]) -> None:
    r = info["result"]
    src = info["step"]["source"]
    p = info["policy"]
    out.print(f"[bold]{info['model']}[/bold]: {r['completed']} of {r['submitted']} requests "
              f"served ({r['rejected']} rejected, {r['preemptions']} preemptions, "
              f"{r['iterations']} iterations); up to {p['max_seqs']} sequences, cache "
              f"{p['kv_capacity_tokens']} tokens; step from {src}")
    if "policy" in info["step"]:
        out.print(f"  layers: {_policy_text(info['step']['policy'])}")
    rows = []
    for key in ("ttft", "tpot", "e2e"):
        t = r[key]
        rows.append([key.upper(), t["n"]] + [format_seconds(t[q]) if t[q] is not None else "-"
                                             for q in ("p50_s", "p90_s", "p99_s")])
    if "real" in info:
        m = info["real"]["result"]
        for key in ("ttft", "tpot", "e2e"):
            t = m[key]
            rows.append([f"{key.upper()} real", t["n"]] + [
                format_seconds(t[q]) if t[q] is not None else "-"
                for q in ("p50_s", "p90_s", "p99_s")])
    out.print(_table("latency", ["", "n", "p50", "p90", "p99"], rows))
    out.print(f"  {r['output_tokens_per_s']:.1f} output tokens/s, {r['requests_per_s']:.2f} "
              f"requests/s; goodput {r['goodput_rps']:.2f} requests/s at TTFT <= "
              f"{format_seconds(r['ttft_slo_s'])} and TPOT <= {format_seconds(r['tpot_slo_s'])}"
              f"; peak cache {r['peak_kv_blocks']} of {r['kv_capacity_blocks']} blocks")
    if "real" in info:
        m, t = info["real"]["result"], info["real"]["terms_s"]
        out.print(f"  real: {m['output_tokens_per_s']:.1f} output tokens/s, goodput "
                  f"{m['goodput_rps']:.2f} requests/s; iterations "
                  f"{format_seconds(t['measured'])} = predicted "
                  f"{format_seconds(t['predicted'])} + padding {format_seconds(t['padding'])}"
                  f" + step model {format_seconds(t['step_model'])} + rebuild "
                  f"{format_seconds(t['rebuild'])} + bookkeeping "
                  f"{format_seconds(t['bookkeeping'])}")


# ---- run (real, local) -------------------------------------------------------------------------

@llm_app.command("run")
def llm_run(
    model: Annotated[Path, typer.Argument(help="An .onnx decoder with past_key_values inputs "
                                               "(`llm export` writes one)")],
    batch: Annotated[str, typer.Option(help="Batch sizes")] = "1,8",
    context: Annotated[str, typer.Option(help="Context lengths (prompt tokens)")] = "128,2048",
    new_tokens: Annotated[int, typer.Option(help="Decode steps measured per run")] = 8,
    repeats: Annotated[int, typer.Option(help="Timed runs per cell")] = 3,
    device: Annotated[str, typer.Option(help="The local device whose cores run it")] = "cpu1",
    calibration: Annotated[Path | None, typer.Option(help="Calibration JSON")] = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="Write the check and the "
                                                                "fitted step model (JSON)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the decoder for real on this machine (prefill, then decode with the cache kept
    bound) on the device's cores, and set the prefill and per-token latency beside the
    graph's prediction and the step model fitted to the grid's corners."""

    from placewise.cost.load import load_cost_model
    from placewise.io import atomic_write_json, check_output_path
    from placewise.llm.validate import validate_local

    if out_file is not None:
        check_output_path(out_file, place="--out")
    for n, v in (("--new-tokens", new_tokens), ("--repeats", repeats)):
        if v < 1:
            raise InputError(f"{n} {v}: expected >= 1")
    machine, threads = _local_device(device)
    cm = load_cost_model(machine, calibration)
    with _progress("measuring") as cb:
        check = validate_local(model, machine, cm, device=device,
                               batches=_ints(batch, "--batch"),
                               contexts=_ints(context, "--context"), new_tokens=new_tokens,
                               repeats=repeats, threads=threads, progress=cb)
    data = to_json(check)
    if out_file is not None:
        atomic_write_json(out_file, data)
    if as_json:
        _print_json(data)
        return
    _render_run(data, check)


def _render_run(data: dict[str, Any], check: Any) -> None:
    import statistics

    out.print(f"[bold]{data['model']}[/bold] on {data['device']} ({data['threads']} threads)")
    rows = []
    for c in data["cells"]:
        terms = sorted(c["graph_decode_terms_s"], key=lambda kv: -kv[1])[:2]
        total = sum(v for _, v in c["graph_decode_terms_s"]) or 1.0
        rows.append([c["batch"], c["context"], format_seconds(c["prefill_s"]),
                     format_seconds(c["graph_prefill_s"]), format_seconds(c["fit_prefill_s"]),
                     format_seconds(c["decode_s"]), format_seconds(c["graph_decode_s"]),
                     ", ".join(f"{k} {v / total:.0%}" for k, v in terms),
                     format_seconds(c["fit_decode_s"]), "fit" if c["fitted_here"] else ""])
    out.print(_table("measured against predicted", [
        "batch", "context", "prefill", "graph", "step fit", "decode/token", "graph",
        "graph's terms", "step fit", ""], rows))
    for phase in ("prefill", "decode"):
        for which in ("graph", "fit"):
            e = check.errors(phase, which)
            if e:
                out.print(f"  {phase} by {which}: median |error| "
                          f"{statistics.median(abs(x) for x in e):.1%} over {len(e)} cells")


# ---- export ----------------------------------------------------------------------------------

@llm_app.command("export")
def llm_export(
    out_path: Annotated[Path, typer.Argument(help="The .onnx file to write")],
    size: Annotated[str, typer.Option(help="small (tests) or bench (17 M parameters)")] = "bench",
    seed: Annotated[int, typer.Option(help="Seed of the weights")] = 0,
) -> None:
    """Write a Llama decoder with seeded weights and its KV cache as inputs and outputs
    (Hugging Face optimum's names); needs ``transformers``."""
    from placewise.llm.real import BENCH_CONFIG, SMALL_CONFIG, export_decoder

    configs = {"small": SMALL_CONFIG, "bench": BENCH_CONFIG}
    if size not in configs:
        raise InputError(f"--size {size}: expected small or bench")
    try:
        import transformers  # noqa: F401  (a test extra: say so plainly)
    except ImportError:
        raise InputError("llm export needs transformers (pip install transformers)") from None
    with _progress("exporting"):
        export_decoder(configs[size], out_path, seed=seed)
    out.print(f"wrote {out_path}")
