"""The one place symbols become numbers fast: each phase's per-op costs, lambdified to numpy, cached.

A compiled phase maps (B, S, b_w, b_a, b_kv, b_e), scalars or broadcastable arrays, to a stack of
per-op FLOPs and bytes by category, already multiplied by the op's layer count.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import sympy as sp

from .models.config import ModelConfig
from .cost import BYTE_CATEGORIES
from .model import DECODE, PREFILL, QUERIES, Options, PlacedOp, kv_cache_expr, parameter_count, phase_ops
from .model import routed_parameter_count, state_bytes_expr
from .ops import ATTENTION_MATMUL, EXPERT_MATMUL, STATE_MATMUL, WEIGHT_MATMUL
from .symbols import BYTE_WIDTHS, B, S, T, b_kv

ARGS = (B, S) + BYTE_WIDTHS
COMPONENTS = ("flops",) + BYTE_CATEGORIES
FLOPS_ROW = 0  # index of FLOPs among COMPONENTS


@dataclass(frozen=True)
class CompiledPhase:
    phase: str
    ops: tuple  # OpName per row
    matmul: tuple  # per op: 'weights', 'attention' or 'none'
    counts: tuple  # per op: how many times it runs per step (its layer count)
    function: object  # (B, S, b_w, b_a, b_kv, b_e) -> list of len(ops) * len(COMPONENTS) arrays
    reads_context: tuple = ()  # per op: whether its cost depends on the keys cached (attention)
    gemm_shapes: tuple = ()  # per op: a weight GEMM's (K depth, N columns) on one GPU, else None (gemm_shape)

    @property
    def names(self) -> tuple:
        return tuple(str(op) for op in self.ops)

    @property
    def op_count(self) -> int:
        """The ops a step of this phase runs: every row once per layer it runs in."""
        return int(sum(self.counts))

    def parts(self, batch, context, byte_widths) -> list[tuple]:
        """Per op, its (flops, weights, act_read, act_write, kv_read, kv_write), each an array in
        the op's own broadcast shape: an op that does not depend on the context stays (nB, 1)."""
        values = self.function(batch, context, *byte_widths)
        width = len(COMPONENTS)
        return [tuple(np.asarray(v, dtype=float) for v in values[i * width:(i + 1) * width])
                for i in range(len(self.ops))]

    def point(self, batch: float, context: float, byte_widths) -> np.ndarray:
        """Array (n_ops, n_components) of counts at one point: one lambdified call, one conversion."""
        values = self.function(batch, context, *byte_widths)
        try:
            flat = np.array(values, dtype=float)
        except ValueError:  # an argument closed over (a step's queries) was an array of one
            flat = np.array([float(np.ravel(v)[0]) for v in values])
        return flat.reshape(len(self.ops), len(COMPONENTS))

    def __call__(self, batch, context, byte_widths) -> np.ndarray:
        """Array (n_ops, n_components, *shape) of counts for every op (the full broadcast shape)."""
        parts = self.parts(batch, context, byte_widths)
        shape = np.broadcast_shapes(*(np.shape(v) for op in parts for v in op))
        return np.stack([np.stack([np.broadcast_to(v, shape) for v in op]) for op in parts])


def reads_context(p: PlacedOp) -> bool:
    """Whether an op's cost depends on the keys in the cache (attention), not only on the tokens."""
    return any(S in sp.sympify(getattr(p.op.cost, c)).free_symbols for c in COMPONENTS)


def _lambdify(placed: list[PlacedOp], args: tuple):
    exprs = [sp.sympify(getattr(p.op.cost, component)) * p.count for p in placed for component in COMPONENTS]
    return sp.lambdify(args, exprs, modules="numpy", cse=True)


def gemm_shape(p: PlacedOp) -> tuple[float, float] | None:
    """A weight GEMM's (K, N) once the config's numbers are in: what its kernel's rate depends on besides M."""
    if p.op.matmul != WEIGHT_MATMUL or len(p.op.shape) != 2:
        return None
    depth, columns = (sp.sympify(x) for x in p.op.shape)
    return (float(depth), float(columns)) if depth.is_number and columns.is_number else None


def _compile(placed: list[PlacedOp], phase: str) -> CompiledPhase:
    return CompiledPhase(phase, tuple(p.op_name for p in placed), tuple(p.op.matmul for p in placed),
                         tuple(p.count for p in placed), _lambdify(placed, ARGS), tuple(reads_context(p) for p in placed),
                         tuple(gemm_shape(p) for p in placed))


