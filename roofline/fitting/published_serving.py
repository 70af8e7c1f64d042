"""The aggregated rows of serving-hopper.csv (../shared/published/README.md) as deployments under a closed-loop load.

A row is one serving benchmark: `batch_size` requests in flight (closed loop), `isl` in, `osl` out, on
`tp_size` GPUs of an H100 SXM or H200 SXM; measured mean TTFT and TPOT. Read here: the aggregated (`agg`) rows
whose model is bundled (data/models), split by tensor parallelism alone (pp 1, no attention data parallelism,
no expert parallelism), in 16-bit, fp8 or int4 weight-only formats (nvfp4 is not modelled); fp8 rows run W8A8
(the GEMMs at the fp8 peak: vLLM, SGLang and TensorRT-LLM quantize activations to fp8 for fp8 checkpoints); the
KV cache is taken as 16-bit (the rows do not say). Each is priced twice with one engine profile:
  before: today's offline estimates: TPOT the decode step of a batch of `batch_size` at the prompt's
          context, TTFT one request's prefill (as `plan` reports it);
  after:  the steady state at that concurrency (roofline.serving.load) under the engine's default scheduler
          (its profile's `scheduler:`): TTFT and TPOT under the load, TPOT = (E2E - TTFT) / (osl - 1), the
          benchmarks' per-request mean.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..models.config import load_model
from ..deployment import Deployment
from ..engine import Engine
from ..hardware import load_hardware
from ..model import DECODE, PREFILL, decode_context
from ..precision import Precision
from ..serving.load import LoadModel, Policy, kv_sequences

MODELS = {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
          "meta-llama/Llama-3.1-70B": "llama-3.1-70b", "openai/gpt-oss-120b": "gpt-oss-120b"}
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200"}
WEIGHTS = {"": "bf16", "fp8": "fp8", "fp8_block": "fp8", "int4_wo": "int4"}


@dataclass(frozen=True)
class ServingRow:
    id: str
    backend: str
    model: str
    hardware: str
    weights: str
    tp: int
    concurrency: int
    prompt: int
    gen: int
    ttft_s: float
    tpot_s: float


def _layout_is_tp_only(raw: dict) -> bool:
    def whole(name):
        text = raw.get(name) or "1"
        return int(float(text)) if text.strip() else 1
    return whole("pp_size") == 1 and whole("attention_dp_size") <= 1 and whole("moe_ep_size") <= 1


def read_serving_rows(path: Path) -> tuple[list[ServingRow], int]:
    """(the rows read, the aggregated rows left out: model not bundled, layout or format not modelled)."""
    rows, skipped = [], 0
    with Path(path).open(newline="") as handle:
        for raw in csv.DictReader(handle):
            if raw["mode"] != "agg":
                continue
            gemm = (raw.get("gemm_quant_mode") or "").strip()
            if raw["model_path"] not in MODELS or raw["system"] not in SYSTEMS or gemm not in WEIGHTS \
                    or not _layout_is_tp_only(raw):
                skipped += 1
                continue
            rows.append(ServingRow(raw["id"], raw["backend"], MODELS[raw["model_path"]], SYSTEMS[raw["system"]],
                                   WEIGHTS[gemm], int(float(raw["tp_size"])), int(float(raw["batch_size"])),
                                   int(raw["isl"]), int(raw["osl"]), float(raw["silicon_ttft_ms"]) / 1e3,
                                   float(raw["silicon_tpot_ms"]) / 1e3))
    return rows, skipped


def _deployment(row: ServingRow, engine: Engine) -> Deployment:
    config = load_model(row.model)
    experts = "mxfp4" if row.model.startswith("gpt-oss") else None  # its experts ship in MXFP4
    activations = "fp8" if row.weights == "fp8" else "bf16"  # W8A8 fp8; int4 is weight-only (bf16 GEMMs)
    return Deployment(config, load_hardware(row.hardware),
                      Precision(weights=row.weights, activations=activations, experts=experts), tp=row.tp, engine=engine)


def predict(rows: list[ServingRow], engine: Engine) -> dict[str, np.ndarray]:
    """Per row: before (offline) and after (under load) TTFT and TPOT, seconds; NaN where not priced."""
    out = {k: np.full(len(rows), np.nan) for k in ("ttft_before", "tpot_before", "ttft_after", "tpot_after")}
    groups: dict = {}
    for i, row in enumerate(rows):
        groups.setdefault((row.model, row.hardware, row.weights, row.tp, row.prompt, row.gen), []).append(i)
    for (_, _, _, _, prompt, gen), members in groups.items():
        d = _deployment(rows[members[0]], engine)
        concurrency = np.array([rows[i].concurrency for i in members], dtype=float)
        decode = d.step(DECODE, concurrency, float(decode_context(prompt)))
        out["tpot_before"][members] = np.broadcast_to(decode.total_s, concurrency.shape)
        out["ttft_before"][members] = float(d.step(PREFILL, 1.0, float(prompt)).total_s) + engine.request_overhead_s
        budget, running = engine.scheduler.token_budget, engine.scheduler.max_sequences
        pool = kv_sequences(d, prompt, gen, token_budget=budget)
        if pool < 1:
            continue
        load = LoadModel(d, prompt, gen, Policy(budget, running, pool)).at_concurrency(concurrency)
        out["ttft_after"][members], out["tpot_after"][members] = load["ttft_s"], load["tpot_s"]
    return out


def scores(rows: list[ServingRow], predicted: dict) -> dict:
    """Median and p90 of |predicted / measured − 1| per backend and metric, before and after."""
    backends = sorted({r.backend for r in rows}) + ["all"]
    measured = {"ttft": np.array([r.ttft_s for r in rows]), "tpot": np.array([r.tpot_s for r in rows])}
    report = {}
    for backend in backends:
        chosen = np.array([backend in ("all", r.backend) for r in rows])
        report[backend] = {}
        for metric in ("ttft", "tpot"):
            for when in ("before", "after"):
                error = np.abs(predicted[f"{metric}_{when}"][chosen] / measured[metric][chosen] - 1)
                error = error[np.isfinite(error)]
                report[backend][f"{metric}_{when}"] = {
                    "n": int(error.size), "median": float(np.median(error)) if error.size else None,
                    "p90": float(np.percentile(error, 90)) if error.size else None}
    return report
