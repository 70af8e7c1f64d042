"""The decoder's projections: on the CPU, oneDNN on prepacked weights instead of torch's MKL path."""
from __future__ import annotations

import functools

import torch
from torch import nn


def onednn_linear_available() -> bool:
    try:
        torch.ops.mkldnn._linear_pointwise  # noqa: B018 (looked up: absent on builds without oneDNN)
    except (AttributeError, RuntimeError):
        return False
    return torch.backends.mkldnn.is_available()


class Linear(nn.Linear):
    """nn.Linear whose CPU matmul runs oneDNN on a prepacked copy of the weight.

    Why: torch 2.13 sends a CPU F.linear with few rows to MKL, which runs it on one thread and, on
    the 2-core EPYC we measure on, streams 21 GB/s at 1 row and 11-15 GB/s at 2-16 rows. oneDNN on
    a blocked copy of the same weight (the kernel torch.compile's CPU freezing uses) streams at the
    read bandwidth of the machine (~50-75 GB/s) at 1-8 rows and runs a large GEMM at ~500 GFLOP/s
    against MKL's ~225. The copy is repacked whenever the weight changes (its version counter),
    so weights copied in after construction are seen. GPUs, builds without oneDNN, and dtypes the
    CPU cannot pack (fp16 without AVX512-FP16 or AVX-NE-CONVERT) use F.linear.
    """

    PACKING_ROWS = 64  # oneDNN's batch hint: 16 to 256 rows measured the same at 1-256 rows; 1 is 25% slower

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or not onednn_packs(self.weight.dtype):
            return super().forward(x)
        stamp = (self.weight.data_ptr(), self.weight._version)
        if getattr(self, "_packed_stamp", None) != stamp:
            self._packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), self.PACKING_ROWS)
            self._packed_stamp = stamp
        return torch.ops.mkldnn._linear_pointwise(x, self._packed, self.bias, "none", [], "")


@functools.cache
def onednn_packs(dtype: torch.dtype) -> bool:
    """Whether oneDNN can pack a weight of this dtype on this CPU (it refuses fp16 on most x86)."""
    if not onednn_linear_available():
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(8, 8, dtype=dtype), 1)
    except RuntimeError:
        return False
    return True


def matmul_kernel(device: str, dtype: torch.dtype) -> str:
    """What runs the decoder's projections on `device` (recorded with every measurement)."""
    return "onednn-packed" if device == "cpu" and onednn_packs(dtype) else "torch-linear"
