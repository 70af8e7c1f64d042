"""A model's cost = its layers' op costs; prefill (T = S) and one decode step (T = 1).

This is the one place where a config's numbers enter the symbols (`dimensions`): ops are written
in letters, a layer kind is a list of ops, and `phase_ops` binds the dimensions and the phase.
What stays free: B, S and the byte widths b_w, b_a, b_kv, b_e.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from . import ops as o
from . import compressed_ops, hybrid, sparse_ops
from .models.config import (CHUNKED, MAMBA2, MOE, NONE, PARALLEL, SHARED_SPARSE, SPARSE, STATE_MIXERS, WINDOW, ModelConfig,
                            dense_fraction, parse_share)
from .cost import Cost
from .symbols import B, C, Cq, D, E, Es, F, Fe, H, Hn, Hv, K, L, N, P, R, S, T, V, W, Wc, b_kv, b_w, k
from .symbols import Di, Dl, Fs, G, Go, Hi, Kc, Kt, Mc, Mh, Nc, Nh, Ni, Ns, Q, Rdt, Ro, b_s

PREFILL, DECODE = "prefill", "decode"
QUERIES = "queries"  # a step of T query tokens per sequence, T left free (speculative verification, chunks)
ATTENTION_IMPLS = ("flash", "eager")
MLA_FORMS = ("absorbed", "naive", "expanded")
LOGITS = ("last", "all")
EXPERTS_READ = ("routed", "all")


@dataclass(frozen=True)
class Options:
    """Modelling choices that are not the architecture.

    attention: 'flash' (scores on chip, masked blocks skipped) or 'eager' (full score matrix).
    mla_form: MLA decode form; prefill always decompresses unless the cache itself is 'expanded'.
    logits: prefill computes logits for the 'last' token (serving engines) or 'all' (Hugging Face).
    experts_read: the routed experts a step reads: 'routed', the distinct experts its tokens choose (expected under
    uniform routing), or 'all', every expert's weights each step whatever the routing (what one measured engine
    release's decode costs: roofline.fitting.serving_rows.EXPERTS_READ_WHOLE_SOURCES).
    """
    attention: str = "flash"
    mla_form: str = "absorbed"
    logits: str = "last"
    experts_read: str = "routed"

    def __post_init__(self):
        for field, allowed in (("attention", ATTENTION_IMPLS), ("mla_form", MLA_FORMS), ("logits", LOGITS),
                               ("experts_read", EXPERTS_READ)):
            if getattr(self, field) not in allowed:
                raise ValueError(f"{field}: unknown value {getattr(self, field)!r}; use one of {', '.join(allowed)}")


def decode_context(prompt):
    """Keys a decode step attends to after a prompt of `prompt` tokens: the prompt and the new token."""
    return prompt + 1


@dataclass(frozen=True, order=True)
class OpName:
    """Where an op sits (its layer group, or a collective's or overhead's own group) and what it is."""
    group: str  # 'embed', 'layers[attention,mlp]', 'head'; 'tp', 'pp', 'ep' collectives; 'overhead'
    op: str

    def __str__(self) -> str:
        return f"{self.group}.{self.op}"

    @property
    def in_layers(self) -> bool:
        return self.group.startswith("layers[")

    @property
    def term(self) -> str:
        """The name a step's breakdown groups by: a layer op without its layer group, others whole."""
        return self.op if self.in_layers else str(self)


def layer_group(attention_kind: str, mlp_kind: str) -> str:
    return f"layers[{attention_kind},{mlp_kind}]"


@dataclass(frozen=True)
class PlacedOp:
    """An op in place: which layers it belongs to, how many times it runs per step."""
    group: str
    op: o.Op
    count: int
    window: bool = False
    chunked: bool = False

    @property
    def op_name(self) -> OpName:
        return OpName(self.group, self.op.name)

    @property
    def name(self) -> str:
        return str(self.op_name)


def layer_ops(cfg: ModelConfig, attention_kind: str, mlp_kind: str, options: Options, phase: str) -> list[o.Op]:
    """A layer's ops: input norm and mixer (attention, a constant-state mixer, both, or none), then
    norm and MLP (dense, MoE or none: Nemotron-H's layers are one or the other)."""
    ops = [] if attention_kind == NONE else [o.norm("attn_norm", D, cfg.layer_norm)]
    if cfg.hc_streams:  # DeepSeek-V4: the residual streams mixed into one block input
        ops = compressed_ops.hyper_connection("attn_hc") + ops
    if attention_kind in STATE_MIXERS and attention_kind != PARALLEL:
        ops += hybrid.state_mixer_ops(cfg, attention_kind)
    elif attention_kind != NONE:
        ops += attention_ops(cfg, attention_kind, options, phase)
    if mlp_kind != NONE:
        ops += (compressed_ops.hyper_connection("ffn_hc") if cfg.hc_streams else []) + mlp_ops(cfg, mlp_kind, options)
    return ops


