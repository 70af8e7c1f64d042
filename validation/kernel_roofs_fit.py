"""Device kernel roofs from the project's own kernel measurements: data/kernel_roofs.json (`roofline fit-roofs`).

Each curve is a fraction of the device's datasheet roof for one dtype, read off a measurement file:
- GEMM efficiency against tokens M (the FLOP/s of the profiled shapes together, a layer's GEMMs run one after
  another: their FLOPs over their summed time), at the token counts where every shape is compute-bound by the
  datasheet roofline; below those, a GEMM waits on its weights and the stream curve prices it;
- weight-GEMV streaming per weight format (the shapes' weight bytes over their summed time, M = 1);
- decode attention against the K/V bytes a layer reads (small reads do not fill the GPU), made monotone by
  pool-adjacent-violators (isotonic) where two kernels' points cross;
- prefill attention: the harness fit's fraction (no separate prefill-attention kernel profile exists).
Devices without a measurement take a stated prior (`PRIORS`): the measured device's fractions of their own
datasheet. The CPU's curves are its harness fit's fractions (the CPU's datasheet entry is its measured ceilings).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from roofline.hardware import DATA_DIR, load_hardware

MEASUREMENTS = DATA_DIR / "measurements"
ENGINES = DATA_DIR / "engines"
KERNELS = "cuda-h100-kernels.json"
ATTENTION = "cuda-h100-attention.json"
HEAD_DIM = 128  # bench_gpu_kernels.py's decode attention cases: Llama heads
GEMV_TOKENS = (1,)  # one row: the GEMV itself (past it int4 tinygemm turns compute-bound, bf16 speeds up)
# bench_gpu_kernels.py's weight bytes per element and activation bytes in, per profiled format
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "int4-g128": 0.5 + 4 / 128}
ACTIVATION_BYTES = {"bf16": 2.0, "fp8": 1.0, "int4-g128": 2.0}
GEMM_FORMATS = {"bf16": "bf16", "fp8": "fp8"}  # profiled format -> the matmul dtype its GEMM runs in
STREAM_FORMATS = {"bf16": "bf16", "fp8": "fp8", "int4-g128": "int4"}  # profiled format -> weight format
KV_FORMATS = {"bf16": "bf16", "int8": "int8", "float8_e4m3fn": "fp8"}  # the split-KV kernel's cache dtypes
# Formats the profile has no roof for, streamed as the 16-bit weights are: the device moves bytes at one rate,
# an engine's dequantizing kernel is its own quantized_efficiency. int8: torch's weight-only kernel
# (_weight_int8pack_mm) streams at 0.03-0.04 of the bandwidth, a scalar fallback path, not what the device does.
STREAM_AS_BF16 = ("fp16", "int8", "q8_0", "q4_0", "mxfp4", "nvfp4")
PRIORS = {
    "h200": "same GH100 compute as the H100 SXM with HBM3e (data/HARDWARE.md): the H100's measured fractions, of "
            "the H200's own datasheet roofs",
    "h100-pcie": "the H100 SXM's measured fractions (same GH100 die, 114 SMs): a prior, not measured",
    "a100-40gb": "no A100 kernel profile in the project: the H100's measured fractions of the A100's datasheet (a "
                 "prior; fp8 matmuls fall back to bf16 as the peak does)",
    "a100-80gb": "no A100 kernel profile in the project: the H100's measured fractions of the A100's datasheet (a "
                 "prior; fp8 matmuls fall back to bf16 as the peak does)",
    "l40s": "no Ada kernel profile: the H100's measured fractions (the same 2022-23 generation of cuBLAS kernels)",
    "l4": "no Ada kernel profile: the H100's measured fractions (the same 2022-23 generation of cuBLAS kernels)",
    "rtx-4090": "no Ada kernel profile: the H100's measured fractions (the same 2022-23 generation of cuBLAS kernels)",
    "mi300x": "no CDNA3 kernel profile: the H100's measured fractions (its 2023 peer), a prior only",
    "b200": "no Blackwell kernel profile: the H100's measured fractions (the generation before), a prior only",
    "b300": "no Blackwell kernel profile: the H100's measured fractions (the generation before), a prior only",
    "gb200": "no Blackwell kernel profile: the H100's measured fractions (the generation before), a prior only",
    "gb300": "no Blackwell kernel profile: the H100's measured fractions (the generation before), a prior only",
}


def isotonic(values: list[float]) -> list[float]:
    """The nondecreasing sequence nearest `values` in least squares (pool adjacent violators)."""
    blocks = []  # [mean, count]
    for value in values:
        blocks.append([value, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (a, n), (b, m) = blocks[-2], blocks.pop()
            blocks[-1] = [(a * n + b * m) / (n + m), n + m]
    return [mean for mean, count in blocks for _ in range(count)]


def _shapes(quantized: dict) -> dict:
    """{(n, k): {M: row}} of the quantized GEMM section's timed rows."""
    out = {}
    for key, row in quantized.items():
        match = re.fullmatch(r"(\d+)x(\d+) M=(\d+)", key)
        if match:
            n, k, m = (int(g) for g in match.groups())
            out.setdefault((n, k), {})[m] = row
    return out


