"""`plan`: the cheapest deployments that serve a workload within its latency targets, and why others fail.

Every candidate (hardware x tp x pp x ep x weight format x KV format x engine x batch cap x prefill chunk)
is priced by the one step pricer (a Deployment) in roofline.planning.search: memory, TTFT at batch 1, the
largest batch meeting TPOT at the mean context (the capacity batch), then TTFT and TPOT under load at the
fewest replicas that meet the targets (roofline.planning.under_load), $ per million output tokens from a
sourced price sheet (roofline.planning.prices). The engines are fitted profiles (tensorrt-llm-1 by default);
the ideal engine is the bound priced beside every row (ideal_* columns), never a candidate. Ranked by the
objective: cost (then the tokens/s per GPU a deployment could serve), GPUs, or that throughput per GPU.
With a percentile target the frontier (the cheapest few per hardware) is also served request by request in
the continuous-batching simulation (roofline.planning.frontier), and kept only when the simulated percentile
meets the targets. Closed forms behind the numbers: roofline.planning.forms.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..models.config import check_context, load_model
from ..engine import load_engine
from ..memory import DEFAULT_PREFILL_CHUNK, check_prefill_chunk
from ..hardware import load_hardware
from .prices import PRICES, load_prices
from .search import core, rows_of
from ..precision import Precision
from ..serving.batching import MAX_REQUESTS
from ..sharding import whole
from .workload import Lengths, Workload

__all__ = ["plan", "OBJECTIVES", "DEFAULT_ENGINE", "verdict", "candidate_name", "candidates_as_data", "pareto", "Targets",
           "Workload", "Lengths", "load_prices", "PRICES"]
DEPLOYMENT_COLUMNS = ("deployment", "prefill_deployment")  # the priced Deployments of a row: objects, not data


def candidates_as_data(frame: pd.DataFrame) -> pd.DataFrame:
    """The plan's frame without its Deployment objects (one pool's, or both pools'): what JSON and reports carry."""
    return frame.drop(columns=[c for c in DEPLOYMENT_COLUMNS if c in frame])


# The default engine: a fitted profile (what a deployment achieves; `ideal` is the bound beside every row). TensorRT-LLM
# 1.x (`tensorrt-llm-1`), fitted to 690 aggregated serving rows of TensorRT-LLM 1.0-1.3 on H100/H200 under the load
# model (serving-hopper.csv; in sample TTFT 33.9% / 102%, TPOT 13.0% / 35.5% median / p90). The 0.x profile
# (`tensorrt-llm`, 11 A100 rows of 0.5-0.7 from 2023, masked MHA re-reading GQA caches) misses the same rows by
# TTFT 66.5% / 87.0%, TPOT 28.4% / 66.8%, and AIConfigurator's tokens/s per GPU by a median 0.59x against 0.82x
# (benchmarks/results/aiconfigurator.md). README "roofline plan" has the commands; the 0.x profile stays by name.
DEFAULT_ENGINE = "tensorrt-llm-1"
# what each objective ranks by, in order: (column, ascending)
OBJECTIVES = {"cost": (("usd_per_million_tokens", True), ("capacity_tokens_per_s_per_gpu", False)),
              "gpus": (("gpus", True), ("usd_per_million_tokens", True)),
              "throughput-per-gpu": (("capacity_tokens_per_s_per_gpu", False), ("usd_per_million_tokens", True))}
STAGES = ("layout", "price", "memory", "TTFT", "TPOT", "E2E", "GPUs", "simulated")  # the checks, in the order they run


@dataclass(frozen=True)
class Targets:
    """Latency targets in seconds: means (the analytic search), or a percentile of the simulated requests."""
    ttft_s: float
    tpot_s: float
    e2e_s: float | None = None
    percentile: float | None = None  # e.g. 90: TTFT, TPOT and E2E targets hold for 90% of requests

    def check(self) -> None:
        if not (self.ttft_s > 0 and self.tpot_s > 0 and (self.e2e_s is None or self.e2e_s > 0)):
            raise ValueError(f"targets: TTFT, TPOT (and E2E) must be positive seconds, got {self}")
        if self.percentile is not None and not 0 < self.percentile < 100:
            raise ValueError(f"targets: percentile must be in (0, 100), e.g. 90, got {self.percentile!r}")


