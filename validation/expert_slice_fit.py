"""The expert slice width at which each engine's fused MoE runs at half rate, from NVIDIA's kernel profile.

Under tensor parallelism each GPU computes a d_expert / tp slice of every routed expert. NVIDIA's AIConfigurator
ships the latencies of each engine's own fused MoE layer on H100 and H200 over many shapes and MoE tp/ep splits
(`systems/data/<device>/moe/<engine>/<release>/moe_perf.parquet` in the aiconfigurator-core package). Here: the
compute-bound points (>= 8192 tokens, experts loaded evenly, gated experts, no expert parallelism), each as a
fraction of the fp8 peak, fitted per (engine, dtype) by least squares in log space to
fraction = f_wide(shape) x N / (N + N_half), N = inter_size / moe_tp, one f_wide per (device, expert shape):
N_half is the engine's Engine.expert_slice_half_columns.

Run (the package is not a dependency; any venv with pandas, pyarrow and scipy reads it):
  python -m validation.expert_slice_fit --aic /path/to/aiconfigurator_core/systems/data
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from .aic_profile import RELEASES, tables

FP8_PEAK = 1978.9e12  # the H100's and H200's dense fp8 peak (bf16: half of it)
DTYPES = {"fp8_block": 1.0, "fp8": 1.0, "bfloat16": 0.5}  # dtype -> its peak over the fp8 peak
GATED = 3  # gate, up and down projections of a gated expert
MIN_TOKENS = 8192


def points(data: Path, engine: str, dtype: str):
    """(N, fraction, shape key) of the compute-bound, tp-only points of one engine's fused MoE in one dtype."""
    import pandas as pd  # only these scripts read parquet
    frames = []
    for device, table in tables(data, "moe", engine, "moe_perf"):
        table = table[(table.distribution == "balanced") & ~table.kernel_source.str.contains("nongated")
                      & (table.moe_dtype == dtype) & (table.moe_ep_size == 1) & (table.num_tokens >= MIN_TOKENS)]
        keys = ["num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size"]
        table = table.groupby(keys, as_index=False).latency.min().assign(device=device)
        flops = GATED * 2.0 * table.hidden_size * table.inter_size * table.num_tokens * table.topk / table.moe_tp_size
        table["fraction"] = flops / (table.latency * 1e-3) / (FP8_PEAK * DTYPES[dtype])
        table["columns"] = table.inter_size / table.moe_tp_size
        frames.append(table)
    if not frames:
        return pd.DataFrame()
    table = pd.concat(frames)
    table["shape"] = (table.device + ":" + table.hidden_size.astype(str) + "x" + table.inter_size.astype(str) + "x"
                      + table.num_experts.astype(str) + "x" + table.topk.astype(str))
    return table


def half_columns(table) -> tuple[float, int]:
    """(N_half, points): the saturation width shared by every shape, each shape its own wide-slice fraction."""
    from scipy.optimize import least_squares
    shapes = sorted(set(table["shape"]))
    index = table["shape"].map({s: i for i, s in enumerate(shapes)}).to_numpy()
    columns, observed = table["columns"].to_numpy(float), np.log(table["fraction"].to_numpy(float))

    def residuals(x):
        half, wide = np.exp(x[0]), x[1:]
        return wide[index] + np.log(columns / (columns + half)) - observed
    start = np.concatenate([[np.log(500.0)], np.zeros(len(shapes))])
    fitted = least_squares(residuals, start)
    return float(np.exp(fitted.x[0])), len(table)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aic", type=Path, required=True, help="aiconfigurator_core/systems/data")
    args = parser.parse_args(argv)
    for engine in RELEASES:
        for dtype in DTYPES:
            table = points(args.aic, engine, dtype)
            if table.empty or table["columns"].nunique() < 2:
                continue
            half, n = half_columns(table)
            print(f"{engine:7s} {RELEASES[engine]:10s} {dtype:10s} N_half {half:7.0f} columns  ({n} points, "
                  f"N {table['columns'].min():.0f}-{table['columns'].max():.0f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
