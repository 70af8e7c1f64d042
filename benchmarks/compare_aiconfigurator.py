"""A peer cross-check (issue 26): NVIDIA AIConfigurator and `roofline plan` asked the same questions.

Questions: Llama-3.1-70B, Llama-3.1-8B and Qwen3-235B-A22B (MoE) on 8 H100 SXM or 8 H200, bf16 or fp8 (weights
and KV cache), aggregated or disaggregated; 2000 tokens in, 500 out, TTFT <= 1 s, TPOT <= 40 ms (means), the
TensorRT-LLM backend / profile. AIConfigurator (`aiconfigurator cli exp`, its bundled silicon database, on the CPU)
searches layouts and concurrencies for the most tokens/s per GPU within the targets on 8 GPUs; roofline is asked
for the highest request rate 8 GPUs serve within the targets (its plan at a rate, bisected), and its tokens/s per
GPU there is rate x 500 / the GPUs its cheapest deployment uses. Each row then prices AIConfigurator's own choice
(layout and concurrency) with roofline (roofline.serving.load, or roofline.serving.disaggregated), so the
difference splits into named terms:
  layout   roofline's best layout against AIConfigurator's, both priced by roofline;
  TPOT     the decode step at AIConfigurator's layout and concurrency, roofline's against AIConfigurator's
           (engine profile fitted to published rows against profiled kernels);
  TTFT     the same for the first token (queueing, prefill, KV transfer);
  GQA re-reads  the share of the TPOT gap from the profile's gqa_rereads (0.41 in the 0.x profile tensorrt-llm,
           fitted to TensorRT-LLM <= 0.7's masked MHA, each query head re-reading its group's K/V; 0 in
           tensorrt-llm-1, plan's default, as today's XQA kernel reads it once): the TPOT again with gqa_rereads = 0.
The layout term also holds the load's shape: roofline serves Poisson arrivals at a rate (open loop, queueing
bursts), AIConfigurator a fixed concurrency (closed loop).
Not a dependency: AIConfigurator lives in its own venv (python3 -m venv /work/aic-venv; pip install
aiconfigurator). Run: PYTHONPATH=. python benchmarks/compare_aiconfigurator.py [--aic /work/aic-venv/bin/aiconfigurator]
[--out benchmarks/results/aiconfigurator.md] [--answers benchmarks/results/aiconfigurator-answers.json]; it writes a
Markdown table. AIConfigurator's answers do not change with roofline: its best row per question is kept in the
answers file (with the package's version and the search's seconds) and reused while it holds every question asked;
delete it, or pass --rerun, to ask AIConfigurator again (~13 min on 2 cores; the rest takes ~1 min).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from roofline.deployment import Deployment
from roofline.engine import load_engine
from roofline.hardware import load_hardware
from roofline.planning.plan import DEFAULT_ENGINE, Targets, Workload, plan
from roofline.precision import Precision, as_served
from roofline.serving.disaggregated import Disaggregated
from roofline.serving.load import Policy, at_load, kv_sequences

MODELS = {"llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B", "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B",
          "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B"}
SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm"}
FORMATS = {"bf16": "bfloat16", "fp8": "fp8"}
PROMPT, GEN, TTFT, TPOT, GPUS = 2000, 500, 1.0, 0.040, 8
BISECTIONS = 8  # the rate to within (64 x 8)^(1/2^8): 2.5%


def questions():
    for model in MODELS:
        for hw in SYSTEMS:
            for fmt in FORMATS:
                for mode in ("aggregated", "disaggregated"):
                    yield model, hw, fmt, mode


def _name(q) -> str:
    return "_".join(q).replace("-", "_").replace(".", "")


def experiment(q) -> dict:
    """One AIConfigurator experiment (its flat YAML schema; disaggregated: prefill_* and decode_* fields)."""
    model, hw, fmt, mode = q
    worker = {"model_path": MODELS[model], "system_name": SYSTEMS[hw], "gemm_quant_mode": FORMATS[fmt],
              "kvcache_quant_mode": FORMATS[fmt]}
    if model.startswith("qwen3"):
        worker["moe_quant_mode"] = FORMATS[fmt]
    base = {"serving_mode": "agg" if mode == "aggregated" else "disagg", "isl": PROMPT, "osl": GEN,
            "ttft": TTFT * 1e3, "tpot": TPOT * 1e3, "total_gpus": GPUS, "backend_name": "trtllm"}
    if mode == "aggregated":
        return base | worker
    return base | {f"{side}_{k}": v for side in ("prefill", "decode") for k, v in worker.items()}


def _yaml(exps: dict) -> str:
    lines = ["exps:"] + [f"- {name}" for name in exps]
    for name, fields in exps.items():
        lines.append(f"{name}:")
        lines += [f"  {k}: {v}" for k, v in fields.items()]
    return "\n".join(lines) + "\n"


def run_aic(aic: str, qs: list) -> tuple[dict, float]:
    """{question: AIConfigurator's best row (its CSV's first line)}, and the seconds the search took."""
    exps = {_name(q): experiment(q) for q in qs}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "exps.yaml"
        path.write_text(_yaml(exps))
        start = time.perf_counter()
        subprocess.run([aic, "cli", "exp", "--yaml-path", str(path), "--save-dir", str(Path(tmp) / "out"),
                        "--log-level", "ERROR"], check=False, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        found = {}
        for q in qs:
            hits = sorted(Path(tmp, "out").glob(f"**/{_name(q)}/best_config_topn.csv"))
            if hits:
                with hits[0].open() as handle:
                    rows = list(csv.DictReader(handle))
                if rows:
                    found[q] = rows[0]
    return found, seconds


def aic_version(aic: str) -> str:
    """The package version of the AIConfigurator beside `aic` (its venv's pip), or 'unknown'."""
    pip = Path(aic).with_name("pip")
    shown = subprocess.run([str(pip), "show", "aiconfigurator"], check=False, capture_output=True, text=True).stdout
    return next((line.split(":", 1)[1].strip() for line in shown.splitlines() if line.startswith("Version:")), "unknown")


def answers(aic: str, qs: list, path: Path, rerun: bool) -> tuple[dict, float, str]:
    """AIConfigurator's best row per question, from `path` while it holds every question, else from a new search
    (then written there): (answers, the search's seconds, the version that answered)."""
    if path.exists() and not rerun:
        kept = json.loads(path.read_text())
        found = {q: kept["answers"][_name(q)] for q in qs if _name(q) in kept["answers"]}
        if all(_name(q) in kept["asked"] for q in qs):
            return found, kept["seconds"], kept["version"]
    found, seconds = run_aic(aic, qs)
    version = aic_version(aic)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": version, "seconds": round(seconds), "asked": [_name(q) for q in qs],
                                "answers": {_name(q): row for q, row in found.items()}}, indent=1) + "\n")
    return found, seconds, version


