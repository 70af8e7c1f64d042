"""The percentile check of `plan`'s frontier: the cheapest candidates per hardware served request by request.

Each replica gets rate / replicas of Poisson arrivals with the workload's length distributions, served by
roofline.serving.batching.simulate_continuous at the candidate's batch (its capacity batch as the cap),
its KV budget (the search's: max batch sequences of the mean length, for any tp, pp, ep) and its prefill chunk. A candidate is
kept when the simulated percentile of TTFT, TPOT (and E2E) meets the targets. A replica that falls behind its
arrivals fails on TTFT: its queue grows over the run. (Result.overloaded, served over the whole makespan,
is not used: with a few hundred requests the drain of the longest outputs dominates it.) Only the frontier
is simulated: each hardware's feasible candidates cheapest first until `keep` pass (at most 3 x keep
tried); the rest keep their analytic verdict (simulated = False). Disaggregated rows (two pools) are not
simulated: the simulator serves one pool (roofline.planning.pools).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..deployment import Deployment
from ..serving.batching import StepCost, Workload as Requests, poisson_arrivals, simulate_continuous

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
        result = simulate_continuous(reqs, StepCost(d), int(row["capacity_batch"]), capacity, BLOCK, chunk, progress)
    except ValueError as err:  # a sampled request longer than the KV budget
        return {"sim_error": str(err)}
    out = {"sim_error": ""}
    for key, values in (("ttft", result.ttft_s), ("tpot", result.tpot_s), ("e2e", result.e2e_s)):
        finite = values[np.isfinite(values)]
        out[key] = float(np.percentile(finite, percentile)) if finite.size else float("nan")
    return out


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
    aggregated = frame["mode"] == "aggregated" if "mode" in frame else True  # one pool: what the simulator serves
    for _, group in frame[frame["feasible"] & aggregated].groupby("hardware", sort=False):
        queue += list(group.index[: 3 * keep])
    done_rows, kept = 0, {}
    for index in queue:
        row = frame.loc[index]
        if kept.get(row["hardware"], 0) >= keep:
            continue
        tick = None if progress is None else (lambda d, n, base=done_rows: progress(base + d, len(queue) * requests))
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
