"""The roofs of the device at hand, measured: copy bandwidth and large-GEMM FLOP/s per dtype.

The GEMM runs through the decoder's own `Linear`, so the FLOP/s roof is the one its kernel can reach
(on a CPU, oneDNN on a packed weight runs twice as fast as torch.matmul's MKL path; see linear.Linear).

Copy bandwidth counts bytes read plus bytes written (2 x buffer) of a large device-to-device copy.
A read-only stream (a sum) is measured too: a decode step mostly reads, and on CPUs a read stream
can be far below half the copy figure's total (see validation/README.md).

On CUDA the copy runs as a kernel (an elementwise multiply by 1), not `copy_`: a graphed `copy_` is a
memcpy node, which the driver may hand to the copy engines, and on the H100 it measured 2439 GB/s
where a kernel copy measured 3020 (an independent copy: 3006). The read is a bf16 sum accumulated in
fp32, as the independent floor was measured (2991 GB/s). Both are timed after ~0.3 s of warm-up.

On the CPU the copy and the read are timed after a warm-up of their own too: a process's first
measurement, taken after one warm-up copy, read 44 GB/s where the probes around each point then read
~77 (fresh buffers' page faults, clocks ramping up), so the predictions it priced were slower than
the measurements they were printed beside.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from roofline.deployment import Ceilings

from .decoder import DTYPES, torch_dtype
from .linear import Linear
from .timing import time_on

# warmup_s: how long the copy and the read each run before they are timed
SIZES = {"cpu": dict(copy_bytes=512 * 2**20, gemm_n=2048, repeats=10, warmup_s=1.0),
         "cuda": dict(copy_bytes=4 * 2**30, gemm_n=8192, repeats=50, warmup_s=0.3),
         "probe": dict(copy_bytes=256 * 2**20, gemm_n=2048, repeats=5, warmup_s=0.2),  # around each point, ~0.5 s
         "quick": dict(copy_bytes=16 * 2**20, gemm_n=256, repeats=3, warmup_s=0.0)}  # smoke tests: recorded, not trusted


@dataclass(frozen=True)
class CeilingReading:
    """One measurement of the device's roofs, as recorded beside each point; `roofs()` is what the pricer uses."""
    copy_bandwidth: float  # bytes/s, read + written
    read_bandwidth: float  # bytes/s, read only
    matmul_flops: dict  # dtype -> FLOP/s

    def roofs(self) -> Ceilings:
        return Ceilings.measured(self.read_bandwidth, self.copy_bandwidth, self.matmul_flops)

    def as_row(self) -> dict:
        row = {"copy_bandwidth": self.copy_bandwidth, "read_bandwidth": self.read_bandwidth}
        row.update({f"matmul_flops_{dtype}": self.matmul_flops.get(dtype, "") for dtype in DTYPES})  # "": not measured
        return row

    def mean(self, other: CeilingReading) -> CeilingReading:
        return CeilingReading((self.copy_bandwidth + other.copy_bandwidth) / 2, (self.read_bandwidth + other.read_bandwidth) / 2,
                        {d: (f + other.matmul_flops[d]) / 2 for d, f in self.matmul_flops.items()})


def measure_bandwidth(device: str, n_bytes: int, repeats: int, warmup_s: float | None = None) -> tuple[float, float]:
    """(copy, read) bytes/s; warmup_s: the device's full measurement's (SIZES) unless given."""
    warmup_s = SIZES[device]["warmup_s"] if warmup_s is None else warmup_s
    source = torch.ones(n_bytes // 4, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    total = torch.empty((), dtype=torch.float32, device=device)
    if device == "cuda":
        halves = source.view(torch.bfloat16)
        copy = time_on(device, lambda: torch.mul(source, 1.0, out=target), repeats, warmup_s=warmup_s).median_s
        read = time_on(device, lambda: torch.sum(halves, dim=0, dtype=torch.float32, out=total), repeats,
                       warmup_s=warmup_s).median_s
    else:
        copy = time_on(device, lambda: target.copy_(source), repeats, warmup_s=warmup_s).median_s
        read = time_on(device, lambda: torch.sum(source, dim=0, out=total), repeats, warmup_s=warmup_s).median_s
    return 2 * source.numel() * 4 / copy, source.numel() * 4 / read


def measure_matmul(device: str, dtype: str, n: int, repeats: int) -> float:
    x = torch.randn(n, n, device=device).to(torch_dtype(dtype))
    gemm = Linear(n, n, bias=False, device=device, dtype=x.dtype).requires_grad_(False)
    with torch.inference_mode():
        seconds = time_on(device, lambda: gemm(x), repeats).median_s
    return 2 * n**3 / seconds  # n^3 multiply-adds


def measure_ceilings(device: str, dtypes: tuple, size: str | None = None) -> CeilingReading:
    """size: a key of SIZES; None for the device's full measurement."""
    size = SIZES[size or device]
    copy_bw, read_bw = measure_bandwidth(device, size["copy_bytes"], size["repeats"], size["warmup_s"])
    flops = {dtype: measure_matmul(device, dtype, size["gemm_n"], size["repeats"]) for dtype in dtypes}
    return CeilingReading(copy_bw, read_bw, flops)