def attention_ops(cfg: ModelConfig, attention_kind: str, options: Options, phase: str) -> list[o.Op]:
    window = attention_kind == WINDOW
    ops = []
    if cfg.hc_streams:  # DeepSeek-V4: shared-KV MQA over a window and compressed entries
        ops += compressed_ops.v4_attention(attention_kind, options.attention)
    elif cfg.is_mla:
        form = options.mla_form if phase != PREFILL or options.mla_form == "expanded" else "naive"
        sparse = attention_kind in (SPARSE, SHARED_SPARSE)
        ops += o.mla_block(form, options.attention, q_lora=cfg.q_lora_rank > 0, window=window, sparse=sparse)
        if attention_kind == SPARSE:  # its own indexer picks the keys (a shared layer reuses an earlier pick)
            ops[-1:-1] = sparse_ops.lightning_indexer(options.attention)
    else:
        ops += o.mha_block(window, options.attention, cfg.qkv_bias, cfg.out_bias, cfg.cla_factor,
                           chunked=attention_kind == CHUNKED, v_dim=Hv if cfg.v_head_dim else H,
                           values_are_keys=attention_kind in cfg.values_are_keys,
                           sparse=attention_kind in (SPARSE, SHARED_SPARSE))
        if attention_kind == SPARSE:  # MiniMax-M3: its own block indexer picks each KV head's keys
            ops[-1:-1] = sparse_ops.block_indexer(options.attention)
        if cfg.attn_output_gate:
            ops[-1:-1] = hybrid.output_gate_ops()  # before o_proj
        if cfg.head_gate:
            ops[-1:-1] = hybrid.head_gate_ops()
        ops += attention_extras(cfg, attention_kind)
        ops = reshaped(ops, dict((kind, shares) for kind, *shares in cfg.attention_shapes).get(attention_kind))
    if attention_kind == PARALLEL:  # Falcon-H1: Mamba-2 on the same normed input, outputs summed
        ops += hybrid.state_mixer_ops(cfg, MAMBA2)
    if cfg.norms_per_layer == 4:
        ops.append(o.norm("post_attn_norm", D))
    return ops


def reshaped(ops: list[o.Op], shares) -> list[o.Op]:
    """A layer kind's attention ops in its own head shape: N, K, H (and Hv) times their shares of the base
    (attention_shapes). A KV-head count below one is a replicated head (tensor parallelism beyond K): one."""
    if not shares:
        return ops
    heads, kv_heads, width = (sp.Rational(share.numerator, share.denominator) for share in map(parse_share, shares))
    values = {N: N * heads, K: K * kv_heads if kv_heads >= 1 else sp.Max(K * kv_heads, 1), H: H * width, Hv: Hv * width}
    bind = lambda expr: sp.sympify(expr).xreplace(values)  # noqa: E731
    return [op.map(bind) for op in ops]


def mlp_ops(cfg: ModelConfig, mlp_kind: str, options: Options = Options()) -> list[o.Op]:
    ops = [o.norm("mlp_norm", D, cfg.layer_norm)]
    every_expert = options.experts_read == "all"
    if mlp_kind == MOE and cfg.dense_beside_moe:
        ops += o.gated_mlp() + dense_beside_moe_ops(every_expert)
    elif mlp_kind == MOE:
        ops += o.moe_block(shared=cfg.n_shared_experts > 0, router_bias=cfg.router_bias,
                           router_param_bias=cfg.router_param_bias, expert_bias=cfg.expert_bias,
                           gated=cfg.gated_mlp, latent=cfg.moe_latent > 0, every_expert=every_expert)
        if cfg.shared_expert_width:  # one shared MLP whose width is its own (not Es x Fe), gated as the dense MLP
            ops += (o.gated_mlp("shared_experts", Fs) if cfg.gated_mlp
                    else o.plain_mlp("shared_experts", bias=cfg.mlp_bias, width=Fs))
        if cfg.shared_expert_gate:
            ops.append(o.linear("shared_experts.gate", D, 1))  # sigmoid(X (n,D) @ w (D,1)) scales the shared expert
    elif dense_fraction(mlp_kind) is not None:  # Nemotron-NAS: this layer's own width, a share of F
        share = dense_fraction(mlp_kind)
        ops += o.gated_mlp(bias=cfg.mlp_bias, width=F * sp.Rational(share.numerator, share.denominator))
    elif cfg.gated_mlp:
        ops += o.gated_mlp(bias=cfg.mlp_bias)
    else:
        ops += o.plain_mlp(bias=cfg.mlp_bias)
    if cfg.norms_per_layer == 4:
        ops.append(o.norm("post_mlp_norm", D))
    return ops


