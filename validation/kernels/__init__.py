"""Triton kernels for the GPU decode: the step fused to what a serving engine launches.

Why hand-written: the eager decoder launched ~80 kernels a layer (rotary negate/cat, copies, norm
means, adds) and spent ~2.3 of its 7.2 ms at batch 1 outside the weight GEMVs (H100 profile,
data/measurements/README.md). These run a layer in seven launches: add+RMSNorm, QKV GEMV, rope and
cache store, split-KV attention, O GEMV, add+RMSNorm, gate/up GEMV, SiLU*up, down GEMV.

Without CUDA the same kernels run in Triton's interpreter (TRITON_INTERPRET=1, set by the tests),
so their arithmetic is checked on any machine against plain torch; their speed only on a GPU.
"""
from __future__ import annotations

import functools
import os


@functools.cache
def available() -> bool:
    """Triton importable, and a device it can run on: CUDA, or its interpreter."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    import torch
    return torch.cuda.is_available() or interpreting()


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"
