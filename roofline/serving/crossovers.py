"""Crossovers and sensitivities of decode, each solved in letters from the Deployment's own step.

Each function takes a Deployment first and returns a `Crossover`: the solved expression in letters, the
numbers it was given and its value. The batch crossovers solve on the step's lines in B
(roofline.step_lines: each op's compute and memory time a line, the collectives and fixed overheads one
more), so the engine and split the Deployment carries are in every number; the memory wall
is the one memory model's (roofline.memory); the elasticities are the pricer's own slopes.
Left out: a rounded roofline corner in the closed forms (they take the sharp max); MoE expert counts are
nonlinear in B and solved numerically (bisection on the same step), which the result says. The critical
batch and the KV = weights context are the lecture's, from the datasheet (roofline.derivations).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from .. import derivations
from ..models.config import ATTENTION_KINDS, PARALLEL
from ..deployment import Deployment
from ..memory import DEFAULT_PREFILL_CHUNK
from ..memory import memory as memory_of
from ..model import DECODE, decode_context
from ..ops import expected_experts_touched
from ..step_lines import StepLines
from ..symbols import B, E, S, T, b_kv, k

M, W_bytes, A_ws = sp.symbols("M W_bytes A_ws", positive=True)  # memory, weight bytes, prefill workspace
beta = sp.Symbol("beta", positive=True)  # memory bandwidth, bytes/s
t0, t1, g, f = sp.symbols("t_0 t_1 g f", positive=True)  # step-time intercept, slope, asymptotic slope, fraction


@dataclass(frozen=True)
class Crossover:
    name: str
    expression: sp.Expr  # the solution in letters
    value: float
    given: dict = field(default_factory=dict)  # symbol name -> the number substituted
    note: str = ""


def critical_batch(d: Deployment) -> Crossover:
    """The batch where decode weight matmuls turn compute-bound: 2B / b_w = peak / bandwidth.

    For an MoE model this holds for the weights every token uses (attention, dense layers, shared
    experts); routed experts see fewer tokens each: `expert_critical_batch`.
    """
    hw, precision = d.hardware, d.precision
    expr, value = derivations.critical_batch(hw, precision)
    note = ("dense weights only (attention, dense layers, shared experts); routed experts: expert_critical_batch"
            if d.config.n_experts else "")
    return Crossover("critical_batch", sp.Eq(B, expr), value,
                     {"I_hw": derivations.accelerator_intensity(hw, precision.weight_matmul_dtype),
                      "b_w": precision.weight_bytes}, note)


def expert_critical_batch(d: Deployment) -> Crossover:
    """The batch where routed-expert matmuls turn compute-bound: each touched expert sees B·k / E_t(B) tokens,
    E_t(B) = E(1 − (1 − k/E)^B) the expected distinct experts (the count the decode cost reads), and that
    must reach the critical batch at the experts' own b_e and matmul dtype. Tokens per expert grow with B, so
    bisection finds the first B."""
    config = d.config
    if not config.n_experts:
        raise ValueError(f"model {config.name!r}: has no routed experts; use critical_batch")
    _, dense = derivations.critical_batch(d.hardware, d.precision, experts=True)  # at the experts' own b_e and matmul dtype
    per_expert = B * k / expected_experts_touched().xreplace({T: 1})
    given = {E: config.n_experts, k: config.top_k}
    tokens = sp.lambdify(B, per_expert.xreplace(given), modules="numpy")
    lo, hi = 1, 2
    while tokens(float(hi)) < dense:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if tokens(float(mid)) < dense else (lo, mid)
    value = 1 if tokens(1.0) >= dense else hi
    b_crit = sp.Symbol("B_crit", positive=True)
    return Crossover("expert_critical_batch", sp.Eq(per_expert, b_crit), value,
                     {"E": config.n_experts, "k": config.top_k, "B_crit": dense},
                     f"routed experts: {config.top_k} of {config.n_experts} per token, spread over the expected "
                     f"distinct experts; solved by bisection")


def kv_equals_weights_context(d: Deployment) -> Crossover:
    """Context where one sequence's KV bytes read per decode step equal the weight bytes read (a constant
    state, read every step whatever S, counts with the KV: it moves the crossover, never removes it)."""
    config, precision = d.config, d.precision
    expr, value = derivations.kv_equals_weights_context(config, precision)
    grows = any(kind in ATTENTION_KINDS + (PARALLEL,) for kind in config.layer_attention)
    note = ("" if value == value else "never: the windowed KV cache stays below the weights" if grows
            else "never: no layer's cache grows with the context (constant state only)")
    if config.has_state:  # where the wall would be if every state mixer were attention (constant_state)
        from .constant_state import attention_twin
        _, twin = derivations.kv_equals_weights_context(attention_twin(config), precision)
        note = (f"{note}; " if note else "the constant state's read counts with the KV; ") + \
            f"all-attention twin: S = {twin:,.0f}"
    return Crossover("kv_equals_weights_context", sp.Eq(S, expr, evaluate=False), value,
                     {"b_w": precision.weight_bytes, "b_kv": precision.kv_bytes,
                      **({"b_e": precision.expert_bytes} if precision.experts is not None else {})}, note)


def max_batch(d: Deployment, prompt: int = 1024, gen: int = 0,
              prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK) -> Crossover:
    """Largest B with weights + B·(KV at prompt + gen tokens) + workspace <= memory (one GPU's), in closed form.

    The workspace is one prefill chunk's (roofline.memory): fixed once the batch fills a chunk,
    which is where the largest batch lies whenever a chunk's worth of sequences fits.
    """
    per_sequence_kv = d.compiled.kv_cache_expr.xreplace({B: 1})
    solution = sp.solve(sp.Eq(W_bytes + B * per_sequence_kv + A_ws, M), B)[0]
    # The value is evaluate's (the one memory model); A_ws is the workspace at that batch.
    value = int(memory_of(d, 1.0, float(prompt), float(gen), prefill_chunk)["max_batch"])
    at = memory_of(d, float(max(value, 1)), float(prompt), float(gen), prefill_chunk)
    # M: what one GPU shows the runtime less the runtime reserve (roofline.kv_memory), as the memory model counts it
    given = {M: float(d.engine.memory.budget(d.hardware.capacity_bytes, 0.0)[0]), W_bytes: float(at["weight_bytes"]),
             A_ws: float(at["workspace_bytes"]), S: prompt + gen, b_kv: d.precision.kv_bytes}
    note = f"workspace: one {prefill_chunk}-token prefill chunk" if prefill_chunk else "workspace: every prompt at once"
    return Crossover("max_batch", sp.Eq(B, sp.floor(solution)), value, {str(k): v for k, v in given.items()}, note)


def saturation_batch(d: Deployment, prompt: int = 1024, fraction: float = 0.9) -> Crossover:
    """Smallest batch whose decode tokens/s reach `fraction` of the asymptote B / t(B) -> 1 / g.

    On the piece of t(B) = t_0 + t_1·B where the crossing lies, B / t(B) = f / g solves to
    B = f·t_0 / (g − f·t_1); fully memory-bound (t_1 = g) that is the napkin's 9a/b at f = 0.9.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"fraction: must be in (0, 1), got {fraction!r}")
    solution = sp.solve(sp.Eq(B / (t0 + t1 * B), f / g), B)[0]
    lines = StepLines.of(d, decode_context(prompt))
    if lines is None:
        return _saturation_by_bisection(d, prompt, fraction, solution)
    slope = lines.asymptotic_slope

    def root(piece):  # throughput on a piece with t_1 >= g / f stays below f / g
        return None if piece.t_1 >= slope / fraction else float(solution.xreplace(
            {t0: piece.t_0, t1: piece.t_1, g: slope, f: fraction}))
    found = lines.solve(root)
    if found is None:
        return Crossover("saturation_batch", sp.Eq(B, sp.ceiling(solution)), float("nan"), note="not reached")
    piece, value = found
    given = {"t_0": piece.t_0, "t_1": piece.t_1, "g": slope, "f": fraction}
    return Crossover("saturation_batch", sp.Eq(B, sp.ceiling(solution)), math.ceil(value - 1e-9), given)


def _saturation_by_bisection(d: Deployment, prompt, fraction, solution) -> Crossover:
    """Throughput is monotone in B (t(B)/B never grows), so bisection finds the first batch past f / g."""

    def tpot(batch):
        return float(d.step(DECODE, float(batch), float(decode_context(prompt))).total_s)

    huge = 1e12  # every expert is read long before this batch: t(B)/B is at its limit
    slope = tpot(huge) / huge
    lo, hi = 0, 1
    while hi / tpot(hi) < fraction / slope:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if mid / tpot(mid) < fraction / slope else (lo, mid)
    return Crossover("saturation_batch", sp.Eq(B, sp.ceiling(solution)), hi, {"g": slope, "f": fraction},
                     "MoE: expert reads are nonlinear in B; solved by bisection on the same costs")


def memory_bound_model(d: Deployment, prompt: int = 1024) -> dict:
    """The napkin regime, every op memory-bound: t(B) = a + b·B, tokens/s = B / (a + b·B).

    a: bytes read once per step (weights) / bandwidth, plus the fixed times; b: bytes per sequence (KV,
    activations) / bandwidth, plus the collectives' seconds per sequence.
    """
    lines = StepLines.of(d, decode_context(prompt))
    if lines is None:
        raise ValueError(f"model {d.config.name!r}: MoE decode bytes are not linear in the batch; no (a, b) model")
    a, b = sp.symbols("a b", positive=True)
    given = dict(zip((a, b), lines.memory_bound))
    saturation = sp.solve(sp.Eq(B / (a + b * B), f / b), B)[0]  # 90%: 9a/b
    doubling = sp.solve(sp.Eq((2 * B / (a + 2 * b * B)) / (B / (a + b * B)), 1 + f), B)[0]
    return {"a": given[a], "b": given[b], "saturation": saturation, "doubling_gain_below": doubling,
            "given": given}


def diminishing_batch(d: Deployment, prompt: int = 1024, gain: float = 0.1) -> Crossover:
    """The batch beyond which doubling it raises memory-bound tokens/s by less than `gain`: a(1−f)/(2fb)."""
    if not 0 < gain < 1:
        raise ValueError(f"gain: must be in (0, 1), got {gain!r}")
    model = memory_bound_model(d, prompt)
    expr = model["doubling_gain_below"]
    value = float(expr.xreplace({**model["given"], f: gain}))
    return Crossover("diminishing_batch", sp.Eq(B, expr), value, {**{str(k): v for k, v in model["given"].items()},
                                                                   "f": gain}, "memory-bound regime")


STEP = 1e-6  # relative step of the central differences: the step is piecewise linear, so they are exact off a kink
KV = slice(4, 6)  # kv_read, kv_write among a model op's counts (compiled.COMPONENTS)
BYTES = slice(1, 6)


def elasticities(d: Deployment, batch: int = 1, prompt: int = 1024) -> dict[str, Crossover]:
    """d ln TPOT / d ln x for bandwidth, KV bytes per element (bits) and batch, at one point: central
    differences of the pricer's own step (at a kink of the sharp roofline, the mean of the two sides)."""
    context = float(decode_context(prompt))
    phase = d.compiled.decode

    def tpot(batch_size, part: slice = BYTES, factor: float = 1.0) -> float:
        counts = np.array(d.components(phase, float(batch_size), context), dtype=float)
        counts[:, part] *= factor
        return float(d.price(phase, counts, float(batch_size), float(batch_size)).total_s)

    def elasticity(at) -> float:
        return (math.log(at(1 + STEP)) - math.log(at(1 - STEP))) / (math.log(1 + STEP) - math.log(1 - STEP))

    beta = sp.Symbol("beta", positive=True)
    # Bandwidth divides every byte of the model ops, so its elasticity is minus the bytes'.
    values = {"bandwidth": (beta, -elasticity(lambda x: tpot(batch, BYTES, x))),
              "kv_bits": (b_kv, elasticity(lambda x: tpot(batch, KV, x))),
              "batch": (B, elasticity(lambda x: tpot(batch * x)))}
    point = {"B": batch, "beta": d.roofs.bandwidth, "b_kv": d.precision.kv_bytes}
    out = {}
    for name, (symbol, value) in values.items():
        step = sp.Function("t")(symbol)
        out[name] = Crossover(f"tpot_elasticity_{name}", symbol * sp.Derivative(step, symbol) / step, value, point)
    return out
