"""Time bounds of a step from its per-op counts: compute time, memory time, and how they combine.

roofline:   each op takes max(FLOPs / peak, bytes / bandwidth); the step is their sum.
no-overlap: each op takes FLOPs / peak + bytes / bandwidth (the upper bound).
The binding resource of a step is what the largest share of its roofline time waits on.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from .compiled import CompiledPhase
from .engine import IDEAL, KERNEL, Engine
from .hardware import Hardware
from .kernel_roofs import curve
from .ops import ATTENTION_MATMUL, EXPERT_MATMUL, STATE_MATMUL, WEIGHT_MATMUL
from .precision import Precision

BOUNDS = ("compute", "weight-bandwidth", "kv-bandwidth", "activation-bandwidth", "communication")
COMMUNICATION = BOUNDS.index("communication")  # a step's collectives, when they take longer than any other wait
STACKED_LIMIT = 2**20  # counts arrays up to this size are evaluated all ops at once; larger ones op by op


@dataclass(frozen=True)
class Roofs:
    bandwidth: float  # bytes/s
    weight_matmul_flops: float  # FLOP/s for matmuls against weights
    attention_matmul_flops: float  # FLOP/s for matmuls against the KV cache
    corner: float = math.inf  # p of the p-norm combining an op's compute and memory time
    attention_bandwidth: float | None = None  # bytes/s for attention ops; None: `bandwidth`
    attention_corner: float | None = None  # p for attention ops; None: `corner`
    # The routed experts' matmuls (ops.EXPERT_MATMUL): their weights' own format dequantizes into
    # Precision.expert_matmul_dtype, and an engine streams that format at its own quantized efficiency and
    # computes its grouped GEMMs at its own share of the GEMMs' efficiency (Engine.expert_gemm_efficiency: the
    # experts' format's share, else expert_flops_efficiency).
    expert_matmul_flops: float | None = None  # FLOP/s; None: weight_matmul_flops
    expert_bandwidth: float | None = None  # bytes/s; None: `bandwidth`
    # Constant-state scans (ops.STATE_MATMUL) run at attention's roofs, but an engine's GQA re-reads
    # (Engine.gqa_rereads) slow only softmax attention: None, attention's bandwidth.
    state_bandwidth: float | None = None
    # Per op, each dense weight GEMM's own FLOP/s where its shape sets its rate (Engine.gemm_shape: the narrow
    # slices of high tp run below the profiled shapes); None: weight_matmul_flops for every one.
    weight_matmul_flops_by_op: tuple | None = None

    @classmethod
    def of(cls, hw: Hardware, precision: Precision, engine: Engine = IDEAL, group: int = 1,
           bandwidth: float | None = None, peak_flops: dict | None = None, tokens=None, expert_tokens=None,
           kv_bytes=None, expert_columns: float | None = None, gemm_shapes: tuple = ()) -> Roofs:
        """The roofs `engine` reaches on `hw` for these formats; `group` query heads share a K/V head.

        bandwidth, peak_flops: measured ceilings standing in for the datasheet's (numbers or arrays).
        GQA re-reads (Engine.gqa_rereads) are priced as softmax attention streaming the cache that many times
        slower: the bytes a step needs stay the model's, the engine's kernels move more of them. An engine's
        fixed times are no roof: they are rows of the step (roofline.deployment).
        An engine with `roofs: kernel` reaches its factors times the device's kernel roofs (roofline.kernel_roofs)
        at the step's GEMM rows (`tokens`, `expert_tokens` a routed expert's) and a layer's K/V bytes (`kv_bytes`);
        None: the curves' last points.
        expert_columns: the columns of each routed expert a GPU computes (Deployment.expert_columns), which its
        grouped GEMMs' rate depends on (Engine.expert_slice_share); None: wide slices.
        gemm_shapes: per op, a dense weight GEMM's (K, N) on one GPU (CompiledPhase.gemm_shapes), whose rate follows
        the engine's Engine.gemm_shape, capped at the datasheet; (): every GEMM at the engine's one rate.
        """
        bandwidth = hw.memory_bandwidth if bandwidth is None else bandwidth

        def peak(dtype):
            return hw.peak(dtype) if peak_flops is None else peak_flops[dtype]
        if engine.roofs == KERNEL:
            return cls._on_kernel_roofs(hw, precision, engine, group, bandwidth, peak, tokens, expert_tokens, kv_bytes,
                                        engine.expert_slice_share(expert_columns), gemm_shapes)
        weights = engine.weight_bandwidth_efficiency(precision.weights)
        experts = engine.expert_weight_bandwidth_efficiency(precision.expert_format)
        attention = engine.kv_attention_efficiency(precision.kv) / engine.kv_reads(group)
        weight_dtype, expert_dtype = precision.weight_matmul_dtype, precision.expert_matmul_dtype
        expert_gemms = engine.expert_gemm_efficiency(precision.expert_format) * engine.expert_slice_share(expert_columns)
        # the routed experts' grouped GEMMs keep their own share by format, not the dense GEMMs' by dtype
        own_expert_flops = (expert_dtype != weight_dtype or expert_gemms != 1.0
                            or engine.gemm_share(weight_dtype) != 1.0)
        by_op = _by_shape(engine, weight_dtype, gemm_shapes,
                          lambda share: peak(weight_dtype) * min(1.0, engine.gemm_efficiency(weight_dtype) * share))
        return cls(bandwidth * weights,
                   peak(weight_dtype) * engine.gemm_efficiency(weight_dtype),
                   peak(precision.attention_matmul_dtype) * engine.attention_flops_efficiency,
                   engine.corner,
                   bandwidth * attention if attention != weights else None,
                   engine.attention_corner,
                   peak(expert_dtype) * engine.flops_efficiency * expert_gemms if own_expert_flops else None,
                   bandwidth * experts if experts != weights else None,
                   # constant-state scans read no KV cache: attention's own efficiency, without re-reads or the cache's share
                   bandwidth * engine.attention_bandwidth_efficiency
                   if attention != engine.attention_bandwidth_efficiency else None, by_op)

    @classmethod
    def _on_kernel_roofs(cls, hw: Hardware, precision: Precision, engine: Engine, group: int, bandwidth, peak,
                         tokens, expert_tokens, kv_bytes, expert_slice: float = 1.0, gemm_shapes: tuple = ()) -> Roofs:
        """Each roof = datasheet x the device's kernel roof for the dtype run x the engine's factor, capped at the
        datasheet. Every roof is set (the per-op fields too): they may be arrays over the step's points. A dense
        GEMM whose shape the engine prices (Engine.gemm_shape) gets its own roof, its shape's share inside the cap."""
        def gemm(dtype, rows, share):  # the units that run it: the peak's own fallback (an A100's fp8: bf16)
            return np.minimum(1.0, curve(hw, "gemm", hw.peak_dtype(dtype))(rows) * engine.flops_efficiency * share)

        def stream(fmt):
            return min(1.0, curve(hw, "weight_stream", fmt)() * engine.weight_bandwidth_efficiency(fmt))
        attention_dtype = precision.attention_matmul_dtype
        prefill = curve(hw, "prefill_attention", hw.peak_dtype(attention_dtype))() * engine.attention_flops_efficiency
        decode = np.minimum(1.0, curve(hw, "decode_attention", precision.kv)(kv_bytes)
                            * engine.kv_attention_efficiency(precision.kv))
        weight_dtype, expert_dtype = precision.weight_matmul_dtype, precision.expert_matmul_dtype
        by_op = _by_shape(engine, weight_dtype, gemm_shapes,
                          lambda share: peak(weight_dtype) * gemm(weight_dtype, tokens, engine.gemm_share(weight_dtype) * share))
        return cls(bandwidth * stream(precision.weights),
                   peak(weight_dtype) * gemm(weight_dtype, tokens, engine.gemm_share(weight_dtype)),
                   peak(attention_dtype) * min(1.0, prefill), engine.corner,
                   bandwidth * decode / engine.kv_reads(group), engine.attention_corner,
                   peak(expert_dtype) * gemm(expert_dtype, expert_tokens,
                                             engine.expert_gemm_efficiency(precision.expert_format) * expert_slice),
                   bandwidth * stream(precision.expert_format) * engine.expert_bandwidth_efficiency, bandwidth * decode,
                   by_op)

    def peaks(self, matmul_kinds: tuple) -> list:
        experts = self.weight_matmul_flops if self.expert_matmul_flops is None else self.expert_matmul_flops
        table = {WEIGHT_MATMUL: self.weight_matmul_flops, ATTENTION_MATMUL: self.attention_matmul_flops,
                 EXPERT_MATMUL: experts, STATE_MATMUL: self.attention_matmul_flops}
        if self.weight_matmul_flops_by_op is not None:  # each dense GEMM at its own shape's rate
            return [own if kind == WEIGHT_MATMUL else table.get(kind, np.inf)
                    for kind, own in zip(matmul_kinds, self.weight_matmul_flops_by_op, strict=True)]
        return [table.get(kind, np.inf) for kind in matmul_kinds]

    def bandwidths(self, matmul_kinds: tuple):
        """Per op, or one value for all (the common case, kept scalar so one point stays fast)."""
        return self._per_op(matmul_kinds, self.bandwidth, self.attention_bandwidth, self.expert_bandwidth,
                            self.state_bandwidth)

    def corners(self, matmul_kinds: tuple):
        return self._per_op(matmul_kinds, self.corner, self.attention_corner)

    @staticmethod
    def _per_op(matmul_kinds: tuple, value, attention_value, expert_value=None, state_value=None):
        if attention_value is None and expert_value is None and state_value is None:
            return value
        attention = value if attention_value is None else attention_value
        table = {ATTENTION_MATMUL: attention, STATE_MATMUL: attention if state_value is None else state_value,
                 EXPERT_MATMUL: value if expert_value is None else expert_value}
        return [table.get(kind, value) for kind in matmul_kinds]