def _whole(row: dict, key: str, default: int = 1) -> int:
    text = (row.get(key) or "").strip()
    return int(float(text)) if text else default


def aic_layout(row: dict, mode: str) -> str:
    if mode == "aggregated":
        per_replica = max(_whole(row, "tp") * _whole(row, "dp") * _whole(row, "pp"), 1)
        return f"{row['parallel']} x{_whole(row, 'num_total_gpus') // per_replica}"
    return (f"P {_whole(row, '(p)workers')} x {row.get('(p)parallel', '?')} + D {_whole(row, '(d)workers')} x "
            f"{row.get('(d)parallel', '?')}")


def roofline_best(q, engine: str = DEFAULT_ENGINE) -> tuple[float, dict | None]:
    """The highest rate (requests/s) 8 GPUs serve within the targets in this mode, and the cheapest row there."""
    model, hw, fmt, mode = q
    ep = (1, 8) if model.startswith("qwen3") else (1,)

    def best(rate):
        frame = plan(model, Workload(rate, PROMPT, GEN), Targets(TTFT, TPOT), hardware=(hw,), tp=(1, 2, 4, 8), ep=ep,
                     weights=(fmt,), kv=(fmt,), engines=(engine,), max_gpus=GPUS, disaggregated=mode == "disaggregated")
        frame = frame[frame["feasible"] & (frame["mode"] == mode)]
        return None if frame.empty else frame.iloc[0].to_dict()

    low, high, found = 0.0, 64.0, None
    for _ in range(BISECTIONS):  # a geometric bisection between 1/8 and 64 requests/s
        rate = math.sqrt(max(low, 0.125) * high)
        row = best(rate)
        low, high, found = (rate, high, row) if row is not None else (low, rate, found)
    return low, found


