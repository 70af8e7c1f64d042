"""A dense GEMM's rate against its shape: the columns N it writes and the depth K it reduces over, beside its rows M.

Under tensor parallelism each GPU multiplies a slice: a column-parallel projection (qkv, gate/up) writes N / tp
columns, a row-parallel one (o_proj, down) reduces over K / tp. A narrow GEMM has fewer output tiles to spread over
the SMs (132 on an H100: M = 1024 rows by N = 1280 columns is 80 tiles of 128 x 128, under one wave), a shallow one
fewer steps of its main loop to hide each tile's prologue and epilogue, so both reach less of the peak. NVIDIA's
profile of TensorRT-LLM 1.3's own GEMMs on H100 and H200 (AIConfigurator 0.12.0's bundled
systems/data/<device>/gemm/trtllm/1.3.0rc20/gemm_perf.parquet; validation/gemm_shape_fit.py) follows

    fraction of the peak = f(M) x N / (N + N_half) x K / (K + K_half)

at M >= 1024 rows, with N_half and K_half by the dtype multiplied in: 16-bit ~250 and ~320, fp8 (a scale per
tensor) ~2500 and ~860, block-scaled fp8 ~1400 and ~640. fp8 needs ten times the width for the same share: its
tiles finish twice as fast, so the fixed part of each weighs twice as much, and its kernels take wider tiles.

The device's kernel roof (data/kernel_roofs.json) was profiled at PROFILED_SHAPES, so a GEMM's share is its shape's
factor over theirs: 1 at the profiled shapes, below 1 for the narrow slices of high tp, above 1 for wider GEMMs
(Roofs caps the product at the datasheet). Each engine states its own halves (`gemm_shape:` in its profile), as its
GEMM kernels are its own; absent, every shape runs at the profiled rate. Not fitted: read off the profile.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

# (K, N) of the GEMMs benchmarks/bench_gpu_kernels.py times for the device's kernel roofs: Llama-2-7B's projections
PROFILED_SHAPES = ((4096, 4096), (4096, 22016), (11008, 4096))
HALF_LIMIT = 65536.0  # a half past the widest projection any model has is a typo
KEYS = ("half_columns", "half_depth")


def shape_factor(depth, columns, half_depth: float, half_columns: float):
    """N / (N + N_half) x K / (K + K_half): the share of a wide, deep GEMM's rate this shape reaches."""
    return columns / (columns + half_columns) * depth / (depth + half_depth)


@lru_cache(maxsize=None)
def profiled_factor(half_depth: float, half_columns: float) -> float:
    """The profiled shapes' factor together: their FLOPs over their summed time, as the kernel roof was measured."""
    flops = [k * n for k, n in PROFILED_SHAPES]
    return sum(flops) / sum(f / shape_factor(k, n, half_depth, half_columns) for f, (k, n) in zip(flops, PROFILED_SHAPES))


@dataclass(frozen=True)
class GemmShape:
    halves: dict = field(default_factory=dict)  # dtype -> (half_depth, half_columns)
    source: str = ""

    def share(self, dtype: str, shape: tuple | None) -> float:
        """A GEMM of `shape` (K, N) multiplying in `dtype`: its rate over the profiled shapes' (1: not stated)."""
        if shape is None or dtype not in self.halves:
            return 1.0
        half_depth, half_columns = self.halves[dtype]
        return shape_factor(*shape, half_depth, half_columns) / profiled_factor(half_depth, half_columns)

    def as_document(self) -> dict:
        return {"source": self.source, **{dtype: {"half_depth": k, "half_columns": n}
                                          for dtype, (k, n) in self.halves.items()}}


NO_SHAPE = GemmShape()


def gemm_shape_from_document(raw, where: str) -> GemmShape:
    """The `gemm_shape:` section of an engine file: {source, DTYPE: {half_columns, half_depth}} (absent: NO_SHAPE)."""
    if raw is None:
        return NO_SHAPE
    fix = ("fix: gemm_shape: {source: where the halves come from, bf16: {half_columns: N, half_depth: K}, ...}, "
           f"each half a number of columns in [0, {HALF_LIMIT:g}]")
    if not isinstance(raw, dict) or not str(raw.get("source") or "").strip():
        raise ValueError(f"{where}: gemm_shape must be a mapping with its source; {fix}")
    halves = {}
    for dtype, entry in raw.items():
        if dtype == "source":
            continue
        if not isinstance(entry, dict) or set(entry) != set(KEYS):
            raise ValueError(f"{where}: gemm_shape.{dtype} must hold exactly {' and '.join(KEYS)}; {fix}")
        values = [entry["half_depth"], entry["half_columns"]]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                   and 0 <= v <= HALF_LIMIT for v in values):
            raise ValueError(f"{where}: gemm_shape.{dtype}: halves must be numbers in [0, {HALF_LIMIT:g}] columns, "
                             f"got {entry!r}; {fix}")
        halves[str(dtype)] = (float(values[0]), float(values[1]))
    return GemmShape(halves, str(raw["source"]))
