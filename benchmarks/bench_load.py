"""Speed of the steady state at an offered load: a 1000-point load curve, and the saturating rate.

Target (issue 23): a 1000-point load curve (TTFT, TPOT, E2E, in flight at 1000 rates) in <= 50 ms once the
deployment's step table is built; the table (the pricer sampled on 256 token counts) and the saturating rate
are reported apart. Median of several runs (the machine is shared).
Run: python benchmarks/bench_load.py [--json]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from roofline import load_hardware, load_model
from roofline.deployment import Deployment
from roofline.engine import load_engine
from roofline.serving.load import LoadModel, Policy

from bench_evaluate import median_seconds  # noqa: E402  (benchmarks/ is on the path when run as a script)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    d = Deployment(load_model("llama-3.1-70b"), load_hardware("h200"), tp=2, engine=load_engine("tensorrt-llm"))
    start = time.perf_counter()
    model = LoadModel(d, 4000, 500, Policy(token_budget=8192))
    top = model.budget_saturation()
    build_s = time.perf_counter() - start
    rates = np.linspace(0.001, 1.0, 1000) * top
    model.at_rate(rates)  # the prefill attention of each chunk count, once
    results = {"model": "llama-3.1-70b on 2 x h200, tensorrt-llm, prompt 4000, gen 500",
               "table_and_closed_form_s": build_s,
               "load_curve_points": rates.size,
               "load_curve_s": median_seconds(lambda: model.at_rate(rates), args.repeats),
               "saturation_s": median_seconds(model.saturation, args.repeats),
               "target_load_curve_s": 0.050}
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for name, value in results.items():
            print(f"{name:26s} {value:.4g}" if isinstance(value, float) else f"{name:26s} {value}")


if __name__ == "__main__":
    main()
