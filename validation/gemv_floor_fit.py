"""Each engine's decode GEMVs as a fixed time plus a weight stream, per device, from NVIDIA's kernel profile.

A decode step multiplies a few rows (M <= 8 here) by each weight matrix: the kernel streams the N x K weights and
pays a fixed time beyond them (its launch inside a CUDA graph, the ramp to full occupancy, the tail; for fp8 the
activations' quantization too). NVIDIA's AIConfigurator ships the latencies of each engine's own GEMMs on H100 and
H200 (`systems/data/<device>/gemm/<engine>/<release>/gemm_perf.parquet` in the aiconfigurator-core package). Here:
the fastest kernel of each shape with M <= 8 and N, K from 1k to 64k, fitted per (engine, dtype, device) by least
squares in relative error to latency = t0 + weight bytes / (f x the datasheet bandwidth).

What it shows: t0 (Engine.op_overhead_s, a step's fixed time an op) and f (Engine.bandwidth_efficiency, the stream)
each nearly the same on both devices, where the plain fraction bytes / latency / datasheet is not: the same few
microseconds cost the H200's faster stream a larger share of each GEMV.

Run (the package is not a dependency; any venv with pandas and pyarrow reads it):
  python -m validation.gemv_floor_fit --aic /path/to/aiconfigurator_core/systems/data
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from .aic_profile import DEVICES, RELEASES, tables

BANDWIDTH = {"h100_sxm": 3.35e12, "h200_sxm": 4.8e12}  # datasheet bytes/s (data/hardware.json)
BYTES = {"bfloat16": 2, "fp8": 1, "fp8_block": 1}  # a weight's bytes per dtype
MAX_ROWS, SIDES = 8, (1024, 65536)


def points(data: Path, engine: str, dtype: str):
    """(device, N x K weight bytes, latency s) of one engine's decode GEMMs in one dtype: each shape's fastest."""
    import pandas as pd  # only these scripts read parquet
    frames = []
    for device, table in tables(data, "gemm", engine, "gemm_perf"):
        table = table[(table.gemm_dtype == dtype) & (table.m <= MAX_ROWS) & table.n.between(*SIDES)
                      & table.k.between(*SIDES)]
        table = table.groupby(["m", "n", "k"], as_index=False).latency.min().assign(device=device)
        table["weight_bytes"] = table.n * table.k * BYTES[dtype]
        table["seconds"] = table.latency * 1e-3
        frames.append(table)
    return pd.concat(frames) if frames else pd.DataFrame()


def fixed_and_stream(weight_bytes, seconds, bandwidth: float) -> tuple[float, float, float]:
    """(t0 s, f of the bandwidth, median |relative error|) of latency = t0 + bytes / (f x bandwidth)."""
    weight_bytes, seconds = np.asarray(weight_bytes, float), np.asarray(seconds, float)
    design = np.column_stack([np.ones_like(weight_bytes), weight_bytes]) / seconds[:, None]  # relative residuals
    (fixed, per_byte), *_ = np.linalg.lstsq(design, np.ones_like(seconds), rcond=None)
    predicted = fixed + per_byte * weight_bytes
    return float(fixed), float(1.0 / (per_byte * bandwidth)), float(np.median(np.abs(predicted / seconds - 1.0)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aic", type=Path, required=True, help="aiconfigurator_core/systems/data")
    args = parser.parse_args(argv)
    print(f"M <= {MAX_ROWS}, N and K {SIDES[0]}-{SIDES[1]}: latency = t0 + bytes / (f x datasheet)")
    print("engine  release    dtype      device     t0 us  f      plain fraction  median error  points")
    # f > 1 streams past the datasheet: the fixed-plus-stream form does not hold there (vLLM 0.24.0's block-scaled
    # fp8 at M <= 8 takes ~55-60 us whatever the shape), and it is said so rather than used

    for engine in RELEASES:
        for dtype in BYTES:
            table = points(args.aic, engine, dtype)
            for device, rows in (table.groupby("device") if not table.empty else ()):
                fixed, stream, error = fixed_and_stream(rows.weight_bytes, rows.seconds, BANDWIDTH[device])
                plain = float(np.median(rows.weight_bytes / rows.seconds / BANDWIDTH[device]))
                print(f"{engine:7s} {RELEASES[engine]:10s} {dtype:10s} {DEVICES[device]:9s} {fixed * 1e6:6.2f} "
                      f"{stream:6.3f} {plain:6.3f}          {error:6.3f}        {len(rows)}"
                      f"{'  the form does not hold (f > 1)' if stream > 1 else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