def gemm_curve(quantized: dict, fmt: str, peak: float, bandwidth: float) -> dict:
    """Fraction of `peak` the profiled shapes reach together at each compute-bound token count."""
    shapes = _shapes(quantized)
    tokens, fractions = [], []
    for m in sorted(set.intersection(*(set(rows) for rows in shapes.values()))):
        flops = sum(2 * m * n * k for n, k in shapes)
        seconds = sum(rows[m][f"{fmt}_us"] * 1e-6 for rows in shapes.values())
        moved = sum(WEIGHT_BYTES[fmt] * n * k + m * k * ACTIVATION_BYTES[fmt] + m * n * 2 for n, k in shapes)
        if flops / peak >= moved / bandwidth:  # compute-bound by the datasheet roofline
            tokens.append(m)
            fractions.append(min(1.0, flops / seconds / peak))
    return {"tokens": tokens, "fraction": isotonic(fractions)}


def stream_fraction(quantized: dict, fmt: str, bandwidth: float) -> float:
    shapes = _shapes(quantized)
    moved = sum(WEIGHT_BYTES[fmt] * n * k for n, k in shapes) * len(GEMV_TOKENS)
    seconds = sum(rows[m][f"{fmt}_us"] * 1e-6 for rows in shapes.values() for m in GEMV_TOKENS)
    return min(1.0, moved / seconds / bandwidth)


def attention_curve(attention: dict, kv: str, bandwidth: float) -> dict:
    """Fraction of bandwidth the split-KV decode kernel reads a `kv` cache at, against a layer's K/V bytes."""
    element = 2 if kv == "bf16" else 1
    points = []
    for key, row in attention.items():
        sizes = dict(part.split("=") for part in key.split())
        read = 2 * int(sizes["B"]) * int(sizes["S"]) * int(sizes["K"]) * HEAD_DIM * element
        points.append((read, row[f"splitkv_{kv}_GBps"] * 1e9 / bandwidth))
    by_size = {}
    for read, fraction in points:  # two cases reading the same bytes (B 8 S 32k, B 64 S 4k): their mean
        by_size.setdefault(read, []).append(min(1.0, fraction))
    sizes = sorted(by_size)
    return {"kv_bytes": [float(x) for x in sizes], "fraction": isotonic([sum(by_size[x]) / len(by_size[x])
                                                                          for x in sizes])}


