"""Crossovers and sensitivities of decode, solved with sympy from the library's own op costs.

Each function returns a `Crossover`: the solved expression in letters, the numbers it was given and
its value. The decode step is written exactly as the roofline prices it,
    t(B) = sum over ops of max(FLOPs_i(B) / peak_i, bytes_i(B) / bandwidth),
which, for a dense model at a fixed context, is piecewise linear in B (each op a line per roof),
plus the Deployment's collectives and fixed overheads (lines in B too). Every function takes the
calibration and tensor-parallel degree and prices through that Deployment. Left out: a calibrated
corner's rounding (the closed forms take the sharp max); MoE expert counts are nonlinear in B and
solved numerically (bisection on the same costs), which the result says.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from .. import derivations
from ..calibration import IDEAL, Calibration
from ..config import ATTENTION_KINDS, PARALLEL, ModelConfig
from ..deployment import Deployment
from ..evaluate import DEFAULT_PREFILL_CHUNK
from ..evaluate import memory as memory_of
from ..hardware import Hardware
from ..model import DECODE, Options, decode_context, phase_ops
from ..ops import expected_experts_touched
from ..precision import Precision
from ..symbols import BYTE_WIDTHS, B, E, S, T, b_kv, k

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


def critical_batch(hw: Hardware, precision: Precision = Precision(), config: ModelConfig | None = None) -> Crossover:
    """The batch where decode weight matmuls turn compute-bound: 2B / b_w = peak / bandwidth.

    For an MoE model this holds for the weights every token uses (attention, dense layers, shared
    experts); routed experts see fewer tokens each: `expert_critical_batch`.
    """
    expr, value = derivations.critical_batch(hw, precision)
    note = ("dense weights only (attention, dense layers, shared experts); routed experts: expert_critical_batch"
            if config is not None and config.n_experts else "")
    return Crossover("critical_batch", sp.Eq(B, expr), value,
                     {"I_hw": derivations.accelerator_intensity(hw, precision.weight_matmul_dtype),
                      "b_w": precision.weight_bytes}, note)


def expert_critical_batch(config: ModelConfig, hw: Hardware, precision: Precision = Precision()) -> Crossover:
    """The batch where routed-expert matmuls turn compute-bound: each touched expert sees B·k / E_t(B) tokens,
    E_t(B) = E(1 − (1 − k/E)^B) the expected distinct experts (the count the decode cost reads), and that
    must reach the critical batch at the experts' own b_e and matmul dtype. Tokens per expert grow with B, so
    bisection finds the first B."""
    if not config.n_experts:
        raise ValueError(f"model {config.name!r}: has no routed experts; use critical_batch")
    _, dense = derivations.critical_batch(hw, precision, experts=True)  # at the experts' own b_e and matmul dtype
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


def kv_equals_weights_context(config: ModelConfig, precision: Precision = Precision()) -> Crossover:
    """Context where one sequence's KV bytes read per decode step equal the weight bytes read (a constant
    state, read every step whatever S, counts with the KV: it moves the crossover, never removes it)."""
    expr, value = derivations.kv_equals_weights_context(config, precision)
    grows = any(kind in ATTENTION_KINDS + (PARALLEL,) for kind in config.layer_attention)
    note = ("" if value == value else "never: the windowed KV cache stays below the weights" if grows
            else "never: no layer's cache grows with the context (constant state only)")
    if config.has_state:  # where the wall would be if every state mixer were attention (constant_state)
        from ..constant_state import attention_twin
        _, twin = derivations.kv_equals_weights_context(attention_twin(config), precision)
        note = (f"{note}; " if note else "the constant state's read counts with the KV; ") + \
            f"all-attention twin: S = {twin:,.0f}"
    return Crossover("kv_equals_weights_context", sp.Eq(S, expr, evaluate=False), value,
                     {"b_w": precision.weight_bytes, "b_kv": precision.kv_bytes,
                      **({"b_e": precision.expert_bytes} if precision.experts is not None else {})}, note)


def max_batch(config: ModelConfig, hw: Hardware, precision: Precision = Precision(), prompt: int = 1024,
              gen: int = 0, options: Options = Options(), calibration: Calibration = IDEAL, tp: int = 1,
              prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK) -> Crossover:
    """Largest B with weights + B·(KV at prompt + gen tokens) + workspace <= memory (one GPU's), in closed form.

    The workspace is one prefill chunk's (roofline.evaluate.memory): fixed once the batch fills a chunk,
    which is where the largest batch lies whenever a chunk's worth of sequences fits.
    """
    d = Deployment(config, hw, precision, options, calibration, tp=tp)
    per_sequence_kv = d.compiled.kv_cache_expr.xreplace({B: 1})
    solution = sp.solve(sp.Eq(W_bytes + B * per_sequence_kv + A_ws, M), B)[0]
    # The value is evaluate's (the one memory model); A_ws is the workspace at that batch.
    value = int(memory_of(d, 1.0, float(prompt), float(gen), prefill_chunk)["max_batch"])
    at = memory_of(d, float(max(value, 1)), float(prompt), float(gen), prefill_chunk)
    # M: what one GPU shows the runtime less the runtime reserve (roofline.kv_memory), as evaluate's memory counts it
    given = {M: float(d.engine.memory.budget(hw.capacity_bytes, 0.0)[0]), W_bytes: float(at["weight_bytes"]),
             A_ws: float(at["workspace_bytes"]),
             S: prompt + gen, b_kv: precision.kv_bytes}
    note = f"workspace: one {prefill_chunk}-token prefill chunk" if prefill_chunk else "workspace: every prompt at once"
    return Crossover("max_batch", sp.Eq(B, sp.floor(solution)), value, {str(k): v for k, v in given.items()}, note)


def _widths(precision: Precision) -> dict:
    return dict(zip(BYTE_WIDTHS, precision.byte_widths))


def _fixed_seconds(d: Deployment) -> sp.Expr:
    """A decode step's collectives (lines in B) and the calibration's fixed overheads."""
    return sum((seconds for _, _, seconds in d.collectives(B)), sp.Float(d.roofs.overhead_s))


def decode_time_expr(config: ModelConfig, hw: Hardware, precision: Precision, prompt: int,
                     options: Options = Options(), keep=(B,), calibration: Calibration = IDEAL, tp: int = 1) -> sp.Expr:
    """TPOT as the roofline prices it, with the symbols in `keep` left free (B, beta for bandwidth, b_kv)."""
    d = Deployment(config, hw, precision, options, calibration, tp=tp)
    placed = phase_ops(d.local, options, DECODE)
    peaks, rates = _roofs(d, placed)
    values = {S: decode_context(prompt), **{s: v for s, v in _widths(precision).items() if s not in keep}}
    if beta not in keep:
        values[beta] = d.roofs.bandwidth
    time = _fixed_seconds(d)
    for p, peak, rate in zip(placed, peaks, rates):  # rate: the op's bandwidth as a share of beta
        compute = p.op.cost.flops / sp.Float(peak) if np.isfinite(peak) else sp.Integer(0)
        time += p.count * sp.Max(compute, p.op.cost.bytes / (beta * sp.Float(rate)))
    return time.xreplace(values)


def _roofs(d: Deployment, placed) -> tuple[list, list]:
    """Per op its achieved peak, and its bandwidth as a fraction of the weight GEMMs' (attention's may differ)."""
    kinds = tuple(p.op.matmul for p in placed)
    bandwidths = d.roofs.bandwidths(kinds)
    rates = [b / d.roofs.bandwidth for b in bandwidths] if isinstance(bandwidths, list) else [1.0] * len(placed)
    return d.roofs.peaks(kinds), rates


def _lines(config, hw, precision, prompt, options, calibration=IDEAL, tp=1):
    """Per op (compute intercept, slope; memory intercept, slope) in seconds, or None if not linear in B;
    the collectives and fixed overheads as one more row (the same line for both roofs)."""
    d = Deployment(config, hw, precision, options, calibration, tp=tp)
    placed = phase_ops(d.local, options, DECODE)
    values = {S: decode_context(prompt), **_widths(precision)}
    lines = []
    peaks, rates = _roofs(d, placed)
    for p, peak, rate in zip(placed, peaks, rates):
        pair = []
        for expr, roof in ((p.op.cost.flops, peak), (p.op.cost.bytes, d.roofs.bandwidth * rate)):
            # A gather reads min(B, rows) rows: B while the batch is below the vocabulary.
            expr = sp.sympify(expr).xreplace(values).replace(lambda e: isinstance(e, sp.Min) and B in e.free_symbols, lambda e: B)
            try:
                poly = sp.Poly(expr, B)
            except sp.PolynomialError:
                return None
            if poly.degree() > 1:
                return None
            pair += [p.count * float(poly.coeff_monomial(1)) / roof, p.count * float(poly.coeff_monomial(B)) / roof]
        lines.append(pair)
    fixed = sp.Poly(sp.expand(_fixed_seconds(d)), B)
    intercept, slope = float(fixed.coeff_monomial(1)), float(fixed.coeff_monomial(B))
    lines.append([intercept, slope, intercept, slope])
    return np.array(lines)


def saturation_batch(config: ModelConfig, hw: Hardware, precision: Precision = Precision(), prompt: int = 1024,
                     fraction: float = 0.9, options: Options = Options(), calibration: Calibration = IDEAL,
                     tp: int = 1) -> Crossover:
    """Smallest batch whose decode tokens/s reach `fraction` of the asymptote B / t(B) -> 1 / g.

    On the piece of t(B) = t_0 + t_1·B where the crossing lies, B / t(B) = f / g solves to
    B = f·t_0 / (g − f·t_1); fully memory-bound (t_1 = g) that is the napkin's 9a/b at f = 0.9.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"fraction: must be in (0, 1), got {fraction!r}")
    solution = sp.solve(sp.Eq(B / (t0 + t1 * B), f / g), B)[0]
    lines = _lines(config, hw, precision, prompt, options, calibration, tp)
    if lines is None:
        d = Deployment(config, hw, precision, options, calibration, tp=tp)
        return _saturation_by_bisection(d, prompt, fraction, solution)
    c0, c1, m0, m1 = lines.T
    slope = float(np.sum(np.maximum(c1, m1)))
    crossings = [(a0 - b0) / (b1 - a1) for a0, a1, b0, b1 in zip(c0, c1, m0, m1) if a1 != b1 and (a0 - b0) / (b1 - a1) > 0]
    edges = [0.0] + sorted(crossings) + [math.inf]
    for lo, hi in zip(edges[:-1], edges[1:]):
        probe = lo + 1.0 if hi == math.inf else (lo + hi) / 2
        compute_wins = c0 + c1 * probe >= m0 + m1 * probe
        piece = {t0: float(np.sum(np.where(compute_wins, c0, m0))), t1: float(np.sum(np.where(compute_wins, c1, m1))),
                 g: slope, f: fraction}
        if piece[t1] >= slope / fraction:
            continue  # throughput on this piece stays below f / g
        root = float(solution.xreplace(piece))
        if lo <= root <= hi:
            given = {str(k): v for k, v in piece.items()}
            return Crossover("saturation_batch", sp.Eq(B, sp.ceiling(solution)), math.ceil(root - 1e-9), given)
    return Crossover("saturation_batch", sp.Eq(B, sp.ceiling(solution)), float("nan"), note="not reached")


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