def per_sequence(p: PlacedOp) -> bool:
    """Whether every count of an op is B times its count for one sequence (attention against a
    sequence's own cache): then its time is B times one sequence's, for any roofline corner."""
    return all(sp.expand(sp.sympify(getattr(p.op.cost, c)) - B * sp.sympify(getattr(p.op.cost, c)).xreplace({B: 1}))
               == 0 for c in COMPONENTS)


@dataclass(frozen=True)
class QueriesModel:
    """Per-op costs of a step of T query tokens per sequence: function(B, S, b_w, b_a, b_kv, b_e, T).

    Decode (T = 1) and a prefill (T = S) are its cases; speculative verification (T = γ + 1) and
    chunked prefill need the T in between.
    """
    function: object
    ops: tuple
    matmul: tuple
    counts: tuple
    context_dependent: tuple  # per op: whether its cost depends on S (attention) or only on tokens
    gemm_shapes: tuple = ()  # per op: a weight GEMM's (K, N), else None

    def phase(self, queries) -> CompiledPhase:
        """A compiled phase whose steps process `queries` tokens per sequence (scalar or array)."""
        label = f"T={queries}" if np.ndim(queries) == 0 else f"T=({np.size(queries)} values)"  # printing an array is slow
        return CompiledPhase(label, self.ops, self.matmul, self.counts,
                             lambda batch, context, *widths: self.function(batch, context, *widths, queries),
                             self.context_dependent, self.gemm_shapes)


@lru_cache(maxsize=32)
def compile_queries(config: ModelConfig, options: Options = Options()) -> QueriesModel:
    placed = phase_ops(config, options, QUERIES)
    return QueriesModel(_lambdify(placed, ARGS + (T,)), tuple(p.op_name for p in placed),
                        tuple(p.op.matmul for p in placed), tuple(p.count for p in placed),
                        tuple(reads_context(p) for p in placed), tuple(gemm_shape(p) for p in placed))


@dataclass(frozen=True)
class CompiledModel:
    config: ModelConfig
    options: Options
    prefill: CompiledPhase
    decode: CompiledPhase
    params: int
    kv_cache: object  # (B, S, b_kv) -> bytes of the cache holding S tokens per sequence
    kv_cache_expr: sp.Expr
    # The decode ops that read the cache, alone: E2E prices only them at each context it integrates over
    # (the others cost the same at every step); per-sequence ones at B = 1, then scaled by B.
    decode_context: CompiledPhase
    decode_context_per_sequence: bool
    # (b_kv) -> bytes one sequence's constant-state layers hold whatever S (0 without such layers);
    # kv_cache includes it, so kv_cache(1, S) = kv_per_token * S + state (window layers capped at W).
    state_cache: object = None
    routed_params: int = 0  # of `params`, the routed experts' (b_e wide): Precision.held_weight_bytes

    def state_bytes(self, kv_bytes) -> float:
        return float(self.state_cache(kv_bytes)) if self.state_cache is not None else 0.0

    def kv_per_token(self, kv_bytes) -> float:
        """Bytes a sequence's cache grows by per token (attention layers only), state left out."""
        return float(self.kv_cache(1.0, 1.0, kv_bytes)) - self.state_bytes(kv_bytes)


@lru_cache(maxsize=64)
def compile_model(config: ModelConfig, options: Options = Options()) -> CompiledModel:
    kv_expr = kv_cache_expr(config, options)
    decode = phase_ops(config, options, DECODE)
    context = [p for p in decode if reads_context(p)]
    return CompiledModel(
        config=config, options=options,
        prefill=_compile(phase_ops(config, options, PREFILL), PREFILL),
        decode=_compile(decode, DECODE),
        params=parameter_count(config),
        kv_cache=sp.lambdify((B, S, b_kv), kv_expr, modules="numpy"),
        kv_cache_expr=kv_expr,
        decode_context=_compile(context, DECODE),
        decode_context_per_sequence=all(per_sequence(p) for p in context),
        state_cache=sp.lambdify((b_kv,), state_bytes_expr(config, options), modules="numpy"),
        routed_params=routed_parameter_count(config, options),
    )


MATMUL_KINDS = (WEIGHT_MATMUL, ATTENTION_MATMUL, EXPERT_MATMUL, STATE_MATMUL)