def _axis(values) -> tuple:
    return tuple(values) if isinstance(values, (tuple, list)) else (values,)


def plan(model, work: Workload, targets: Targets, hardware=None, tp=(1, 2, 4, 8),
         weights=("bf16", "fp8", "int8", "int4"), engines=(DEFAULT_ENGINE,), prices: dict | None = None,
         prefill_chunk=DEFAULT_PREFILL_CHUNK, pp=(1,), ep=(1,), kv=("bf16",), max_batch=(None,),
         max_gpus: int | None = None, frontier: int = 2, requests: int = 400, seed: int = 0,
         progress=None, experts: str | None = None, replicas=(None,), objective: str = "cost",
         allow_beyond_window: bool = False, disaggregated: bool = True) -> pd.DataFrame:
    """Every candidate, feasible ones first by cost per million output tokens, then by the tokens/s per GPU
    it could serve (its headroom for more load); the others with the reason they fail (layout, price,
    memory, TTFT, TPOT, E2E, more GPUs than max_gpus, or the simulated percentile). hardware None: every
    device the price sheet prices; prefill_chunk and max_batch may be lists (axes). With targets.percentile
    the cheapest `frontier` per hardware that pass the simulation (of `requests` requests, progress(done,
    total) called as it goes) are kept, and the ones it rejects say so. experts: the routed MoE experts' weight
    format for every candidate (the checkpoint's, e.g. gpt-oss's mxfp4; None: each candidate's weights format).
    disaggregated: also every pair of layouts as a prefill pool and a decode pool (roofline.planning.pools), at
    the first prefill chunk, ranked with the rest (mode column); on by default, a pair wins only where it is
    cheaper under the same targets."""
    work.check()
    targets.check()
    config = load_model(model)
    _check_window(config, work, allow_beyond_window)
    prices = load_prices() if prices is None else prices
    hardware = tuple(prices) if hardware is None else _axis(hardware)
    chunks, caps, counts = _axis(prefill_chunk), _axis(max_batch), _axis(replicas)
    _check_axes(dict(hardware=hardware, tp=tp, pp=pp, ep=ep, weights=weights, kv=kv, engines=engines,
                     max_batch=caps, prefill_chunk=chunks, replicas=counts), requests, max_gpus, experts)
    if objective not in OBJECTIVES:
        raise ValueError(f"objective: {objective!r} is not one of {', '.join(OBJECTIVES)}")
    devices, rows, cores = [load_hardware(h) for h in hardware], [], {}  # ids, JSON paths or Hardware: rows name the id
    for hw, t, p, e, w, k, eng in itertools.product(devices, tp, pp, ep, weights, kv, engines):
        h = hw.id
        base = {"mode": "aggregated", "hardware": h, "tp": t, "pp": p, "ep": e, "weights": w, "experts": experts or w,
                "kv": k, "engine": eng}
        c = cores[(h, t, p, e, w, k, eng)] = core(config, hw, t, p, e, w, k, eng, work.prompt_mean, work.gen_mean,
                                                   targets.tpot_s, chunks, caps, h in prices, experts)
        for count in counts:
            rows += rows_of(c, base | {"replicas_asked": count}, work, targets, prices.get(h), caps, chunks,
                            max_gpus, count)
    if disaggregated:
        from .pools import disaggregated_rows
        rows += disaggregated_rows(cores, work, targets, prices, chunks[0], max_gpus)
    frame = rank(pd.DataFrame(rows), objective)
    if targets.percentile is not None:
        from .frontier import check_frontier
        frame = rank(check_frontier(frame, work, targets, frontier, requests, seed, progress), objective)
    return frame