def memory_bound_model(config: ModelConfig, hw: Hardware, precision: Precision = Precision(), prompt: int = 1024,
                       options: Options = Options(), calibration: Calibration = IDEAL, tp: int = 1) -> dict:
    """The napkin regime, every op memory-bound: t(B) = a + b·B, tokens/s = B / (a + b·B).

    a: bytes read once per step (weights) / bandwidth; b: bytes per sequence (KV, activations) / bandwidth.
    """
    lines = _lines(config, hw, precision, prompt, options, calibration, tp)
    if lines is None:
        raise ValueError(f"model {config.name!r}: MoE decode bytes are not linear in the batch; no (a, b) model")
    a, b = sp.symbols("a b", positive=True)
    given = {a: float(lines[:, 2].sum()), b: float(lines[:, 3].sum())}
    saturation = sp.solve(sp.Eq(B / (a + b * B), f / b), B)[0]  # 90%: 9a/b
    doubling = sp.solve(sp.Eq((2 * B / (a + 2 * b * B)) / (B / (a + b * B)), 1 + f), B)[0]
    return {"a": given[a], "b": given[b], "saturation": saturation, "doubling_gain_below": doubling,
            "given": given}


def diminishing_batch(config: ModelConfig, hw: Hardware, precision: Precision = Precision(), prompt: int = 1024,
                      gain: float = 0.1, options: Options = Options(), calibration: Calibration = IDEAL,
                      tp: int = 1) -> Crossover:
    """The batch beyond which doubling it raises memory-bound tokens/s by less than `gain`: a(1−f)/(2fb)."""
    if not 0 < gain < 1:
        raise ValueError(f"gain: must be in (0, 1), got {gain!r}")
    model = memory_bound_model(config, hw, precision, prompt, options, calibration, tp)
    expr = model["doubling_gain_below"]
    value = float(expr.xreplace({**model["given"], f: gain}))
    return Crossover("diminishing_batch", sp.Eq(B, expr), value, {**{str(k): v for k, v in model["given"].items()},
                                                                   "f": gain}, "memory-bound regime")


def elasticities(config: ModelConfig, hw: Hardware, precision: Precision = Precision(), batch: int = 1,
                 prompt: int = 1024, options: Options = Options(), calibration: Calibration = IDEAL,
                 tp: int = 1) -> dict[str, Crossover]:
    """d ln TPOT / d ln x for bandwidth, KV bytes per element (bits) and batch, at one point."""
    expr = decode_time_expr(config, hw, precision, prompt, options, keep=(B, beta, b_kv), calibration=calibration, tp=tp)
    point = {B: batch, beta: Deployment(config, hw, precision, options, calibration, tp=tp).roofs.bandwidth,
             b_kv: precision.kv_bytes}
    out = {}
    for name, symbol in (("bandwidth", beta), ("kv_bits", b_kv), ("batch", B)):
        elasticity = sp.diff(expr, symbol) * symbol / expr
        value = float(elasticity.xreplace(point).replace(sp.Heaviside, lambda x, *_: sp.Heaviside(x, sp.S.Half)))
        step = sp.Function("t")(symbol)
        out[name] = Crossover(f"tpot_elasticity_{name}", symbol * sp.Derivative(step, symbol) / step, value,
                              {str(k): float(v) for k, v in point.items()})
    return out
