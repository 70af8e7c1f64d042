"""The widths and depths at which each engine's dense GEMMs run at half rate, from NVIDIA's kernel profile.

Under tensor parallelism each GPU multiplies a slice of every projection: N / tp columns (qkv, gate/up) or a depth
K / tp (o_proj, down). NVIDIA's AIConfigurator ships the latencies of each engine's own GEMMs on H100 and H200 over
M x N x K grids (`systems/data/<device>/gemm/<engine>/<release>/gemm_perf.parquet` in the aiconfigurator-core
package). Here: the points with M >= 1024 rows (where the GEMMs a prompt runs sit), N and K from 256 to 64k, each as a
fraction of the dtype's peak, fitted per (engine, dtype) by least squares in log space to
fraction = f(device, M) x N / (N + N_half) x K / (K + K_half), one f per (device, M): N_half and K_half are the
engine's Engine.gemm_shape halves (roofline/gemm_shape.py).

Run (the package is not a dependency; any venv with pandas, pyarrow and scipy reads it):
  python -m validation.gemm_shape_fit --aic /path/to/aiconfigurator_core/systems/data
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from .aic_profile import RELEASES, tables

PEAKS = {"bfloat16": 989.4e12, "fp8": 1978.9e12, "fp8_block": 1978.9e12}  # the H100/H200 dense peak per dtype
MIN_ROWS, SIDES = 1024, (256, 65536)


def points(data: Path, engine: str, dtype: str):
    """(M, N, K, fraction, device) of one engine's GEMMs in one dtype: the fastest timing of each shape."""
    import pandas as pd  # only these scripts read parquet
    frames = []
    for device, table in tables(data, "gemm", engine, "gemm_perf"):
        table = table[(table.gemm_dtype == dtype) & (table.m >= MIN_ROWS) & table.n.between(*SIDES)
                      & table.k.between(*SIDES)]
        table = table.groupby(["m", "n", "k"], as_index=False).latency.min().assign(device=device)
        table["fraction"] = 2.0 * table.m * table.n * table.k / (table.latency * 1e-3) / PEAKS[dtype]
        frames.append(table)
    return pd.concat(frames) if frames else pd.DataFrame()


def halves(table) -> tuple[float, float, float]:
    """(N_half, K_half, rms of the log residuals): the saturation shared by every M, each (device, M) its own rate."""
    from scipy.optimize import least_squares
    keys = table.device + ":" + table.m.astype(str)
    index = keys.map({key: i for i, key in enumerate(sorted(set(keys)))}).to_numpy()
    columns, depth = table.n.to_numpy(float), table.k.to_numpy(float)
    observed = np.log(table.fraction.to_numpy(float))

    def residuals(x):
        half_n, half_k = np.exp(x[:2])
        return x[2:][index] + np.log(columns / (columns + half_n)) + np.log(depth / (depth + half_k)) - observed
    fitted = least_squares(residuals, np.concatenate([[np.log(1000.0), np.log(1000.0)], np.zeros(index.max() + 1)]))
    return float(np.exp(fitted.x[0])), float(np.exp(fitted.x[1])), float(np.sqrt(np.mean(fitted.fun ** 2)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aic", type=Path, required=True, help="aiconfigurator_core/systems/data")
    args = parser.parse_args(argv)
    for engine in RELEASES:
        for dtype in PEAKS:
            table = points(args.aic, engine, dtype)
            if table.empty:
                continue
            half_n, half_k, rms = halves(table)
            print(f"{engine:7s} {RELEASES[engine]:10s} {dtype:10s} N_half {half_n:6.0f}  K_half {half_k:6.0f}  "
                  f"(rms {rms:.3f} in log, {len(table)} points)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