def _check_window(config, work: Workload, allow: bool) -> None:
    """The longest prompt with the longest output inside the model's context window; a file's sample by its line."""
    prompt, gen = Lengths.of(work.prompt), Lengths.of(work.gen)
    where = prompt.where_longest() or gen.where_longest()
    what = f"{where}prompt {prompt.longest:.0f} + gen {gen.longest:.0f}"
    check_context(config, prompt.longest + gen.longest, what, allow)


def _check_axes(axes: dict, requests, max_gpus, experts=None) -> None:
    """Each axis non-empty and each value valid on its own, so that a rejection is about a deployment, not a typo."""
    for name, values in axes.items():
        if len(values) == 0:
            raise ValueError(f"{name}: give at least one candidate")
    for e in axes["engines"]:
        if e == "ideal":
            raise ValueError("engines: 'ideal' is a bound, not a deployable engine: it is priced beside every row "
                             f"(the ideal_* columns); name a fitted engine such as {DEFAULT_ENGINE}")
        load_engine(e)
    for count in axes["replicas"]:
        if count is not None:
            whole("replicas", count, note=" (None: the fewest meeting the targets)")
    for w, k in itertools.product(axes["weights"], axes["kv"]):
        Precision(weights=w, kv=k, experts=experts)
    for name in ("tp", "pp", "ep"):
        for v in axes[name]:
            whole(name, v)
    for cap in axes["max_batch"]:
        if cap is not None:
            whole("max_batch", cap, note=" (None: memory's)")
    for chunk in axes["prefill_chunk"]:
        check_prefill_chunk(chunk)
    if max_gpus is not None:
        whole("max_gpus", max_gpus, note=" (None: no limit)")
    if whole("requests", requests, note=" simulated per candidate") > MAX_REQUESTS:
        raise ValueError(f"requests: at most {MAX_REQUESTS} simulated per candidate, got {requests!r}")


def rank(frame: pd.DataFrame, objective: str = "cost") -> pd.DataFrame:
    """Feasible first, then by the objective (OBJECTIVES: each its keys, best first)."""
    for column in ("usd_per_million_tokens", "capacity_tokens_per_s_per_gpu", "gpus"):
        if column not in frame:
            frame[column] = np.nan
    keys = OBJECTIVES[objective]
    return frame.sort_values(["feasible", *(k for k, _ in keys)], ascending=[False, *(a for _, a in keys)],
                             na_position="last", kind="stable").reset_index(drop=True)


def pareto(frame: pd.DataFrame) -> pd.Series:
    """Whether each row is feasible and on the frontier of cost per million tokens against TPOT: no other
    feasible deployment is at least as cheap and as fast and strictly better in one."""
    kept = frame[frame["feasible"]].sort_values(["tpot_s", "usd_per_million_tokens"])
    best, best_tpot, front = np.inf, np.nan, []
    for index, tpot, cost in zip(kept.index, kept["tpot_s"], kept["usd_per_million_tokens"]):
        if cost < best or (cost == best and tpot == best_tpot):  # equal points dominate neither
            best, best_tpot = cost, tpot
            front.append(index)
    return frame.index.isin(front)


def _split(row, prefix: str = "") -> str:
    keys = ("tp", "pp", "ep") if not prefix else ("tp", "ep")
    return "".join(f" {k}={int(row[prefix + k])}" for k in keys if prefix + k in row and row[prefix + k] > 1) or " tp=1"


def candidate_name(row) -> str:
    """A candidate in words: device, layout (both pools of a disaggregated pair, with their workers), formats, engine."""
    experts = row.get("experts", row["weights"])
    weights = row["weights"] if experts == row["weights"] else f"{row['weights']} (experts {experts})"
    if row.get("mode") == "disaggregated":
        sized = not pd.isna(row.get("prefill_workers", np.nan))  # a rejected pair has no worker counts
        counts = (f" {int(row['prefill_workers'])} x", f" {int(row['decode_workers'])} x") if sized else ("", "")
        pools = f" prefill{counts[0]}{_split(row, 'prefill_')} + decode{counts[1]}{_split(row)}"
        return f"{row['hardware']} disaggregated{pools} {weights}/{row.get('kv', 'bf16')} {row['engine']}"
    return f"{row['hardware']}{_split(row)} {weights}/{row.get('kv', 'bf16')} {row['engine']}"