def _by_shape(engine: Engine, dtype: str, gemm_shapes: tuple, rate) -> tuple | None:
    """Per op, `rate(share)` at each dense GEMM's shape share (Engine.gemm_shape); None where every share is 1."""
    shares = [engine.gemm_shape.share(dtype, shape) for shape in gemm_shapes]
    if all(share == 1.0 for share in shares):
        return None
    rates = {share: rate(share) for share in set(shares)}
    return tuple(rates[share] for share in shares)


@dataclass(frozen=True)
class StepTimes:
    compute_s: list  # per op
    memory_s: list  # per op
    time_s: list  # per op: compute and memory combined at the calibrated corner
    roofline_s: np.ndarray  # the model ops' total, each op max(compute, memory) (at the corner)
    no_overlap_s: np.ndarray  # the model ops' total, each op compute + memory
    bound: np.ndarray  # index into BOUNDS
    bound_s: np.ndarray  # seconds of the step spent waiting on that resource


def total(arrays) -> np.ndarray:
    """Sum arrays of different broadcast shapes, smallest first, so most additions stay small."""
    ordered = sorted(arrays, key=np.size)
    result = ordered[0]
    for array in ordered[1:]:
        result = result + array
    return result


def to_shape(value, shape: tuple) -> np.ndarray:
    """np.broadcast_to, skipped when the array already has the shape (most do: it costs microseconds)."""
    return value if isinstance(value, np.ndarray) and value.shape == shape else np.broadcast_to(value, shape)