def attention_extras(cfg: ModelConfig, attention_kind: str) -> list[o.Op]:
    """Per-head q/k norms (RMSNorm; Llama 4's weightless L2 only on its chunked rope layers), MiniMax-M2's
    all-head q/k norms, and gpt-oss's sinks."""
    ops = []
    if cfg.qk_norm == "rms" or (cfg.qk_norm == "l2" and attention_kind == CHUNKED):
        weighted = cfg.qk_norm == "rms"
        ops += [o.head_norm("q_norm", N, weighted), o.head_norm("k_norm", K, weighted)]
    if cfg.qk_norm == "rms_all":  # MiniMax-M2: one RMSNorm over all heads' queries (N*H), one over all keys (K*H)
        ops += [o.norm("q_norm", N * H), o.norm("k_norm", K * H)]
    if cfg.qk_norm == "rms_v":  # Gemma 4: q and k RMSNorm per head, v a weightless RMSNorm per head
        ops += [o.head_norm("q_norm", N), o.head_norm("k_norm", K), o.head_norm("v_norm", K, weighted=False)]
    if cfg.attention_sinks or attention_kind in cfg.sink_kinds:
        ops.append(o.attention_sinks())
    return ops


def dense_beside_moe_ops(every_expert: bool = False) -> list[o.Op]:
    """Gemma 4's MoE block, beside its dense MLP on the same normed residual: the MLP's output normed, the experts'
    input and output normed, the router's input RMS-normed without weight, then scaled by D weights, and each chosen
    expert's weight scaled by its own (E). The router's softmax and top-k are elementwise."""
    n = o.tokens()
    return ([o.norm("mlp.post_norm", D), o.norm("moe.pre_norm", D), o.elementwise("router.norm", n * D, n * D),
             o.Op("router.scales", Cost(weights=b_w * (D + E)), D + E)]
            + o.moe_block(shared=False, every_expert=every_expert) + [o.norm("moe.post_norm", D)])


def symbolic_ops(cfg: ModelConfig, options: Options = Options(), phase: str = DECODE) -> list[PlacedOp]:
    """Every op of one step, in letters (dimensions not yet bound), with its layer count."""
    placed = [PlacedOp("embed", o.embedding("tokens", V, D), 1)]
    if cfg.learned_positions:
        placed.append(PlacedOp("embed", o.position_embedding(), 1))
    for (attention_kind, mlp_kind), count in sorted(cfg.layer_kinds().items()):
        group = layer_group(attention_kind, mlp_kind)
        for op in layer_ops(cfg, attention_kind, mlp_kind, options, phase):
            placed.append(PlacedOp(group, op, count, attention_kind == WINDOW, attention_kind == CHUNKED))
    logits_tokens = B * T if options.logits == "all" else B
    if cfg.hc_streams:
        placed.append(PlacedOp("head", compressed_ops.hyper_head(), 1))
    placed += [PlacedOp("head", o.norm("final_norm", D, cfg.layer_norm), 1),
               PlacedOp("head", o.lm_head(cfg.tied_embeddings, logits_tokens), 1)]
    return placed


