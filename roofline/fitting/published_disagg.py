"""The disaggregated rows of serving-hopper.csv (../shared/published/README.md) priced as two pools under a closed loop.

A row is one benchmark of `silicon_concurrency` requests in flight (closed loop), `isl` in, `osl` out, on
prefill workers and decode workers of an H100 SXM or H200 SXM (the `prefill_*` and `decode_*` columns); measured
mean TTFT and TPOT. Each is priced by roofline.serving.disaggregated at that concurrency with one engine profile.
Each pool's layout reads as an aggregated row's does (serving_rows.layout with the pool's prefix): tensor
parallelism, the experts split by TP, EP or both under it (one GPU's expected bytes and FLOPs the same), or
data-parallel attention over the experts (Deployment ep); within one node. DeepSeek-R1 is priced as deepseek-v3
(serving_rows.MODELS). The KV cache is taken as 16-bit (the rows do not say). The GEMMs run as the engine runs the
checkpoint, as the aggregated rows' do (roofline.precision.as_served): DeepSeek's fp8 W8A8 on H100 and H200.
Workers: a row stating none (the InferenceMAX files, `source_file=2026-...`) is not read. Its benchmark ran an
unstated number of workers: 54 of those 248 rows repeat, to the microsecond, a db-dump row that states them
(1 to 5 prefill and 1 to 9 decode workers), and in half of those the layout columns also drop the data-parallel
attention the db-dump row states. Read as one worker a pool, the TensorRT-LLM DeepSeek rows cannot hold their
concurrency: one tp-8 decode worker's KV pool holds 89 requests of 8192 + 1024 tokens (400 of 1024 + 1024) where
the rows run up to 768 (3,584) at a 44 ms (49 ms) TPOT, so the closed loop queues the rest before the prefill and
TTFT grows by minutes (the 2,485% p90 of that reading). A repeat is counted once, as the row stating its workers.
Concurrency: `silicon_concurrency=` in the source; a row without it is not read. Its decode pool's running
sequences, batch x dp x workers, equal the concurrency in every row stating both, but in the 7 rows stating none
(Qwen3 on H100s, 4000 in, 1000 out) they are the engine's cap, not the benchmark's load: at C = 448 the vLLM
Qwen3-32B row's measured TTFT and TPOT give 49 requests/s, 6.2 a one-GPU prefill worker, whose 4000-token prompts
take 0.14 s each even at the fp8 tensor peak: 88% busy, an M/D/1 wait (0.5 s) alone above the measured TTFT
(0.37 s). A decode batch size caps each decode worker's running sequences (per attention-data-parallel rank);
none given, the KV pool does (roofline.serving.load.kv_sequences).
Left out, counted by reason: workers or concurrency not stated (or a repeat), a pool spanning nodes (tp x dp > 8:
its collectives would cross the network, which the pricer's layouts do not model), another layout serving_rows
does not read, a model or device not bundled, a format outside the table.
"""
from __future__ import annotations

import csv
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..deployment import Deployment
from ..engine import Engine
from ..hardware import load_hardware
from ..memory import workspace
from ..models.config import load_model
from ..precision import Precision, as_served
from ..serving.disaggregated import Disaggregated
from ..serving.load import kv_sequences
from .serving_rows import MODELS, SYSTEMS, concurrency as stated_concurrency, formats, layout, spans_nodes

CONFIGURATION = re.compile(r"config_id=(\d+)")


@dataclass(frozen=True)
class Pool:
    tp: int
    ep: int
    workers: int
    batch: int | None  # running sequences a worker holds (decode), None: memory's
    expert_tp: int | None = None  # GPUs splitting each routed expert (Deployment.expert_tp); None: all tp


@dataclass(frozen=True)
class DisaggRow:
    id: str
    backend: str
    model: str
    hardware: str
    weights: str
    experts: str | None
    prefill: Pool
    decode: Pool
    concurrency: int
    prompt: int
    gen: int
    ttft_s: float
    tpot_s: float
    precision: Precision | None = None  # the formats as the aggregated rows read them (serving_rows.formats)
    configuration: str = ""  # the source's config_id: one deployment's rows at several concurrencies


def _count(raw: dict, name: str, blank: int | None = 1) -> int | None:
    text = (raw.get(name) or "").strip()
    return blank if not text else int(float(text))


def _pool(raw: dict, model: str, side: str) -> tuple[Pool | None, str]:
    """A pool's layout as Deployment models it (serving_rows.layout), or the reason it does not."""
    prefix = f"{side}_"
    split = layout(raw, model, prefix)
    if split is None:
        return None, "a pool spanning nodes" if spans_nodes(raw, prefix) else "layout not modelled"
    tp, dp, expert_tp = split
    batch = _count(raw, f"{prefix}batch_size", None)  # per attention-data-parallel rank
    return Pool(tp, dp, _count(raw, f"{prefix}num_workers"), None if batch is None else batch * dp, expert_tp), ""


def _measurement(raw: dict) -> tuple:
    """What identifies one benchmark run: the engine, device, workload, concurrency and both measured means."""
    return (raw["backend"], raw["system"], raw["isl"], raw["osl"], stated_concurrency(raw) if _states_concurrency(raw)
            else None, round(float(raw["silicon_ttft_ms"]), 6), round(float(raw["silicon_tpot_ms"]), 6))


def _states_concurrency(raw: dict) -> bool:
    return "silicon_concurrency=" in (raw.get("silicon_data_source") or "")


def _configuration(raw: dict) -> str:
    found = CONFIGURATION.search(raw.get("silicon_data_source") or "")
    return found.group(1) if found else raw["id"]