def h100_roofs(measurements: Path = MEASUREMENTS, engines: Path = ENGINES) -> dict:
    """The H100 SXM's curves from the kernel profile, the split-KV attention benchmark and the harness fit."""
    hw = load_hardware("h100-sxm")
    quantized = json.loads((measurements / KERNELS).read_text())["quantized"]
    attention = json.loads((measurements / ATTENTION).read_text())["attention"]
    harness = yaml.safe_load((engines / "harness.yaml").read_text())
    bandwidth = hw.memory_bandwidth
    where = f"data/measurements/{KERNELS} (benchmarks/bench_gpu_kernels.py, quantized section)"
    gemm = {dtype: {**gemm_curve(quantized, fmt, hw.peak(dtype), bandwidth),
                    "source": f"{where}: {fmt} GEMMs of {len(_shapes(quantized))} Llama shapes together, "
                              f"FLOPs over summed time, where compute-bound"}
            for fmt, dtype in GEMM_FORMATS.items()}
    gemm["fp16"] = {**{k: v for k, v in gemm["bf16"].items() if k != "source"},
                    "source": "prior: bf16's curve (the same tensor-core rate on Hopper; fp16 GEMMs not profiled)"}
    stream = {fmt: {"fraction": stream_fraction(quantized, profiled, bandwidth),
                    "source": f"{where}: {profiled} weight bytes over summed time, M = 1"}
              for profiled, fmt in STREAM_FORMATS.items()}
    for fmt in STREAM_AS_BF16:
        stream[fmt] = {"fraction": stream["bf16"]["fraction"],
                       "source": "prior: bf16's stream fraction (no roof profiled for this format; int8's torch kernel "
                                 "is a fallback path, not the device)"}
    decode = {dtype: {**attention_curve(attention, kv, bandwidth),
                      "source": f"data/measurements/{ATTENTION}: the split-KV kernel, {kv} cache, N=32 K=8/32, "
                                f"B 1..64, S 4k..32k; isotonic in the bytes a layer reads"}
              for kv, dtype in KV_FORMATS.items()}
    decode["fp16"] = {**{k: v for k, v in decode["bf16"].items() if k != "source"},
                      "source": "prior: bf16's curve (the same bytes and kernel)"}
    prefill_fraction = float(harness["attention_flops_efficiency"]["value"])
    prefill = {dtype: {"fraction": prefill_fraction,
                       "source": "data/engines/harness.yaml attention_flops_efficiency: `roofline fit` of "
                                 "data/measurements/cuda-h100-fused.csv's prefill points (no length sweep of "
                                 "prefill attention alone exists: one point)"}
               for dtype in ("bf16", "fp16")}
    for dtype in ("fp8", "int8"):  # a quantized cache with activations of its width: attention runs in it
        prefill[dtype] = {"fraction": prefill_fraction,
                          "source": f"prior: bf16's fraction of the {dtype} peak (no {dtype} prefill attention measured)"}
    return {"measured": "NVIDIA H100 80GB HBM3 (SXM), torch 2.11.0+cu130", "gemm": gemm, "weight_stream": stream,
            "decode_attention": decode, "prefill_attention": prefill}


def cpu_roofs(engines: Path = ENGINES) -> dict:
    """The CI machine's curves: its harness fit's fractions (of the ceilings measured beside each point)."""
    fit = yaml.safe_load((engines / "harness-cpu.yaml").read_text())
    source = ("data/engines/harness-cpu.yaml {}: `roofline fit` of data/measurements/cpu-amd-epyc-2-threads*.csv "
              "(one point: no kernel sweep on the CPU)")
    dtypes = ("fp32", "bf16", "fp16")

    def flat(name):
        return {dtype: {"fraction": float(fit[name]["value"]), "source": source.format(name)} for dtype in dtypes}
    return {"measured": "2-core AMD EPYC (Zen 5), torch 2.13.0+cpu", "gemm": flat("flops_efficiency"),
            "weight_stream": flat("bandwidth_efficiency"), "decode_attention": flat("attention_bandwidth_efficiency"),
            "prefill_attention": flat("attention_flops_efficiency")}


def derive(measurements: Path = MEASUREMENTS, engines: Path = ENGINES) -> dict:
    """data/kernel_roofs.json's whole content, from the measurement files and the harness fits."""
    return {"measured": {"h100-sxm": h100_roofs(measurements, engines), "cpu": cpu_roofs(engines)},
            "priors": {device: {"from": "h100-sxm", "source": source} for device, source in PRIORS.items()}}