def dimensions(cfg: ModelConfig) -> dict:
    """The config's numbers for each letter: the single point where numbers enter."""
    return {D: cfg.d_model, F: cfg.d_ff, N: cfg.n_heads, K: cfg.n_kv_heads, H: cfg.head_dim, L: cfg.n_layers,
            V: cfg.vocab_size, W: cfg.window or 1, P: cfg.learned_positions or 1,
            E: cfg.n_experts or 1, k: cfg.top_k or 1, Fe: cfg.d_expert or 1, Es: cfg.n_shared_experts or 1,
            C: cfg.kv_lora_rank or 1, Cq: cfg.q_lora_rank or 1, R: cfg.qk_rope_dim or 1,
            Hn: cfg.qk_nope_dim or 1, Hv: cfg.v_head_dim or 1, Wc: cfg.chunk or 1,
            Di: cfg.ssm_inner or 1, Ns: cfg.ssm_state or 1, Nh: cfg.ssm_heads or 1, G: cfg.ssm_groups or 1,
            Kc: cfg.conv_kernel or 1, Rdt: cfg.dt_rank or 1, Q: cfg.ssm_chunk or 1, b_s: cfg.state_bytes or b_kv,
            Fs: cfg.shared_expert_width or 1, Ni: cfg.index_heads or 1, Hi: cfg.index_head_dim or 1,
            Kt: cfg.index_topk or 1, Dl: cfg.moe_latent or 1, Mc: cfg.compress_sparse or 1,
            Mh: cfg.compress_heavy or 1, Nc: cfg.hc_streams or 1, Go: cfg.o_groups or 1, Ro: cfg.o_lora_rank or 1}


def phase_substitution(phase: str) -> dict:
    if phase == PREFILL:
        return {T: S}
    if phase == DECODE:
        return {T: 1}
    if phase == QUERIES:
        return {}
    raise ValueError(f"phase: unknown phase {phase!r}; use '{PREFILL}', '{DECODE}' or '{QUERIES}'")


def phase_ops(cfg: ModelConfig, options: Options = Options(), phase: str = DECODE) -> list[PlacedOp]:
    """Ops of one step with the config's dimensions and the phase bound: free in B, S and byte widths
    (and T for QUERIES)."""
    values = {**dimensions(cfg), **phase_substitution(phase)}
    bind = lambda expr: sp.sympify(expr).xreplace(values)  # noqa: E731
    return [PlacedOp(p.group, p.op.map(bind), p.count, p.window, p.chunked) for p in symbolic_ops(cfg, options, phase)]


def total(placed: list[PlacedOp]) -> Cost:
    return sum((p.op.cost * p.count for p in placed), Cost())


def parameter_count(cfg: ModelConfig) -> int:
    """Weight elements of the model (tied embeddings counted once), as torch counts parameters."""
    return int(sum(p.op.params * p.count for p in phase_ops(cfg, Options(), DECODE)))


def routed_parameter_count(cfg: ModelConfig, options: Options = Options()) -> int:
    """Weight elements of the routed experts (all E of them, biases included): those stored b_e wide."""
    return int(sum(p.op.params * p.count for p in phase_ops(cfg, options, DECODE) if p.op.matmul == o.EXPERT_MATMUL))


def kv_cache_expr(cfg: ModelConfig, options: Options = Options()) -> sp.Expr:
    """Cache bytes for B sequences holding S tokens each: the KV of attention layers grows with S
    (window layers keep only the last W); a constant-state layer's conv and recurrent state is held
    once per sequence, flat in S. Both are "the cache": what a sequence keeps between steps.

    Chunked layers hold at most the Wc keys of the current chunk: ((S-1) mod Wc) + 1 of them at context S
    (ops.chunk_keys); memory is sized for the most a sequence reaches, min(S, Wc).
    """
    one_token = {B: 1}
    stored = sp.Integer(0)
    for p in phase_ops(cfg, options, DECODE):
        if p.op.state != 0:
            stored += p.count * p.op.state
            continue
        per_token = p.op.cost.kv_write.xreplace(one_token)
        if per_token != 0:
            stored += p.count * per_token * (sp.Min(S, cfg.window) if p.window else sp.Min(S, cfg.chunk) if p.chunked
                                             else S)
    return B * stored


def active_parameter_count(cfg: ModelConfig) -> int:
    """Weight elements one token's forward uses: every weight but the routed experts, of which k of E
    (the 'active' count model cards publish)."""
    placed = phase_ops(cfg, Options(), DECODE)
    routed = sum(p.op.params * p.count for p in placed if p.op.name.startswith("experts."))
    return int(parameter_count(cfg) - routed + routed * sp.Rational(cfg.top_k, cfg.n_experts or 1))


def state_bytes_expr(cfg: ModelConfig, options: Options = Options()) -> sp.Expr:
    """Bytes one sequence's constant-state layers hold (conv + recurrent state), whatever S: in b_kv."""
    return sum((p.count * p.op.state for p in phase_ops(cfg, options, DECODE)), sp.Integer(0))