def _states_workers(raw: dict) -> bool:
    return all((raw.get(f"{side}_num_workers") or "").strip() for side in ("prefill", "decode"))


def read_disagg_rows(path: Path) -> tuple[list[DisaggRow], Counter]:
    """(the disaggregated rows read, the rows left out by reason)."""
    with Path(path).open(newline="") as handle:
        raws = [raw for raw in csv.DictReader(handle) if raw["mode"] == "disagg"]
    stated = {_measurement(raw) for raw in raws if _states_workers(raw)}
    rows, skipped = [], Counter()
    for raw in raws:
        if not _states_workers(raw):
            skipped["a repeat of a row stating its workers" if _measurement(raw) in stated
                    else "workers not stated"] += 1
            continue
        if raw["model_path"] not in MODELS or raw["system"] not in SYSTEMS:
            skipped["model or system not bundled"] += 1
            continue
        model = MODELS[raw["model_path"]]
        precision = formats(raw, model)
        if precision is None:
            skipped["format not modelled"] += 1
            continue
        (prefill, why_p), (decode, why_d) = _pool(raw, model, "prefill"), _pool(raw, model, "decode")
        if prefill is None or decode is None:
            skipped[why_p or why_d] += 1
            continue
        if not _states_concurrency(raw):
            skipped["concurrency not stated"] += 1
            continue
        concurrency = stated_concurrency(raw)
        rows.append(DisaggRow(raw["id"], raw["backend"], model, SYSTEMS[raw["system"]], precision.weights,
                              precision.experts, prefill, decode, concurrency,
                              int(raw["isl"]), int(raw["osl"]), float(raw["silicon_ttft_ms"]) / 1e3,
                              float(raw["silicon_tpot_ms"]) / 1e3, precision, _configuration(raw)))
    return rows, skipped


def _deployment(row: DisaggRow, pool: Pool, engine: Engine) -> Deployment:
    """One pool's worker, its formats as the engine runs them (precision.as_served: fp8 W8A8), as the aggregated rows'."""
    hardware = load_hardware(row.hardware)
    precision = as_served(row.precision or Precision(weights=row.weights, experts=row.experts), hardware.peak_flops)
    return Deployment(load_model(row.model), hardware, precision, tp=pool.tp, ep=pool.ep, expert_tp=pool.expert_tp,
                      engine=engine)


def decode_kv_sequences(d: Deployment, prompt: int, gen: int) -> float:
    """Sequences of P + G tokens a decode replica's KV pools hold: roofline.serving.load.kv_sequences, and under
    expert parallelism each GPU's pool beside its own share of the weights (1/ep of the routed experts), x ep."""
    if d.ep == 1:
        return kv_sequences(d, prompt, gen, token_budget=8192)
    piece, pieces = workspace(d, float(prompt), 8192)
    activations = float(np.ravel(piece)[0]) * float(np.minimum(pieces, 1e300))
    weights = d.memory_bytes(0.0, 0.0)[0]  # one GPU's weights: the shared layers whole, 1/ep of the experts
    room = float(d.engine.memory.kv_room(d.hardware.capacity_bytes, weights, activations))
    per_sequence = float(d.compiled.kv_cache(1.0, float(d.engine.memory.blocks_tokens(prompt + gen)),
                                             d.precision.kv_bytes))
    return math.floor(room / per_sequence) * d.ep if room > 0 else 0.0


def price(row: DisaggRow, engine: Engine) -> Disaggregated | None:
    """The row's two pools, or None where the decode pool holds no sequence in memory."""
    prefill, decode = _deployment(row, row.prefill, engine), _deployment(row, row.decode, engine)
    pool = decode_kv_sequences(decode, row.prompt, row.gen)
    cap = pool if row.decode.batch is None else min(row.decode.batch, pool)
    if cap < 1:
        return None
    return Disaggregated(prefill, decode, row.prefill.workers, row.decode.workers, row.prompt, row.gen,
                         decode_max_batch=int(cap), decode_kv_sequences=pool)


def predict(rows: list[DisaggRow], engine: Engine) -> dict[str, np.ndarray]:
    """Per row: TTFT and TPOT at the row's concurrency, seconds, and how busy its prefill pool is; NaN where not
    priced (memory)."""
    out = {name: np.full(len(rows), np.nan) for name in ("ttft", "tpot", "prefill_busy")}
    for i, row in enumerate(rows):
        pools = price(row, engine)
        if pools is None:
            continue
        state = pools.at_concurrency([float(row.concurrency)])
        out["ttft"][i], out["tpot"][i] = state["ttft_s"][0], state["tpot_s"][0]
        out["prefill_busy"][i] = state["prefill_busy"][0]
    return out


def scores(rows: list[DisaggRow], predicted: dict) -> dict:
    """Median and p90 of |predicted / measured − 1| per backend and per model, TTFT and TPOT."""
    measured = {"ttft": np.array([r.ttft_s for r in rows]), "tpot": np.array([r.tpot_s for r in rows])}
    groups = {f"backend {b}": [r.backend == b for r in rows] for b in sorted({r.backend for r in rows})}
    groups |= {f"model {m}": [r.model == m for r in rows] for m in sorted({r.model for r in rows})}
    groups["all"] = [True] * len(rows)
    report = {}
    for name, chosen in groups.items():
        chosen = np.array(chosen, dtype=bool)
        report[name] = {}
        for metric in ("ttft", "tpot"):
            error = np.abs(predicted[metric][chosen] / measured[metric][chosen] - 1)
            error = error[np.isfinite(error)]
            report[name][metric] = {"n": int(error.size),
                                    "median": float(np.median(error)) if error.size else math.nan,
                                    "p90": float(np.percentile(error, 90)) if error.size else math.nan}
    return report