def layout_of(row: dict, mode: str) -> str:
    split = f"tp{int(row['tp'])}" + (f"ep{int(row['ep'])}" if row["ep"] > 1 else "")
    if mode == "aggregated":
        return f"{split} x{int(row['replicas'])}"
    prefill = f"tp{int(row['prefill_tp'])}" + (f"ep{int(row['prefill_ep'])}" if row["prefill_ep"] > 1 else "")
    return f"P {int(row['prefill_workers'])} x {prefill} + D {int(row['decode_workers'])} x {split}"


def price_aic_choice(q, aic: dict, engine=DEFAULT_ENGINE) -> dict:
    """roofline's TTFT, TPOT and tokens/s per GPU at AIConfigurator's layout and concurrency ({}: not modelled)."""
    model, hw, fmt, mode = q

    # the formats as the engine runs them on the device, as the planner prices them: fp8 W8A8 on Hopper
    precision = as_served(Precision(weights=fmt, kv=fmt), load_hardware(hw).peak_flops)

    def pool(prefix):
        tp, dp = _whole(aic, f"{prefix}tp"), _whole(aic, f"{prefix}dp")
        ep = _whole(aic, f"{prefix}moe_ep")
        if dp > 1:  # data-parallel attention with the experts over the same GPUs: Deployment ep
            return Deployment.of(model, hw, precision=precision, engine=engine, ep=dp) if dp == ep else None
        return Deployment.of(model, hw, precision=precision, engine=engine, tp=tp) if ep == 1 else None
    concurrency = float(aic["concurrency"])
    try:
        if mode == "aggregated":
            d = pool("")
            if d is None:
                return {}
            replicas = _whole(aic, "num_total_gpus") // d.gpus_per_replica
            cap = _whole(aic, "bs") * max(d.ep, 1)
            kv = kv_sequences(d, PROMPT, GEN) if d.ep == 1 else cap
            state = at_load(d, PROMPT, GEN, concurrency=[concurrency / replicas],
                            policy=Policy(8192, max(cap, 1), max(min(kv, cap), 1)))
            ttft, tpot = float(state["ttft_s"][0]), float(state["tpot_s"][0])
            gpus = d.gpus_per_replica * replicas
        else:
            prefill, decode = pool("(p)"), pool("(d)")
            if prefill is None or decode is None:
                return {}
            x, y = _whole(aic, "(p)workers"), _whole(aic, "(d)workers")
            cap = _whole(aic, "(d)bs") * max(decode.ep, 1)
            pools = Disaggregated(prefill, decode, x, y, PROMPT, GEN, decode_max_batch=max(cap, 1))
            state = pools.at_concurrency([concurrency])
            ttft, tpot = float(state["ttft_s"][0]), float(state["tpot_s"][0])
            gpus = pools.gpus
    except ValueError:
        return {}
    rate = concurrency / (ttft + (GEN - 1) * tpot)
    return {"ttft": ttft, "tpot": tpot, "tokens_per_gpu": rate * GEN / gpus}


def table(results: list) -> str:
    head = ("| model | GPU | format | mode | AIC layout | AIC tok/s/GPU | AIC TTFT, TPOT | roofline layout | "
            "roofline tok/s/GPU | ratio | roofline at AIC's layout: tok/s/GPU, TTFT, TPOT | terms |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        lines.append("| " + " | ".join(str(r[k]) for k in ("model", "hw", "fmt", "mode", "aic_layout", "aic_tps",
                                                           "aic_lat", "ours_layout", "ours_tps", "ratio", "at_aic",
                                                           "terms")) + " |")
    return "\n".join(lines)


