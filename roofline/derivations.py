"""The lecture's derivations, reproduced from the same op accounting the calculator uses.

Each function returns sympy expressions (and their limits) so callers can show the formula, not
only the number. Source: Stanford CS336 lecture 10 (inference), after the scaling book.
"""
from __future__ import annotations

import itertools

import sympy as sp

from . import ops as o
from .models.config import ModelConfig
from .hardware import Hardware
from .model import DECODE, Options, dimensions, phase_ops
from .precision import Precision
from .symbols import BYTE_WIDTHS, B, D, F, H, K, L, N, S, T, V, b_a, b_e, b_kv, b_w

BF16 = {b_w: 2, b_a: 2, b_kv: 2, b_e: 2}


def intensity(op_list: list[o.Op]) -> sp.Expr:
    flops = sum((op.cost.flops for op in op_list), sp.Integer(0))
    moved = sum((op.cost.bytes for op in op_list), sp.Integer(0))
    return sp.simplify(flops / moved)


def matmul_intensity() -> tuple[sp.Expr, sp.Expr]:
    """X (B, D) @ W (D, F) in bf16: intensity 2BDF / (2BD + 2DF + 2BF) -> B as D, F -> infinity."""
    expr = intensity([o.linear("matmul", D, F, n=B)]).xreplace(BF16)
    return sp.simplify(expr), sp.limit(sp.limit(expr, D, sp.oo), F, sp.oo)


def mlp_intensity() -> tuple[sp.Expr, sp.Expr]:
    """Gated MLP over B*T tokens in bf16: intensity -> B*T as D, F -> infinity (together)."""
    expr = intensity(o.gated_mlp()).xreplace(BF16)
    grow = sp.Symbol("x", positive=True)
    return sp.simplify(expr), sp.limit(expr.xreplace({D: grow, F: 4 * grow}), grow, sp.oo)


def attention_intensity(causal: bool = False) -> sp.Expr:
    """MHA attention in bf16, K = N: S*T/(S+T) counting every query-key pair (the lecture)."""
    op = o.attention("attention", H, H, 2 * K * H * b_kv, causal=causal)
    return sp.factor(intensity([op]).xreplace({**BF16, K: N}))


def attention_limits() -> dict[str, sp.Expr]:
    """Prefill (T = S) gives S/2; decode (T = 1) gives S/(S+1) < 1, with no B anywhere."""
    expr = attention_intensity()
    return {"general": expr, "prefill": sp.simplify(expr.subs(T, S)), "decode": sp.simplify(expr.subs(T, 1)),
            "decode_long_context": sp.limit(expr.subs(T, 1), S, sp.oo)}


def accelerator_intensity(hw: Hardware, dtype: str = "bf16") -> float:
    """FLOPs per byte at the roofline corner: H100 989e12 / 3.35e12 = 295."""
    return hw.peak(dtype) / hw.memory_bandwidth


def decode_weight_intensity_limit() -> sp.Expr:
    """A decode matmul against the weights (T = 1): 2B / b_w FLOPs per byte as D, F -> infinity."""
    expr = intensity([o.linear("matmul", D, F, n=B)]).xreplace({b_a: b_w})
    return sp.limit(sp.limit(expr, D, sp.oo), F, sp.oo)


def critical_batch(hw: Hardware, precision: Precision = Precision(), experts: bool = False) -> tuple[sp.Expr, float]:
    """The batch where decode weight matmuls turn compute-bound: 2B / b_w = peak / bandwidth.

    experts: the tokens one routed expert must see instead: its weights b_e wide, its matmul in
    Precision.expert_matmul_dtype (the expression keeps the letter b_w, the value takes b_e).
    """
    ridge = sp.Symbol("I_hw", positive=True)
    solution = sp.solve(sp.Eq(decode_weight_intensity_limit(), ridge), B)[0]
    dtype, width = ((precision.expert_matmul_dtype, precision.expert_bytes) if experts
                    else (precision.weight_matmul_dtype, precision.weight_bytes))
    value = solution.xreplace({ridge: accelerator_intensity(hw, dtype), b_w: width})
    return solution, float(value)


def lecture_napkin(config: ModelConfig, hw: Hardware) -> dict[str, sp.Expr]:
    """The lecture's napkin model in B and S: bf16 parameters (no norms) + KV cache, read once per step.

    params = 2VD + L(2DNH + 2DKH + 3DF); KV per sequence = S * 2 L K H * 2 bytes.
    """
    params_expr = 2 * V * D + L * (2 * D * N * H + 2 * D * K * H + 3 * D * F)
    values = {k: v for k, v in dimensions(config).items() if k in (V, D, L, N, K, H, F)}
    params = params_expr.xreplace(values)
    memory = 2 * params + B * S * (2 * L * K * H * 2).xreplace(values)
    latency = memory / hw.memory_bandwidth
    return {"params_formula": params_expr, "params": params, "memory": memory, "latency": latency,
            "throughput": B / latency}


def _peak_kv_read(placed, config: ModelConfig) -> sp.Expr:
    """A chunked layer's decode reads ((S-1) mod Wc) + 1 keys, a sawtooth no solver inverts: take its peak,
    min(S, Wc) keys (the most the layer's cache holds)."""
    if not placed.chunked:
        return placed.op.cost.kv_read
    per_key = placed.op.cost.kv_read.xreplace({B: 1, S: 1})  # one key: floor(0) = 0
    return B * per_key * sp.Min(S, config.chunk)