def _under_load(row) -> str:
    """The clause for a candidate the load model rejected (its lone request met the target)."""
    reason = row["rejected"]
    return f" ({reason.split(': ', 1)[1]})" if "under load" in reason else ""


def verdict(frame: pd.DataFrame, targets: Targets, model: str = "the model", objective: str = "cost") -> str:
    """One sentence: the best deployment (naming its engine), or why nothing is feasible, from the check the
    closest candidates failed."""
    if frame["feasible"].any():
        best = frame.iloc[0]
        lead = {"cost": "Cheapest", "gpus": "Fewest GPUs", "throughput-per-gpu": "Most tokens/s per GPU"}[objective]
        holder = "decode worker" if best.get("mode") == "disaggregated" else "replica"
        return (f"{lead}: {int(best['gpus'])} x {candidate_name(best)}, {best['batch']:.0f} requests in flight a {holder} "
                f"(capacity batch {int(best['capacity_batch'])}), ${best['usd_per_million_tokens']:.3g} per million "
                "output tokens.")
    reasons = frame["rejected"].str.split(":").str[0].str.split(" ").str[0]
    furthest = max(reasons, key=STAGES.index)
    hit = frame[reasons == furthest]
    if furthest == "layout":
        return f"No candidate is a valid layout for {model}: {hit.iloc[0]['rejected'].split(': ', 1)[1]}."
    if furthest == "price":
        return f"No candidate hardware has a price: add {', '.join(sorted(set(hit['hardware'])))} to the price sheet."
    if furthest == "memory":
        row = hit.loc[hit["memory_bytes_batch1"].idxmin()]
        return (f"{model} fits no candidate: even {candidate_name(row)} needs {row['memory_bytes_batch1'] / 1e9:.0f} GB "
                f"per GPU at batch 1, against {row['rejected'].split('> ')[-1]}; use more GPUs (tp, pp) or narrower "
                "weights.")
    if furthest == "TTFT":
        row = hit.loc[hit["ttft_alone_s"].idxmin()]
        return (f"No candidate meets TTFT {targets.ttft_s * 1e3:g} ms: the fastest prefill, {candidate_name(row)}, takes "
                f"{row['ttft_alone_s'] * 1e3:.1f} ms for one prompt" + _under_load(row) + ".")
    if furthest == "TPOT":
        row = hit.loc[hit["tpot_s"].idxmin()]
        if _under_load(row):
            return (f"No candidate meets TPOT {targets.tpot_s * 1e3:g} ms at the offered rate: the closest, "
                    f"{candidate_name(row)}, decodes in {row['tpot_s'] * 1e3:.2f} ms{_under_load(row)}.")
        return (f"No candidate meets TPOT {targets.tpot_s * 1e3:g} ms: the fastest decode step, {candidate_name(row)} at "
                f"batch 1, takes {row['tpot_s'] * 1e3:.2f} ms.")
    if furthest == "E2E":
        row = hit.loc[hit["e2e_s"].idxmin()]
        return (f"No candidate meets E2E {targets.e2e_s:g} s: the fastest, {candidate_name(row)}, takes "
                f"{row['e2e_s']:.2f} s per request.")
    if furthest == "GPUs":
        row = hit.loc[hit["gpus"].idxmin()]
        return (f"No candidate serves the rate within the GPU limit: the fewest needed, {candidate_name(row)}, is "
                f"{int(row['gpus'])} GPUs ({row['rejected'].split('> ')[-1]} allowed).")
    return f"No candidate meets the p{targets.percentile:g} targets in simulation: {hit.iloc[0]['rejected']}."
