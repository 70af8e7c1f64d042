"""Whether each engine's fused MoE at decode waits on its bytes or its SMs, by format, from NVIDIA's kernel profile.

A routed expert stored in a format the device has no units for (MXFP4 or INT4 on Hopper) is unpacked to 16 bits in
the grouped GEMM's mainloop and multiplied a tile of rows at a time. At decode an expert gets a few tokens: if the
kernel still spends a tile's MMAs and unpacking on each expert, its time follows the SMs, not the memory. NVIDIA's
AIConfigurator 0.12.0 ships each engine's fused-MoE latencies on H100 and H200 (`systems/data/<device>/moe/<engine>/
<release>/moe_perf.parquet` in the aiconfigurator-core package). Here, per format, over its decode points (every
expert touched, 1-16 rows an expert, experts loaded evenly, no expert parallelism):
  h100/h200   the H100's time over the H200's at the same shape, split and tokens (the bandwidths' ratio is 1.43:
              a kernel bound by its bytes runs ~1.4x apart, one bound by its SMs ~1.0x apart);
  rows        the decode time over the time a row costs at >= 8192 tokens (the compute-bound rate): the rows a
              tile computes whatever the tokens, as the kernel's own large-row rate would price them;
  tile        with --engine: the rows at which that profile's routed-expert FLOP/s (the 16-bit peak x
              flops_efficiency x the format's expert share x the slice share, bounds.Roofs.of) would price the
              measured decode time as a tile's compute; "at the peak": the 16-bit peak x the slice share alone, a
              floor apart from the fitted efficiencies, the faster device's time per shape and split.
              README, "vLLM's MXFP4 experts wait on the SMs at decode".

Run (the package is not a dependency; any venv with pandas and pyarrow reads it):
  python -m validation.expert_decode_profile --aic /path/to/aiconfigurator_core/systems/data [--engine vllm]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from .aic_profile import DEVICES, RELEASES, tables
from .expert_slice_fit import GATED, MIN_TOKENS

FORMATS = {"w4a16_mxfp4": "mxfp4", "int4_wo": "int4", "fp8_block": "fp8", "bfloat16": "bf16"}  # AIC -> ours
DECODE_ROWS = (1.0, 16.0)  # rows an expert at decode: every expert touched, well under any tile


def points(data: Path, engine: str, dtype: str):
    """Per (shape, moe_tp, device): the median decode latency (ms) and the large-row time a row costs (ms)."""
    import pandas as pd  # only these scripts read parquet
    frames = []
    for device, table in tables(data, "moe", engine, "moe_perf"):
        table = table[(table.distribution == "balanced") & ~table.kernel_source.str.contains("nongated")
                      & (table.moe_dtype == dtype) & (table.moe_ep_size == 1)]
        table = table.assign(rows=table.num_tokens * table.topk / table.num_experts, device=device)
        frames.append(table)
    if not frames:
        return pd.DataFrame()
    table = pd.concat(frames)
    keys = ["device", "hidden_size", "inter_size", "num_experts", "topk", "moe_tp_size"]
    decode = table[table.rows.between(*DECODE_ROWS)].groupby(keys).latency.median().rename("decode_ms")
    large = table[table.num_tokens >= MIN_TOKENS]
    per_row = (large.latency / large.rows).groupby([large[k] for k in keys]).median().rename("row_ms")
    out = pd.concat([decode, per_row], axis=1).dropna().reset_index()
    out["elements"] = GATED * out.hidden_size * out.inter_size * out.num_experts / out.moe_tp_size  # one GPU's
    out["columns"] = out.inter_size / out.moe_tp_size
    return out


def device_ratio(table) -> float:
    """The median H100 / H200 decode time over the shapes and splits both devices hold."""
    keys = ["hidden_size", "inter_size", "num_experts", "topk", "moe_tp_size"]
    by = table.pivot_table(index=keys, columns="device", values="decode_ms")
    if not set(DEVICES) <= set(by.columns):
        return float("nan")
    return float((by["h100_sxm"] / by["h200_sxm"]).dropna().median())


def tile_rows(table, engine_name: str, fmt: str, at_peak: bool = False) -> np.ndarray:
    """Per point, the rows at which `engine_name`'s expert roof for `fmt` prices the measured decode time; at_peak:
    at the 16-bit peak times the profile's slice share alone (a floor apart from the fitted efficiencies)."""
    from roofline.engine import load_engine
    from roofline.hardware import load_hardware
    engine = load_engine(engine_name)
    share = 1.0 if at_peak else engine.flops_efficiency * engine.expert_gemm_efficiency(fmt)
    roof = np.array([load_hardware(DEVICES[d]).peak("bf16") * share * engine.expert_slice_share(c)
                     for d, c in zip(table.device, table["columns"])])
    return table.decode_ms.to_numpy() * 1e-3 * roof / (2.0 * table.elements.to_numpy())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aic", type=Path, required=True, help="aiconfigurator_core/systems/data")
    parser.add_argument("--engine", help="a profile (name or YAML) whose expert roofs price the tile, e.g. vllm")
    parser.add_argument("--framework", default="vllm", choices=sorted(RELEASES), help="whose kernels (vllm)")
    args = parser.parse_args(argv)
    for dtype, fmt in FORMATS.items():
        table = points(args.aic, args.framework, dtype)
        if table.empty:
            continue
        rows = table.decode_ms / table.row_ms
        line = (f"{args.framework} {RELEASES[args.framework]} {fmt:6s} h100/h200 {device_ratio(table):.2f}  rows "
                f"{rows.median():5.1f} ({rows.min():.0f}-{rows.max():.0f})  {len(table)} points")
        if args.engine and fmt in ("mxfp4", "int4"):  # the formats unpacked in the mainloop: a tile floor
            tiles = tile_rows(table, args.engine, fmt)
            line += f"  tile under {args.engine} {np.median(tiles):5.1f} ({tiles.min():.0f}-{tiles.max():.0f})"
            # a floor apart from the fits: at the peak, no more than the faster device's time (per shape and split)
            keys = [table[k] for k in ("hidden_size", "inter_size", "num_experts", "topk", "moe_tp_size")]
            floor = table.assign(t=tile_rows(table, args.engine, fmt, at_peak=True)).groupby(keys).t.min()
            line += f", at the peak {floor.median():5.1f}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