def kv_equals_weights_context(config: ModelConfig, precision: Precision = Precision()) -> tuple[sp.Expr, float]:
    """Context S at which one sequence's KV-cache bytes read per decode step equal the weight bytes read."""
    decode = phase_ops(config, Options(), DECODE)
    kv_read = sum((_peak_kv_read(p, config) * p.count for p in decode), sp.Integer(0)).xreplace({B: 1})
    weights = sum((p.op.cost.weights * p.count for p in decode), sp.Integer(0)).xreplace({B: 1})
    if precision.experts is None:  # the routed experts are b_w wide too: the expression in b_w alone
        weights = weights.xreplace({b_e: b_w})
    widths = dict(zip(BYTE_WIDTHS, precision.byte_widths))
    # DeepSeek-V4's compressed entries, floor(S/m), taken over whole windows (S/m): the closed form needs no floor.
    kv_read = kv_read.replace(sp.floor, lambda inner: inner)
    # A capped read (a window's min(S, W) keys, a top-k's min(S/m, Kt) entries) grows below its cap and is flat
    # above it: solve each combination of sides and keep the root that lies on the sides it assumed.
    caps = sorted(kv_read.atoms(sp.Min), key=sp.default_sort_key)
    for sides in itertools.product(("below", "above"), repeat=len(caps)):
        pieces = {m: _capped(m)[0 if side == "below" else 1] for m, side in zip(caps, sides)}
        for expr in sp.solve(sp.Eq(kv_read.xreplace(pieces), weights), S):
            value = float(expr.xreplace(widths))
            if value > 0 and all((float(_capped(m)[0].xreplace({S: value})) <= float(_capped(m)[1])) == (side == "below")
                                 for m, side in zip(caps, sides)):
                return expr, value
    return sp.nan, float("nan")


def _capped(cap: sp.Min) -> tuple[sp.Expr, sp.Expr]:
    """min(growing, limit): the argument that grows with S, and the one that does not."""
    growing, fixed = [a for a in cap.args if a.has(S)], [a for a in cap.args if not a.has(S)]
    if len(growing) != 1 or len(fixed) != 1:
        raise ValueError(f"kv read: {cap} is not min(a read growing with S, a cap); the closed form does not cover it")
    return growing[0], fixed[0]


def state_decode_intensity() -> dict[str, sp.Expr]:
    """A Mamba-2 SSD decode step (T = 1) in bf16 activations: FLOPs over bytes has no S (the state is
    read and written whatever the context) and B only through the 3 Nh per-head constants (each sequence
    has its own state, so batching does not raise it); -> 2 / b_s as
    Di, Ns -> oo (0.5 FLOP/byte for an fp32 state). Contrast attention_limits()['decode']: S / (S + 1)."""
    from . import state_ops
    from .symbols import Di, Ns, Q, b_s
    one_token = intensity([state_ops.ssd_scan()]).xreplace({T: 1, b_a: 2, b_w: 2})
    expr = sp.simplify(one_token.xreplace({sp.Min(1, Q): 1}))  # a chunk of one token
    grow = sp.Symbol("x", positive=True)
    return {"general": expr, "limit": sp.limit(expr.xreplace({Di: grow, Ns: grow}), grow, sp.oo),
            "fp32_state": sp.limit(expr.xreplace({Di: grow, Ns: grow, b_s: 4}), grow, sp.oo)}


def sparse_attention_crossover() -> dict[str, sp.Expr]:
    """DeepSeek Sparse Attention's decode (T = 1), per layer and sequence, from the ops themselves (absorbed MLA
    over the indexer's top Kt keys, plus the lightning indexer over all S keys) against dense MLA.

    Attention's cache reads stop at Kt keys, (C+R) b_kv Kt; the indexer's keep growing, Hi b_kv S: they cross at
    S* = Kt (C+R) / Hi (9,216 tokens for GLM-5 and DeepSeek-V3.2), and past it the step's cache reads tend to
    Hi / (C+R) of dense MLA's (2/9 for both): the indexer, not attention, sets the long-context cost. The FLOPs
    cross where 2 Ni (Hi+1) S = 2 N Kt (2C+R). The analogue of the lecture's S/(S+1): a limit, not a constant.
    """
    from . import sparse_ops
    from .symbols import Kt
    decode = {T: 1, B: 1}

    def total(ops, part):
        return sp.simplify(sum((getattr(op.cost, part) for op in ops), sp.Integer(0)).xreplace(decode))
    sparse, dense = o.mla_block(sparse=True, q_lora=True), o.mla_block(q_lora=True)
    indexer = sparse_ops.lightning_indexer()
    attention_bytes, indexer_bytes = total(sparse, "kv_read"), total(indexer, "kv_read")
    attention_flops = total([op for op in sparse if op.name == "attention"], "flops")
    indexer_flops = total([op for op in indexer if op.name == "indexer.scores"], "flops")
    beyond = sp.Symbol("x", positive=True)  # S = Kt + 1 + x: past the top-k, every Min and Max settles

    def past_k(expr):
        return sp.simplify(expr.xreplace({S: Kt + 1 + beyond}).xreplace({beyond: S - Kt - 1}))
    return {
        "attention_bytes": attention_bytes, "indexer_bytes": indexer_bytes, "dense_bytes": total(dense, "kv_read"),
        "bytes_crossover": sp.solve(sp.Eq(past_k(attention_bytes), indexer_bytes), S)[0],
        "flops_crossover": sp.solve(sp.Eq(past_k(attention_flops), indexer_flops), S)[0],
        "long_context_bytes_ratio": sp.limit((past_k(attention_bytes) + indexer_bytes)
                                             / total(dense, "kv_read"), S, sp.oo),
    }
