"""Time bounds of a step from its per-op counts: compute time, memory time, and how they combine.

roofline:   each op takes max(FLOPs / peak, bytes / bandwidth); the step is their sum.
no-overlap: each op takes FLOPs / peak + bytes / bandwidth (the upper bound).
The binding resource of a step is what the largest share of its roofline time waits on.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .evaluate import COMPONENTS, CompiledPhase
from .hardware import Hardware
from .ops import ATTENTION_MATMUL, WEIGHT_MATMUL
from .precision import Precision

BOUNDS = ("compute", "weight-bandwidth", "kv-bandwidth", "activation-bandwidth")
FLOPS, WEIGHTS, ACT_READ, ACT_WRITE, KV_READ, KV_WRITE = range(len(COMPONENTS))


@dataclass(frozen=True)
class Calibration:
    """Roofs actually reached: fractions of datasheet peak and bandwidth, plus fixed overheads.

    The default is the ideal bound (every efficiency 1, no overhead).
    """
    name: str = "ideal"
    bandwidth_efficiency: float = 1.0
    flops_efficiency: dict = field(default_factory=dict)  # dtype -> fraction; missing = 1
    step_overhead_s: float = 0.0  # per step (launch, scheduling)
    layer_overhead_s: float = 0.0  # per layer per step

    def __post_init__(self):
        values = {"bandwidth_efficiency": self.bandwidth_efficiency,
                  **{f"flops_efficiency.{dtype}": v for dtype, v in self.flops_efficiency.items()}}
        for name, value in values.items():
            if not 0 < value <= 1.5:
                raise ValueError(f"calibration {self.name!r}: {name} must be in (0, 1.5], got {value!r}")
        for name in ("step_overhead_s", "layer_overhead_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"calibration {self.name!r}: {name} must be >= 0")


IDEAL = Calibration()


@dataclass(frozen=True)
class Roofs:
    bandwidth: float  # bytes/s
    weight_matmul_flops: float  # FLOP/s for matmuls against weights
    attention_matmul_flops: float  # FLOP/s for matmuls against the KV cache
    overhead_s: float  # fixed time per step

    @classmethod
    def of(cls, hw: Hardware, precision: Precision, calibration: Calibration = IDEAL, n_layers: int = 0) -> Roofs:
        def achieved(dtype):
            return hw.peak(dtype) * calibration.flops_efficiency.get(dtype, 1.0)
        return cls(hw.memory_bandwidth * calibration.bandwidth_efficiency,
                   achieved(precision.weight_matmul_dtype), achieved(precision.attention_matmul_dtype),
                   calibration.step_overhead_s + calibration.layer_overhead_s * n_layers)

    def peaks(self, matmul_kinds: tuple) -> np.ndarray:
        table = {WEIGHT_MATMUL: self.weight_matmul_flops, ATTENTION_MATMUL: self.attention_matmul_flops}
        return np.array([table.get(kind, np.inf) for kind in matmul_kinds])


@dataclass(frozen=True)
class StepTimes:
    compute_s: np.ndarray  # per op (n_ops, *shape)
    memory_s: np.ndarray  # per op
    roofline_s: np.ndarray  # step total, each op max(compute, memory), plus overhead
    no_overlap_s: np.ndarray  # step total, each op compute + memory, plus overhead
    bound: np.ndarray  # index into BOUNDS


def step_times(counts: np.ndarray, phase: CompiledPhase, roofs: Roofs) -> StepTimes:
    """counts: (n_ops, n_components, *shape) from a CompiledPhase."""
    extra = (1,) * (counts.ndim - 2)
    peaks = roofs.peaks(phase.matmul).reshape((-1,) + extra)
    flops = counts[:, FLOPS]
    compute = np.where(flops > 0, flops / peaks, 0.0)
    op_bytes = counts[:, WEIGHTS:].sum(axis=1)
    memory = op_bytes / roofs.bandwidth
    op_time = np.maximum(compute, memory)
    memory_bound = memory > compute
    safe = np.where(op_bytes > 0, op_bytes, 1.0)
    share = np.where(memory_bound, op_time / safe, 0.0)  # seconds per byte of memory-bound ops
    waits = np.stack([
        np.where(memory_bound, 0.0, op_time).sum(axis=0),
        (share * counts[:, WEIGHTS]).sum(axis=0),
        (share * (counts[:, KV_READ] + counts[:, KV_WRITE])).sum(axis=0),
        (share * (counts[:, ACT_READ] + counts[:, ACT_WRITE])).sum(axis=0),
    ])
    return StepTimes(compute, memory, op_time.sum(axis=0) + roofs.overhead_s,
                     (compute + memory).sum(axis=0) + roofs.overhead_s, waits.argmax(axis=0))
