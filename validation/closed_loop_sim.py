"""The load model's closed loop against the simulator stepping the same scheduler, on the serving rows.

For each aggregated row of serving-hopper.csv (one backend's, priced by an engine profile) the steady state's mean TTFT
and TPOT (roofline.fitting.published_serving.predict, what `roofline accuracy` scores) beside the simulator's run of
the same deployment, policy, run length and lengths (published_serving.simulate: the first C requests at t = 0, each
later one as one ends), and both beside the measured. By default the rows whose client drew its lengths at random
(a launch's `--random-range-ratio` < 1), where the two should agree; `--all` adds the rows of identical requests,
which the simulator keeps in cohorts (its first wave's prompts re-arrive within a few decode steps of each other) and
the steady state staggers: the measured rows sit between (validation/README.md, "The closed loop").

Run (seconds a row; vllm's 306 random-length rows ~4 min on 2 cores):
  python -m validation.closed_loop_sim --serving ../shared/published/serving-hopper.csv --engine vllm --backend vllm
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from roofline.engine import load_engine
from roofline.fitting.published_serving import predict, read_serving_rows, simulate


def spread(predicted: np.ndarray, reference: np.ndarray) -> str:
    """median / p90 of |predicted / reference − 1|, in %, over the rows both price."""
    error = np.abs(predicted / reference - 1)
    error = error[np.isfinite(error)]
    return f"{100 * np.median(error):5.1f} / {100 * np.percentile(error, 90):5.1f}" if error.size else "  none"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serving", type=Path, required=True, help="serving-hopper.csv")
    parser.add_argument("--engine", required=True, help="an engine profile (data/engines) or a YAML path")
    parser.add_argument("--backend", required=True, help="the rows' backend: vllm, trtllm or sglang")
    parser.add_argument("--all", action="store_true", help="the rows of identical requests too")
    args = parser.parse_args(argv)
    if not args.serving.is_file():
        parser.error(f"--serving: no file {str(args.serving)!r}; fix: the path of serving-hopper.csv")
    rows, _ = read_serving_rows(args.serving)
    rows = [r for r in rows if r.backend == args.backend
            and (args.all or (r.launch is not None and r.launch.lengths_vary))]
    if not rows:
        parser.error(f"--backend {args.backend}: no such rows in {str(args.serving)!r}; fix: vllm, trtllm or sglang")
    engine = load_engine(args.engine)
    steady, simulated = predict(rows, engine), simulate(rows, engine)
    measured = {m: np.array([getattr(r, f"{m}_s") for r in rows]) for m in ("ttft", "tpot")}
    print(f"{len(rows)} {args.backend} rows under {engine.name}, |a / b - 1| median / p90 (%)")
    print("model              rows   TTFT steady/sim  TPOT steady/sim | vs measured: TTFT steady, sim; TPOT steady, sim")
    for model in sorted({r.model for r in rows}) + ["all"]:
        chosen = np.array([model in ("all", r.model) for r in rows])
        s, m = {k: v[chosen] for k, v in steady.items()}, {k: v[chosen] for k, v in measured.items()}
        g = {k: v[chosen] for k, v in simulated.items()}
        print(f"{model:18s} {chosen.sum():4d}   {spread(s['ttft_after'], g['ttft_after'])}  "
              f"{spread(s['tpot_after'], g['tpot_after'])} | {spread(s['ttft_after'], m['ttft'])} "
              f"{spread(g['ttft_after'], m['ttft'])}  {spread(s['tpot_after'], m['tpot'])} {spread(g['tpot_after'], m['tpot'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
