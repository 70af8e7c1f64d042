"""The CPU decode-attention kernel (native/decode_attention.c), built on first use and called with ctypes.

Built with the machine's C compiler (cc -O3 -march=native, reassociating math, -fopenmp; well under a second)
into ~/.cache/roofline, keyed by the source, the flags and the CPU's feature flags. No compiler, or
a failed build: `kernel()` is None and the decoder keeps its batched-matmul attention (the row's
`attention` column says which ran). The cache may be fp32 or bf16; fp16 takes the matmul path.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("native") / "decode_attention.c"
# -ffast-math's parts that let GCC vectorize the dot products and sums (reassociation), not -ffast-math itself:
# GCC < 13 links crtfastmath.o into a -ffast-math (or -funsafe-math-optimizations) shared library, whose
# constructor turns on flush-to-zero for the whole process when the library loads: torch's CPU kernels then
# flush subnormals, and hypothesis refuses to draw floats in the same test process.
FLAGS = ("-O3", "-march=native", "-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math", "-fno-math-errno",
         "-freciprocal-math", "-ffinite-math-only", "-fopenmp", "-shared", "-fPIC")


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "roofline"


def _cpu_flags() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text() if cpuinfo.is_file() else ""
    return next((line for line in text.splitlines() if line.startswith("flags")), platform.processor())


def _build(compiler: str) -> Path:
    key = hashlib.sha256("\n".join([SOURCE.read_text(), compiler, *FLAGS, _cpu_flags()]).encode()).hexdigest()[:16]
    library = cache_dir() / f"decode_attention-{key}.so"
    if not library.is_file():
        library.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=library.parent) as tmp:  # built aside, renamed: never half-written
            built = Path(tmp) / library.name
            subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(built), "-lm"], check=True, capture_output=True)
            built.replace(library)
    return library


CACHE_DTYPES = {torch.float32: "decode_attention_f32", torch.bfloat16: "decode_attention_bf16"}


@functools.cache
def kernel() -> dict | None:
    """The ctypes functions by cache dtype, or None where they cannot be built here."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    try:
        library = ctypes.CDLL(str(_build(compiler)))
    except (OSError, subprocess.CalledProcessError):
        return None
    functions = {}
    for dtype, name in CACHE_DTYPES.items():
        function = getattr(library, name)
        function.restype = None
        function.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 11 + [ctypes.c_float]
        functions[dtype] = function
    return functions


def supports(q: torch.Tensor, keys: torch.Tensor) -> bool:
    return (q.device.type == "cpu" and q.dtype == keys.dtype and keys.dtype in CACHE_DTYPES
            and keys.stride(-1) == 1 and kernel() is not None)


def decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """softmax(q K^T / sqrt(H)) V for q (B, K, G, H) against keys, values (B, K, S, H), H contiguous.
    Queries and outputs pass as fp32 (a few KB); the cache is read in its own dtype."""
    B, K, G, H = q.shape
    query = q.float().contiguous()
    out = torch.empty_like(query)
    kernel()[keys.dtype](query.data_ptr(), keys.data_ptr(), values.data_ptr(), out.data_ptr(), B, K, G,
                         keys.shape[2], H, *keys.stride()[:3], *values.stride()[:3], H ** -0.5)
    return out.to(q.dtype)
