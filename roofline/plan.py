"""`plan`: the cheapest deployments that serve a workload within its latency targets, and why others fail.

For each candidate (hardware, tensor-parallel degree, weight format, engine), priced by the one step
pricer (a Deployment):
  memory   the weights and one sequence's KV (prompt + gen tokens) and workspace must fit: max batch >= 1;
  TTFT     one request's prefill (plus the engine's per-request cost) <= the TTFT target;
  TPOT     the largest batch B <= max batch whose decode step, at the mean context P + G/2, meets the
           TPOT target: TPOT grows with B, so a one-dimensional bisection on the model's own step;
  load     a replica serves 1 / (G TPOT(B) / B + TTFT) requests/s (each request's G decode slots shared
           by B, its prefill alone); replicas = ceil(rate / that); GPUs = replicas x tp.
Cost per million output tokens = GPUs x $/GPU-hour / (rate x G x 3600) x 1e6, at the offered load.
Left out: queueing (percentiles need the batching simulation), prefill and decode sharing a step
(chunked prefill), pipeline and expert parallelism as candidates.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from .bounds import BOUNDS
from .config import load_model
from .deployment import Deployment
from .engine import load_engine
from .evaluate import DEFAULT_PREFILL_CHUNK, evaluate, memory
from .hardware import DATA_DIR, load_hardware
from .model import DECODE, decode_context
from .precision import Precision

PRICES = DATA_DIR / "prices.yaml"


@dataclass(frozen=True)
class Workload:
    rate: float  # requests per second
    prompt: int  # tokens
    gen: int  # output tokens


@dataclass(frozen=True)
class Targets:
    ttft_s: float
    tpot_s: float


def load_prices(path: str | Path | None = None) -> dict[str, float]:
    path = Path(path) if path else PRICES
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"prices {str(path)!r}: cannot read YAML ({err})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"prices {str(path)!r}: expected hardware id -> {{usd_per_gpu_hour: ...}}")
    out = {}
    for hw, entry in raw.items():
        value = entry.get("usd_per_gpu_hour") if isinstance(entry, dict) else entry
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"prices {str(path)!r}: {hw}.usd_per_gpu_hour must be a positive number, got {value!r}")
        out[str(hw)] = float(value)
    return out


def largest_batch(d: Deployment, context: float, tpot_s: float, max_batch: int) -> tuple[int, float]:
    """(largest B <= max_batch with TPOT(B) <= tpot_s, its TPOT); (0, TPOT(1)) when even B = 1 misses."""
    def tpot(b):
        return float(d.step(DECODE, float(b), decode_context(context)).total_s)
    if tpot(1) > tpot_s:
        return 0, tpot(1)
    if tpot(max_batch) <= tpot_s:
        return max_batch, tpot(max_batch)
    lo, hi = 1, max_batch  # tpot(lo) meets the target, tpot(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if tpot(mid) <= tpot_s else (lo, mid)
    return lo, tpot(lo)


def candidate(model, hw_id: str, tp: int, weights: str, engine_name: str, work: Workload, targets: Targets,
              price: float | None, prefill_chunk) -> dict:
    row = {"hardware": hw_id, "tp": tp, "weights": weights, "engine": engine_name}
    if price is None:
        return {**row, "feasible": False, "rejected": f"price: no $/GPU-hour for {hw_id} (add it with --prices)"}
    try:
        d = Deployment(model, load_hardware(hw_id), Precision(weights=weights), tp=tp, engine=load_engine(engine_name))
    except ValueError as err:
        return {**row, "feasible": False, "rejected": f"layout: {err}"}
    mem = memory(d, 1.0, float(work.prompt), float(work.gen), prefill_chunk)
    max_batch = int(np.ravel(mem["max_batch"])[0])
    if max_batch < 1:
        return {**row, "feasible": False, "rejected": "memory: the weights and one sequence do not fit on a GPU"}
    ttft = float(evaluate(d, 1.0, float(work.prompt), float(work.gen), e2e=False, prefill_chunk=prefill_chunk)["ttft_s"])
    if ttft > targets.ttft_s:
        return {**row, "feasible": False, "ttft_s": ttft,
                "rejected": f"TTFT: {ttft * 1e3:.1f} ms at batch 1 > {targets.ttft_s * 1e3:g} ms"}
    batch, tpot = largest_batch(d, work.prompt + work.gen / 2, targets.tpot_s, max_batch)
    if batch == 0:
        return {**row, "feasible": False, "ttft_s": ttft, "tpot_s": tpot,
                "rejected": f"TPOT: {tpot * 1e3:.2f} ms at batch 1 > {targets.tpot_s * 1e3:g} ms"}
    per_replica = 1 / (work.gen * tpot / batch + ttft)  # requests/s
    replicas = math.ceil(work.rate / per_replica)
    gpus = replicas * tp
    step = d.step(DECODE, float(batch), decode_context(work.prompt + work.gen / 2))
    tokens_per_s = work.rate * work.gen
    return {**row, "feasible": True, "rejected": "", "batch": batch, "max_batch": max_batch, "ttft_s": ttft,
            "tpot_s": tpot, "replicas": replicas, "gpus": gpus, "usd_per_hour": gpus * price,
            "usd_per_million_tokens": gpus * price / (tokens_per_s * 3600) * 1e6,
            "tokens_per_s_per_gpu": tokens_per_s / gpus,
            "capacity_tokens_per_s_per_gpu": per_replica * replicas * work.gen / gpus,  # what it could serve
            "decode_bound": BOUNDS[int(np.ravel(step.bound)[0])],
            "ttft_headroom": 1 - ttft / targets.ttft_s, "tpot_headroom": 1 - tpot / targets.tpot_s}


def plan(model, work: Workload, targets: Targets, hardware=("h100-sxm", "a100-80gb"), tp=(1, 2, 4, 8),
         weights=("bf16", "fp8", "int8", "int4"), engines=("ideal",), prices: dict | None = None,
         prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK) -> pd.DataFrame:
    """Every candidate, feasible ones first by cost per million output tokens, then by the tokens/s per GPU
    it could serve (its headroom for more load);
    the others with the reason they fail (memory, TTFT, TPOT, layout, price)."""
    if not (work.rate > 0 and work.prompt >= 1 and work.gen >= 1):
        raise ValueError(f"workload: rate > 0, prompt >= 1 and gen >= 1 are needed, got {work}")
    if not (targets.ttft_s > 0 and targets.tpot_s > 0):
        raise ValueError(f"targets: TTFT and TPOT must be positive seconds, got {targets}")
    config = load_model(model)
    prices = load_prices() if prices is None else prices
    rows = [candidate(config, h, t, w, e, work, targets, prices.get(h), prefill_chunk)
            for h, t, w, e in itertools.product(hardware, tp, weights, engines)]
    frame = pd.DataFrame(rows)
    if "usd_per_million_tokens" not in frame:
        frame["usd_per_million_tokens"] = np.nan
        frame["capacity_tokens_per_s_per_gpu"] = np.nan
    return frame.sort_values(["feasible", "usd_per_million_tokens", "capacity_tokens_per_s_per_gpu"],
                             ascending=[False, True, False], na_position="last").reset_index(drop=True)
