"""The percentile check of `plan`'s frontier: the cheapest candidates per hardware served request by request.

Each replica gets rate / replicas of Poisson arrivals with the workload's length distributions, served by
roofline.serving.batching.simulate_continuous at the candidate's batch (its capacity batch as the cap),
its KV budget (the search's: max batch sequences of the mean length, for any tp, pp, ep) and its prefill chunk. A candidate is
kept when the simulated percentile of TTFT, TPOT (and E2E) meets the targets. A replica that falls behind its
arrivals fails on TTFT: its queue grows over the run. (Result.overloaded, served over the whole makespan,
is not used: with a few hundred requests the drain of the longest outputs dominates it.) Only the frontier
is simulated: each hardware's feasible candidates cheapest first until `keep` pass (at most 3 x keep
tried); the rest keep their analytic verdict (simulated = False).
A disaggregated candidate (two pools) is simulated a pool at a time. The rate splits evenly and at random over
the workers, so one prefill worker sees Poisson arrivals at rate / x and one decode worker at rate / y:
  prefill: each request's prompt and one token on the prefill Deployment, the engine's request cost before the
           scheduler, at most ep prompts a step (one under tp: a compute-bound step gains little from two;
           under expert parallelism each rank prefills its own); TTFT = its TTFT + the engine's handoff + the
           KV transfer.
  decode:  the prompts cached (their KV and first token come over the link): decode steps alone, up to the
           capacity batch within the KV budget; TPOT from a request's arrival there, its admission wait included.
Request i draws the same lengths in both (one seed); its E2E is its TTFT + (G - 1) TPOT. Left out: a decode
worker's arrivals are the prefill pool's departures, smoother than Poisson (so its percentile errs high), and
the link's contention between transfers.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from ..deployment import Deployment
from ..serving.batching import StepCost, Workload as Requests, engine_terms, poisson_arrivals, simulate_continuous

BLOCK = 16  # KV tokens per page, vLLM's default


def requests_for(work, rate: float, n: int, seed: int) -> Requests:
    from .workload import Lengths
    rng = np.random.default_rng(seed)
    return Requests(poisson_arrivals(rng, rate, n), Lengths.of(work.prompt).draw(rng, n), Lengths.of(work.gen).draw(rng, n))


def simulate_row(row, work, percentile: float, requests: int, seed: int, progress=None) -> dict:
    """Simulated percentiles of one replica of a candidate (its row's Deployment) at its share of the rate."""
    d: Deployment = row["deployment"]
    chunk = None if pd.isna(row["prefill_chunk"]) else int(row["prefill_chunk"])
    capacity = row["max_batch"] * (work.prompt_mean + work.gen_mean)  # the search's memory: max batch mean sequences
    reqs = requests_for(work, work.rate / row["replicas"], requests, seed)
    try:
        result = simulate_continuous(reqs, StepCost(d), int(row["capacity_batch"]), capacity, BLOCK, chunk, progress,
                                     **engine_terms(d))
    except ValueError as err:  # a sampled request longer than the KV budget
        return {"sim_error": str(err)}
    return {"sim_error": "", **{key: _percentile(values, percentile) for key, values in
                                (("ttft", result.ttft_s), ("tpot", result.tpot_s), ("e2e", result.e2e_s))}}


def _percentile(values: np.ndarray, percentile: float) -> float:
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, percentile)) if finite.size else float("nan")


def simulate_pools(row, work, percentile: float, requests: int, seed: int) -> dict:
    """Simulated percentiles of a disaggregated candidate: one prefill worker, then one decode worker."""
    prefill, decode = row["prefill_deployment"], row["deployment"]
    arriving = requests_for(work, work.rate / row["prefill_workers"], requests, seed)
    prompts_only = dataclasses.replace(arriving, outputs=np.ones_like(arriving.outputs))
    first = simulate_continuous(prompts_only, StepCost(prefill), int(prefill.ep),
                                request_overhead_s=prefill.request_s)
    ttft = first.ttft_s + prefill.engine.disagg_handoff_s + row["kv_transfer_s"]
    decoding = requests_for(work, work.rate / row["decode_workers"], requests, seed)
    capacity = row["max_batch"] * (work.prompt_mean + work.gen_mean)
    try:
        rest = simulate_continuous(decoding, StepCost(decode), int(row["capacity_batch"]), capacity, BLOCK,
                                   prompts_cached=True)
    except ValueError as err:  # a sampled request longer than the KV budget
        return {"sim_error": str(err)}
    e2e = ttft + (decoding.outputs - 1) * np.nan_to_num(rest.tpot_s)
    return {"sim_error": "", "ttft": _percentile(ttft, percentile), "tpot": _percentile(rest.tpot_s, percentile),
            "e2e": _percentile(e2e, percentile)}


def judge(sim: dict, targets) -> str:
    """'' when the simulated percentile meets every target, else the first it misses, in one clause."""
    p = int(targets.percentile) if float(targets.percentile).is_integer() else targets.percentile
    if sim["sim_error"]:
        return f"simulated: {sim['sim_error']}"
    checks = [("TTFT", "ttft", targets.ttft_s), ("TPOT", "tpot", targets.tpot_s), ("E2E", "e2e", targets.e2e_s)]
    for label, key, target in checks:
        value = sim[key]
        if target is not None and value > target:
            return f"simulated: {label} p{p} {value * 1e3:.1f} ms > {target * 1e3:g} ms"
    return ""


def check_frontier(frame: pd.DataFrame, work, targets, keep: int, requests: int, seed: int,
                   progress=None) -> pd.DataFrame:
    frame = frame.copy()
    for column in ("simulated", "sim_ttft_s", "sim_tpot_s", "sim_e2e_s"):
        frame[column] = False if column == "simulated" else np.nan
    queue = []
    for _, group in frame[frame["feasible"]].groupby("hardware", sort=False):
        queue += list(group.index[: 3 * keep])
    done_rows, kept = 0, {}
    for index in queue:
        row = frame.loc[index]
        if kept.get(row["hardware"], 0) >= keep:
            continue
        tick = None if progress is None else (lambda d, n, base=done_rows: progress(base + d, len(queue) * requests))
        if row.get("mode") == "disaggregated":
            sim = simulate_pools(row, work, targets.percentile, requests, seed)
        else:
            sim = simulate_row(row, work, targets.percentile, requests, seed, tick)
        done_rows += requests
        frame.loc[index, ["simulated", "sim_ttft_s", "sim_tpot_s", "sim_e2e_s"]] = [
            True, *(sim.get(k, np.nan) for k in ("ttft", "tpot", "e2e"))]
        reason = judge(sim, targets)
        if reason:
            frame.loc[index, ["feasible", "rejected"]] = [False, reason]
        else:
            kept[row["hardware"]] = kept.get(row["hardware"], 0) + 1
    if progress is not None:
        progress(len(queue) * requests, len(queue) * requests)
    return frame
