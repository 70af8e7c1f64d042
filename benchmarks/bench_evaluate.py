"""Speed of the compiled evaluators: 1e6-point sweeps (decode only, and with prefill and E2E) and one analysis.

Targets (issues 2, 11, 12 and 27, on the 2-core CI machine): >= 1e7 points/s for the decode sweep, >= 1e6
points/s for the full sweep (prefill, decode, E2E over 1000 batches x 1000 contexts), <= 1 ms per analysis
(and at tp=4 within 1.2x of tp=1: the whole model's parameter count is counted once per model),
and an engine at most 2x the decode sweep's time (it prices the step twice: the engine and the ideal bound).
Timings on a shared machine are noisy: each figure is the median of several runs, and the ratio
to a plain numpy baseline of the same size (one multiply-add over 1e6 points) is reported too.
Run: python benchmarks/bench_evaluate.py [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import roofline
from roofline import load_hardware, load_model
from roofline.deployment import Deployment
from roofline.evaluate import evaluate


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up: compiles and caches
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    batches, contexts = np.arange(1, 1001), np.arange(1, 1001) * 32
    grid = np.random.default_rng(0).random(1_000_000)
    deployment = Deployment(load_model("llama-2-13b"), load_hardware("h100-sxm"))
    results = {
        "decode_sweep_points": batches.size * contexts.size,
        "decode_sweep_s": median_seconds(lambda: roofline.sweep("llama-3-8b", "h100-sxm", batch=batches,
                                                                context=contexts, prefill=False), args.repeats),
        "engine_decode_sweep_s": median_seconds(lambda: roofline.sweep("llama-3-8b", "h100-sxm", batch=batches,
                                                                       context=contexts, prefill=False, engine="gpt-fast"),
                                                args.repeats),
        # TensorRT-LLM's profile rounds the roofline corner: a power per op and point, the costliest engine.
        "corner_engine_decode_sweep_s": median_seconds(
            lambda: roofline.sweep("llama-3-8b", "h100-sxm", batch=batches, context=contexts, prefill=False,
                                   engine="tensorrt-llm"), args.repeats),
        "full_sweep_10k_s": median_seconds(lambda: roofline.sweep("llama-3-8b", "h100-sxm", batch=batches[:100],
                                                                  context=contexts[:100]), args.repeats),
        "full_sweep_points": batches.size * contexts.size,
        "full_sweep_s": median_seconds(lambda: roofline.sweep("llama-3-8b", "h100-sxm", batch=batches,
                                                              context=contexts), max(args.repeats // 2, 2)),
        "single_analysis_s": median_seconds(lambda: roofline.analyze("llama-2-13b", "h100-sxm", batch=[1]),
                                            args.repeats * 20),
        "single_analysis_tp4_s": median_seconds(lambda: roofline.analyze("llama-2-13b", "h100-sxm", batch=[1], tp=4),
                                                args.repeats * 20),
        "single_evaluation_s": median_seconds(lambda: evaluate(deployment, 1.0, 1024.0, 128.0),
                                              args.repeats * 20),
        "numpy_fma_1e6_s": median_seconds(lambda: grid * 2.0 + 1.0, args.repeats * 4),
    }
    results["decode_points_per_s"] = results["decode_sweep_points"] / results["decode_sweep_s"]
    results["decode_sweep_in_numpy_fmas"] = results["decode_sweep_s"] / results["numpy_fma_1e6_s"]
    results["full_points_per_s"] = results["full_sweep_points"] / results["full_sweep_s"]
    results["analysis_tp4_ratio"] = results["single_analysis_tp4_s"] / results["single_analysis_s"]
    results["engine_sweep_ratio"] = results["engine_decode_sweep_s"] / results["decode_sweep_s"]
    results["corner_engine_sweep_ratio"] = results["corner_engine_decode_sweep_s"] / results["decode_sweep_s"]
    if args.json:
        print(json.dumps(results, indent=2, sort_keys=True))
        return
    print(f"decode sweep: {results['decode_points_per_s']:.3g} points/s "
          f"({results['decode_sweep_s'] * 1e3:.0f} ms for 1e6 points = "
          f"{results['decode_sweep_in_numpy_fmas']:.0f} numpy multiply-adds of 1e6)")
    print(f"the same decode sweep with an engine (gpt-fast; its estimate and the ideal bound beside it): "
          f"{results['engine_sweep_ratio']:.2f}x the time (target <= 2x); with tensorrt-llm's rounded corner "
          f"{results['corner_engine_sweep_ratio']:.2f}x")
    print(f"full sweep (prefill, decode, E2E), 1e4 points: {results['full_sweep_10k_s'] * 1e3:.1f} ms")
    print(f"full sweep (prefill, decode, E2E), 1e6 points: {results['full_points_per_s']:.3g} points/s "
          f"({results['full_sweep_s'] * 1e3:.0f} ms)")
    print(f"single analysis (prefill, decode, E2E, memory of 1 batch, as a DataFrame): "
          f"{results['single_analysis_s'] * 1e3:.2f} ms; its numbers alone (evaluate): "
          f"{results['single_evaluation_s'] * 1e3:.2f} ms")
    print(f"the same analysis at tp=4: {results['single_analysis_tp4_s'] * 1e3:.2f} ms, "
          f"{results['analysis_tp4_ratio']:.2f}x tp=1's (target <= 1.2x)")


if __name__ == "__main__":
    main()
