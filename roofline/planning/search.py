"""Every candidate deployment of a workload, priced through the one step pricer, with whole grids at a time.

A candidate is (hardware, tp, pp, ep, weight and KV formats, engine) x (batch cap, prefill chunk). The
first part is a Deployment; for it the search asks the Deployment for
  memory   the largest batch that fits one GPU (weights, KV of the mean sequence, one prefill chunk's
           workspace; under pp the fullest stage, under ep one GPU's share): roofline.memory's model;
  TTFT     one request's prefill step plus the engine's per-request cost (under ep, one request per GPU) and its
           turn through the server's front end (roofline.serving.front_end);
  TPOT     the decode step at the mean context P + G/2 at every batch that fits, in one call (past
           WHOLE_GRID, a geometric grid, then every batch in the bracket where the target is crossed):
           TPOT grows with B, so the largest B meeting it is exact; a batch cap or a smaller memory limit clips it.
Load: that largest batch is the capacity batch (the scheduler's running-sequence cap); the candidate is then
priced under load by roofline.planning.under_load: the fewest replicas whose steady state at rate / replicas
(roofline.serving.load: queueing, prefill chunks sharing steps with decoders) meets TTFT, TPOT and E2E;
GPUs = replicas x tp x pp x ep. Its capacity, 1 / (G TPOT(B) / B + TTFT) requests/s a replica at the capacity
batch, is the tie-break (the headroom), and the first guess of the replica count.
Cost per million output tokens = GPUs x $/GPU-hour / (rate x G x 3600) x 1e6, at the offered load.
Left out: spread lengths and preemption (roofline.planning.frontier simulates them for the percentiles),
pipeline micro-batches (a pipeline runs one batch through its stages: TPOT is their sum).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..bounds import BOUNDS
from ..deployment import Deployment
from ..hardware import load_hardware
from ..memory import memory
from ..model import DECODE, PREFILL, decode_context
from ..precision import Precision, as_served
from ..serving.front_end import FrontEnd
from .under_load import bound_at, fewest_replicas, load_model, policy_of

WHOLE_GRID = 2048  # up to this many batches fit in memory: price them all in one call
COARSE_POINTS = 48  # past it a geometric grid, neighbours (max batch)^(1/47) apart (~19% at 4096), then the bracket


@dataclass(frozen=True)
class Core:
    """What one Deployment answers, before batch caps and prefill chunks split it into candidates."""
    d: Deployment | None
    rejected: str = ""
    ttft_s: float = math.nan
    max_batch: dict | None = None  # prefill chunk -> largest batch that fits
    best_batch: int = 0  # largest B meeting TPOT within the largest memory limit
    grid: np.ndarray | None = None  # batches priced, ascending
    tpot_s: np.ndarray | None = None  # TPOT at each
    bound: np.ndarray | None = None  # binding resource index at each
    need_bytes: float = math.nan  # one GPU's bytes at batch 1 (for the one-sentence verdict)
    ideal: Deployment | None = None  # the same layout under the ideal engine: the bound beside each row


def fitting_batches(d: Deployment, prompt: float, gen: float, chunks) -> dict:
    """Per prefill chunk (largest batch a replica holds, one GPU's bytes at one sequence per GPU): roofline.memory's
    model, for pp per stage (the fullest binds) and for ep per expert shard."""
    out = {}
    for chunk in chunks:
        fit = memory(d, 1.0, prompt, gen, chunk)["max_batch"]
        need = memory(d, float(d.ep), prompt, gen, chunk)["memory_bytes"]
        out[chunk] = int(np.ravel(fit)[0]), float(np.ravel(need)[0])
    return out


def core(model, hw, tp, pp, ep, weights, kv, engine_name, prompt, gen, tpot_target, chunks, caps=(),
         priced=True, experts=None) -> Core:
    try:
        hardware = load_hardware(hw)
        # the formats as a serving engine runs them on this device: fp8 weights W8A8 where it has fp8 tensor cores
        precision = as_served(Precision(weights=weights, kv=kv, experts=experts), hardware.peak_flops)
        d = Deployment.of(model, hardware, precision=precision, engine=engine_name, tp=tp, pp=pp, ep=ep)
    except ValueError as err:
        return Core(None, f"layout: {err}")
    if not priced:
        return Core(d)
    fits = fitting_batches(d, prompt, gen, chunks)
    need = min(b for _, b in fits.values())
    max_batch = {chunk: m for chunk, (m, _) in fits.items()}
    top = max(max_batch.values())
    if top < 1:
        return Core(d, "memory", max_batch=max_batch, need_bytes=need)
    # a lone request: its prefill, the engine's request cost and its turn through the server's front end
    ttft = float(d.step(PREFILL, float(ep), prompt).total_s) + d.request_s + FrontEnd.of(d.engine).alone_s
    extra = list(max_batch.values()) + [c for c in caps if c is not None and c <= top]
    best, grid, times, bounds = largest_within(d, decode_context(prompt + gen / 2), top, tpot_target, extra)
    ideal = None if engine_name == "ideal" else Deployment.of(
        model, hardware, precision=precision, engine="ideal", tp=tp, pp=pp, ep=ep)
    return Core(d, "", ttft, max_batch, best, grid, times, bounds, need, ideal)


def _decode(d: Deployment, batches: np.ndarray, context: float) -> tuple[np.ndarray, np.ndarray]:
    step = d.step(DECODE, batches, context)
    return np.broadcast_to(step.total_s, batches.shape), np.broadcast_to(step.bound, batches.shape)


def largest_within(d: Deployment, context: float, top: int, target: float, extra=()) -> tuple:
    """(largest B <= top with TPOT(B) <= target, or 0; the batches priced; their TPOT; their bound). TPOT grows
    with B: every batch up to WHOLE_GRID in one call; past it a geometric grid (with `extra` batches), then
    every batch between the last point that meets the target and the next."""
    if top <= WHOLE_GRID:  # a step's cost is mostly per op, not per point
        grid = np.arange(1.0, top + 1)
    else:
        grid = np.unique(np.concatenate([np.round(np.geomspace(1, top, COARSE_POINTS)), extra]))
    times, bounds = _decode(d, grid, context)
    meets = np.flatnonzero(times <= target)
    best = int(grid[meets[-1]]) if meets.size else 0
    if not 0 < best < top or top <= WHOLE_GRID:
        return best, grid, times, bounds
    fine = np.arange(best + 1, grid[meets[-1] + 1], dtype=float)
    if not fine.size:
        return best, grid, times, bounds
    fine_times, fine_bounds = _decode(d, fine, context)
    inside = np.flatnonzero(fine_times <= target)
    best = int(fine[inside[-1]]) if inside.size else best
    order = np.argsort(np.concatenate([grid, fine]))
    return (best, *(np.concatenate(pair)[order] for pair in ((grid, fine), (times, fine_times), (bounds, fine_bounds))))


def rows_of(c: Core, base: dict, work, targets, price, caps, chunks, max_gpus: int | None = None,
            fixed: int | None = None) -> list[dict]:
    """One row per (batch cap, prefill chunk) of a Deployment's answers, priced under load at the fewest replicas
    meeting the targets (or `fixed` replicas); more GPUs than max_gpus is a rejection."""
    out = []
    gen = work.gen_mean
    for chunk in chunks:
        for cap in caps:
            row = {**base, "max_batch_cap": cap, "prefill_chunk": chunk, "feasible": False, "deployment": c.d}
            out.append(row)
            if c.d is None:
                row["rejected"] = c.rejected
                continue
            if price is None:
                row["rejected"] = f"price: no $/GPU-hour for {base['hardware']} (add it with --prices)"
                continue
            fit = c.max_batch[chunk]
            limit = fit if cap is None else min(fit, cap)
            row.update(max_batch=fit, memory_bytes_batch1=c.need_bytes)
            if limit < 1:
                row["rejected"] = (f"memory: {c.need_bytes / 1e9:.1f} GB at batch 1 > "
                                   f"{c.d.hardware.capacity_bytes / 1e9:.0f} GB per GPU")
                continue
            row["ttft_s"] = row["ttft_alone_s"] = c.ttft_s
            if c.ttft_s > targets.ttft_s:
                row["rejected"] = f"TTFT: {c.ttft_s * 1e3:.1f} ms at batch 1 > {targets.ttft_s * 1e3:g} ms"
                continue
            batch = min(limit, c.best_batch)
            i = int(np.searchsorted(c.grid, max(batch, 1)))
            tpot = float(c.tpot_s[i])
            row["tpot_s"] = tpot
            if batch < 1:
                row["rejected"] = f"TPOT: {tpot * 1e3:.2f} ms at batch 1 > {targets.tpot_s * 1e3:g} ms"
                continue
            per_replica = 1 / (gen * tpot / batch + c.ttft_s)  # requests/s, the capacity formula
            row.update(capacity_batch=batch, tpot_at_capacity_s=tpot)
            policy = policy_of(batch, fit, chunk, int(round(work.prompt_mean)))
            found = fewest_replicas(load_model(c.d, work, policy), work.rate, targets,
                                    math.ceil(work.rate / per_replica), fixed)
            replicas = found.pop("replicas")
            gpus = replicas * c.d.gpus_per_replica
            row.update(found, replicas=replicas, gpus=gpus, ttft_s=found.get("ttft_s", math.nan),
                       tpot_s=found.get("tpot_s", math.nan))
            row.update(bound_at(c.ideal, work, policy.for_engine(c.d), work.rate / replicas))  # the candidate's steps
            if "rejected" in found:
                continue
            row["batch"] = row.pop("in_flight")
            if max_gpus is not None and gpus > max_gpus:
                row["rejected"] = f"GPUs: {gpus} needed ({replicas} replicas of {c.d.gpus_per_replica}) > {max_gpus}"
                continue
            tokens_per_s = work.rate * gen
            row.update(feasible=True, rejected="",
                       usd_per_hour=gpus * price, usd_per_million_tokens=gpus * price / (tokens_per_s * 3600) * 1e6,
                       tokens_per_s_per_gpu=tokens_per_s / gpus,
                       capacity_tokens_per_s_per_gpu=per_replica * gen / c.d.gpus_per_replica,
                       decode_bound=BOUNDS[int(c.bound[i])], ttft_headroom=1 - row["ttft_s"] / targets.ttft_s,
                       tpot_headroom=1 - row["tpot_s"] / targets.tpot_s)
            row["binding"] = "memory" if batch == fit else ("batch cap" if batch == cap else "TPOT")
    return out
