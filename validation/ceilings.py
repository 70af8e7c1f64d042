"""The roofs of the device at hand, measured: copy bandwidth and large-GEMM FLOP/s per dtype.

Copy bandwidth counts bytes read plus bytes written (2 x buffer) of a large device-to-device copy.
A read-only stream (a sum) is measured too: on CPUs a decode step mostly reads, and a read stream
can be far below half the copy figure's total (see validation/README.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .decoder import DTYPES, torch_dtype
from .timing import time_on

SIZES = {"cpu": dict(copy_bytes=512 * 2**20, gemm_n=2048, repeats=10),
         "cuda": dict(copy_bytes=4 * 2**30, gemm_n=8192, repeats=50)}


@dataclass(frozen=True)
class Ceilings:
    copy_bandwidth: float  # bytes/s, read + written
    read_bandwidth: float  # bytes/s, read only
    matmul_flops: dict  # dtype -> FLOP/s

    def as_row(self) -> dict:
        row = {"copy_bandwidth": self.copy_bandwidth, "read_bandwidth": self.read_bandwidth}
        row.update({f"matmul_flops_{dtype}": self.matmul_flops.get(dtype, "") for dtype in DTYPES})  # "": not measured
        return row


def measure_bandwidth(device: str, n_bytes: int, repeats: int) -> tuple[float, float]:
    source = torch.ones(n_bytes // 4, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    total = torch.empty((), dtype=torch.float32, device=device)
    copy = time_on(device, lambda: target.copy_(source), repeats).median_s
    read = time_on(device, lambda: torch.sum(source, dim=0, out=total), repeats).median_s
    return 2 * source.numel() * 4 / copy, source.numel() * 4 / read


def measure_matmul(device: str, dtype: str, n: int, repeats: int) -> float:
    a = torch.randn(n, n, device=device).to(torch_dtype(dtype))
    b = torch.randn(n, n, device=device).to(torch_dtype(dtype))
    out = torch.empty(n, n, device=device, dtype=a.dtype)
    seconds = time_on(device, lambda: torch.matmul(a, b, out=out), repeats).median_s
    return 2 * n**3 / seconds  # n^3 multiply-adds


def measure_ceilings(device: str, dtypes: tuple, quick: bool = False) -> Ceilings:
    size = dict(SIZES[device])
    if quick:  # smoke tests: the numbers are recorded, not trusted
        size = dict(copy_bytes=16 * 2**20, gemm_n=256, repeats=3)
    copy_bw, read_bw = measure_bandwidth(device, size["copy_bytes"], size["repeats"])
    flops = {dtype: measure_matmul(device, dtype, size["gemm_n"], size["repeats"]) for dtype in dtypes}
    return Ceilings(copy_bw, read_bw, flops)