def terms(ours_tps, aic_tps, at_aic, once, aic_ttft, aic_tpot) -> str:
    """The ratio ours / AIC's as layout x pricing; the pricing as its TPOT and TTFT, and the TPOT's GQA re-reads."""
    if not at_aic:
        return "AIC's layout not modelled here (tp with ep, or attention-DP without matching ep): layout only"
    layout = ours_tps / at_aic["tokens_per_gpu"]
    pricing = at_aic["tokens_per_gpu"] / aic_tps
    rereads = f"; with K/V read once a GQA group (gqa_rereads 0) TPOT {once['tpot'] * 1e3:.1f} ms" if once else ""
    return (f"layout x{layout:.2f} (roofline's open-loop choice over AIC's closed-loop one, both priced by roofline); "
            f"pricing x{pricing:.2f}: TPOT {at_aic['tpot'] * 1e3:.1f} vs {aic_tpot:.1f} ms, TTFT "
            f"{at_aic['ttft'] * 1e3:.0f} vs {aic_ttft:.0f} ms at AIC's layout and concurrency{rereads}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aic", default="/work/aic-venv/bin/aiconfigurator")
    parser.add_argument("--out", default="benchmarks/results/aiconfigurator.md")
    parser.add_argument("--only", help="the questions whose model contains this (a quick check)")
    parser.add_argument("--answers", type=Path, default=Path("benchmarks/results/aiconfigurator-answers.json"),
                        help="AIConfigurator's answers, kept between runs")
    parser.add_argument("--rerun", action="store_true", help="ask AIConfigurator again even if the answers are kept")
    parser.add_argument("--engine", default=DEFAULT_ENGINE, help=f"roofline's engine profile (default {DEFAULT_ENGINE}, plan's)")
    args = parser.parse_args()
    qs = [q for q in questions() if args.only is None or args.only in q[0]]
    aic, aic_seconds, version = answers(args.aic, qs, args.answers, args.rerun)
    results, ours_seconds = [], 0.0
    for q in qs:
        start = time.perf_counter()
        rate, ours = roofline_best(q, args.engine)
        ours_seconds += time.perf_counter() - start
        row = aic.get(q)
        r = dict(zip(("model", "hw", "fmt", "mode"), q))
        r["ours_layout"] = layout_of(ours, q[3]) if ours else "none within 8 GPUs"
        ours_tps = rate * GEN / ours["gpus"] if ours else math.nan
        r["ours_tps"] = f"{ours_tps:.0f}" if ours else "-"
        if row is None:
            r.update(aic_layout="no result", aic_tps="-", aic_lat="-", ratio="-", at_aic="-",
                     terms="AIC returned no configuration")
            results.append(r)
            continue
        aic_tps, aic_ttft, aic_tpot = float(row["tokens/s/gpu"]), float(row["ttft"]), float(row["tpot"])
        at_aic = price_aic_choice(q, row, args.engine)
        once = price_aic_choice(q, row, dataclasses.replace(load_engine(args.engine), gqa_rereads=0.0))
        r.update(aic_layout=aic_layout(row, q[3]), aic_tps=f"{aic_tps:.0f}",
                 aic_lat=f"{aic_ttft:.0f} ms, {aic_tpot:.1f} ms",
                 ratio=f"{ours_tps / aic_tps:.2f}" if ours else "-",
                 at_aic=(f"{at_aic['tokens_per_gpu']:.0f}, {at_aic['ttft'] * 1e3:.0f} ms, {at_aic['tpot'] * 1e3:.1f} ms"
                         if at_aic else "not modelled"),
                 terms=terms(ours_tps, aic_tps, at_aic, once, aic_ttft, aic_tpot) if ours else "roofline finds none")
        results.append(r)
    ratios = [float(r["ratio"]) for r in results if r["ratio"] not in ("-",)]
    summary = (f"{len(qs)} questions; AIConfigurator {version} answered {len(aic)} in {aic_seconds:.0f} s (one `cli exp` run), "
               f"roofline ({args.engine}) {sum(r['ours_tps'] != '-' for r in results)} in {ours_seconds:.0f} s "
               f"({BISECTIONS} plans each); "
               f"tokens/s per GPU, roofline / AIC: median {np.median(ratios):.2f}, range {min(ratios):.2f}-"
               f"{max(ratios):.2f}" if ratios else "no ratios")
    text = f"# roofline plan against AIConfigurator\n\n{__doc__.split(chr(10), 1)[1]}\n{summary}\n\n{table(results)}\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