def soft_maximum(c, m, p: float):
    """(c^p + m^p)^(1/p), as top·(1 + (low/top)^p)^(1/p) so no power overflows: a rounded roofline corner
    (measured kernels rarely overlap compute and memory perfectly where the two are close)."""
    top, low = np.maximum(c, m), np.minimum(c, m)
    if np.isscalar(p) and p == 1:
        return top + low
    out = np.divide(low, top, out=np.zeros(np.shape(top)), where=top > 0)  # in place from here: grids are large
    np.power(out, p, out=out)
    out += 1
    np.power(out, 1 / p, out=out)
    out *= top
    return out


def op_times(peak, bandwidth, flops, weights, act_read, act_write, kv_read, kv_write, corner: float) -> tuple:
    """Elementwise, for one op's arrays or for every op stacked along a first axis: compute time,
    memory time, the op's time, and the seconds it waits on each resource of BOUNDS[:4]."""
    moved = weights + act_read + act_write + kv_read + kv_write
    c = flops / peak
    m = moved / bandwidth
    sharp = corner == math.inf if np.isscalar(corner) else np.all(np.asarray(corner) == math.inf)
    t = np.maximum(c, m) if sharp else soft_maximum(c, m, corner)
    memory_bound = m > c
    per_byte = np.where(memory_bound, t / np.where(moved > 0, moved, 1.0), 0.0)
    waits = (np.where(memory_bound, 0.0, t), per_byte * weights, per_byte * (kv_read + kv_write),
             per_byte * (act_read + act_write))
    return c, m, t, waits


