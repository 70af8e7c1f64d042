"""Speed of `roofline.plan`: the default grid against issue 26's 2 s, and a wide search, no simulation.

The one-pool grid is what `roofline plan --fast --no-disaggregated` searches: 3 priced devices x tp 1,2,4,8 x 4
weight formats under plan's default engine (tensorrt-llm-1), 48 candidates of Llama-3.1-70B at 3 requests/s,
each priced under load (its replicas searched through roofline.serving.load) with the ideal bound beside it; the default grid,
with disaggregation on 8 GPUs (`plan --fast --max-gpus 8`: disaggregation is on by default) also prices every
pair of those layouts as a prefill and a decode
pool (roofline.planning.pools), 214 candidates, against the same 2 s. The wide space: 3 devices x tp
1,2,4,8 x pp 1,2 x 4 weight formats x 2 KV formats x 2 engines x 2 batch caps = 768 candidates. Its capacity
batches are checked against the first version's scalar path (a Deployment, memory, TTFT and a bisection of
scalar decode steps per candidate, every candidate on its own), timed on a sample and scaled to the same count;
it does not price the load, so its time is the capacity search's alone, not a like-for-like ratio. Medians
of several runs: the machine is shared, so the plan is also given in units of one scalar decode step of the
same model timed in the same run (the pricer's own unit of work).
Run: python benchmarks/bench_plan.py [--json]
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time

import numpy as np

from roofline.models.config import load_model
from roofline.deployment import Deployment
from roofline.evaluate import evaluate
from roofline.memory import memory
from roofline.hardware import load_hardware
from roofline.model import DECODE, decode_context
from roofline.planning.plan import DEFAULT_ENGINE, Targets, Workload, plan

SPACE = dict(hardware=("h100-sxm", "h200", "a100-80gb"), tp=(1, 2, 4, 8), pp=(1, 2),
             weights=("bf16", "fp8", "int8", "int4"), kv=("bf16", "fp8"),
             engines=(DEFAULT_ENGINE, "gpt-fast"), max_batch=(None, 128), prefill_chunk=(8192,))
WORK, TARGETS = Workload(rate=10, prompt=1024, gen=256), Targets(ttft_s=0.5, tpot_s=0.05)
DEFAULT_WORK, DEFAULT_TARGETS = Workload(rate=3, prompt=2000, gen=500), Targets(ttft_s=1.0, tpot_s=0.04)


def timed(call, repeats: int) -> tuple[float, float]:
    """(cold seconds, warm median seconds) of call()."""
    start = time.perf_counter()
    call()
    cold = time.perf_counter() - start
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return cold, statistics.median(samples)


def scalar_candidate(config, hw, tp, pp, weights, kv, eng, cap, chunk):
    """The first version's path for one candidate: scalar steps, a bisection for the batch."""
    try:
        d = Deployment.of(config, hw, weights=weights, kv=kv, tp=tp, pp=pp, engine=eng)
    except ValueError:
        return None
    fit = int(np.ravel(memory(d, 1.0, 1024.0, 256.0, chunk)["max_batch"])[0])
    limit = fit if cap is None else min(fit, cap)
    if limit < 1 or float(evaluate(d, 1.0, 1024.0, 256.0, e2e=False, prefill_chunk=chunk)["ttft_s"]) > TARGETS.ttft_s:
        return 0

    def tpot(b):
        return float(d.step(DECODE, float(b), decode_context(1024 + 128)).total_s)
    if tpot(1) > TARGETS.tpot_s:
        return 0
    if tpot(limit) <= TARGETS.tpot_s:
        return limit
    lo, hi = 1, limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if tpot(mid) <= TARGETS.tpot_s else (lo, mid)
    return lo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    config = load_model("llama-3.1-70b")
    default_cold, default_warm = timed(lambda: plan(config, DEFAULT_WORK, DEFAULT_TARGETS, disaggregated=False),
                                       args.repeats)
    pools = plan(config, DEFAULT_WORK, DEFAULT_TARGETS, disaggregated=True, max_gpus=8)
    pools_cold, pools_warm = timed(lambda: plan(config, DEFAULT_WORK, DEFAULT_TARGETS, disaggregated=True, max_gpus=8),
                                   args.repeats)
    frame = plan(config, WORK, TARGETS, **SPACE, disaggregated=False)  # the one-pool wide space
    cold, warm = timed(lambda: plan(config, WORK, TARGETS, **SPACE, disaggregated=False), max(args.repeats // 2, 1))
    axes = [SPACE[k] for k in ("hardware", "tp", "pp", "weights", "kv", "engines", "max_batch", "prefill_chunk")]
    every = list(itertools.product(*axes))
    sample = [c for c in every if c[2] == 1][::17][:200]  # the first version had no pp: its candidates only
    start = time.perf_counter()
    batches = [scalar_candidate(config, *c) for c in sample]
    scalar = (time.perf_counter() - start) / len(sample) * len(every)
    ours = {}
    for row in frame.itertuples():
        cap = None if row.max_batch_cap != row.max_batch_cap else int(row.max_batch_cap)
        key = (row.hardware, row.tp, row.pp, row.weights, row.kv, row.engine, cap, row.prefill_chunk)
        found = row.capacity_batch == row.capacity_batch  # the capacity batch, before the load check
        ours[key] = int(row.capacity_batch) if found else (None if row.rejected.startswith("layout") else 0)
    agree = sum(ours[c] == b for c, b in zip(sample, batches))
    d = Deployment(config, load_hardware("h100-sxm"), tp=4)
    steps = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(200):
            d.step(DECODE, 1.0, 1153.0)
        steps.append((time.perf_counter() - start) / 200)
    step = statistics.median(steps)
    results = {"default_grid_candidates": 48, "default_grid_cold_s": default_cold,
               "default_grid_warm_median_s": default_warm, "default_grid_target_s": 2.0,
               "disaggregated_grid_candidates": len(pools), "disaggregated_grid_cold_s": pools_cold,
               "disaggregated_grid_warm_median_s": pools_warm,
               "candidates": len(frame), "deployments": len(frame) // 2, "feasible": int(frame["feasible"].sum()),
               "plan_cold_s": cold, "plan_warm_median_s": warm,
               "scalar_path_scaled_s": scalar,  # the capacity search alone: the plan also prices every load
               "sample_batches_agree": f"{agree}/{len(sample)}",
               "one_scalar_step_s": step, "plan_in_scalar_steps": warm / step}
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for key, value in results.items():
            print(f"{key:>24}: {value:.3g}" if isinstance(value, float) else f"{key:>24}: {value}")


if __name__ == "__main__":
    main()