def step_times(counts, phase: CompiledPhase, roofs: Roofs) -> StepTimes:
    """counts: per op (flops, weights, act_read, act_write, kv_read, kv_write): CompiledPhase.parts,
    or the stacked array of CompiledPhase.__call__."""
    peaks, bandwidths, corners = roofs.peaks(phase.matmul), roofs.bandwidths(phase.matmul), roofs.corners(phase.matmul)
    if isinstance(counts, np.ndarray) and counts.size <= STACKED_LIMIT:  # every op in one pass: no Python loop
        shape = np.broadcast_shapes(counts.shape[2:], np.shape(roofs.bandwidth), *(np.shape(p) for p in peaks))
        c, m, t, waits = op_times(_per_op(peaks, shape), _per_op(bandwidths, shape), *np.moveaxis(counts, 1, 0),
                                  _per_op(corners, shape))
        return _step(list(c), list(m), list(t), [x.sum(axis=0) for x in (t, c + m, *waits)], roofs)
    if isinstance(counts, np.ndarray):
        counts = [tuple(op) for op in counts]
    shape = np.broadcast_shapes(*(np.shape(v) for op in counts for v in op), np.shape(roofs.bandwidth),
                                *(p.shape for p in peaks if isinstance(p, np.ndarray)))  # measured roofs per point
    if math.prod(shape) == 1:  # one point: every op in one pass over (ops,) vectors
        stacked = np.array([[float(np.ravel(v)[0]) for v in op] for op in counts]).T
        first = lambda values: (_first_of_each(values) if isinstance(values, list)  # noqa: E731
                                else float(np.ravel(values)[0]))
        c, m, t, waits = op_times(first(peaks), first(bandwidths), *stacked, first(corners))
        sums = [np.full(shape, x.sum()) for x in (t, c + m, *waits)]
        return _step(*(list(np.reshape(x, (-1,) + shape)) for x in (c, m, t)), sums, roofs)
    compute, memory, op_time, no_overlap, waits = [], [], [], [], [[], [], [], []]
    each = lambda values: values if isinstance(values, list) else itertools.repeat(values)  # noqa: E731
    for peak, bandwidth, corner, op in zip(peaks, each(bandwidths), each(corners), counts):  # op by op, own shapes
        c, m, t, op_waits = op_times(peak, bandwidth, *op, corner)
        compute.append(c), memory.append(m), op_time.append(t), no_overlap.append(c + m)
        for wait, column in zip(op_waits, waits):
            column.append(wait)
    return _step(compute, memory, op_time, [total(x) for x in (op_time, no_overlap, *waits)], roofs)


def _first_of_each(values: list) -> np.ndarray:
    """Per op, the one point's value: plain numbers at once (the common case), arrays unwrapped."""
    if all(isinstance(v, float) for v in values):
        return np.array(values)
    return np.array([float(np.ravel(v)[0]) for v in values])


def _per_op(values, shape: tuple) -> np.ndarray:
    """One roof per op, each a number or an array of the points' shape, as one (ops, *shape) array
    (or the one value shared by every op, broadcast along a leading axis)."""
    if not isinstance(values, list):
        return np.asarray(values)[np.newaxis]
    out = np.empty((len(values),) + shape)
    for i, value in enumerate(values):
        out[i] = value
    return out


def _step(compute: list, memory: list, times: list, sums: list, roofs: Roofs) -> StepTimes:
    """sums: the step's op time, no-overlap time and the four waits, summed over ops."""
    roofline, no_overlap, *waits = sums
    bound = np.zeros(np.shape(roofline), dtype=np.int8)
    longest = waits[0]
    for index, wait in enumerate(waits[1:], start=1):  # argmax without stacking four grids
        bound[np.broadcast_to(wait > longest, bound.shape)] = index
        longest = np.maximum(longest, wait)
    return StepTimes(compute, memory, times, roofline, no_overlap, bound, longest)
