"""Per-op cost, written in the letters of `symbols` as the kernel does the work, one line a step.

Each function returns an `Op`: its Cost (FLOPs, bytes by category), the parameters it owns and
which operand pair its matmul runs in. `n = B*T` is the number of tokens in the step.
Left out of FLOPs: elementwise work (norms, rope, activations, softmax, residual adds).
Residual adds are taken as fused into the following norm (as serving engines do).
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from .cost import Cost
from .symbols import B, C, Cq, D, Dl, E, Es, F, Fe, H, Hn, Hv, K, Kt, N, P, R, S, T, V, W, Wc, b_a, b_e, b_kv, b_w, k

ZERO = sp.Integer(0)
WEIGHT_MATMUL, ATTENTION_MATMUL, NO_MATMUL = "weights", "attention", "none"
EXPERT_MATMUL = "experts"  # the routed experts' matmuls: weights of width b_e, run in Precision.expert_matmul_dtype
# Constant-state scans (state_ops): activations against a per-sequence state, priced at attention's roofs
# (the same kind of small per-head products) but never re-read per query head the way a GQA cache can be.
STATE_MATMUL = "state"


@dataclass(frozen=True)
class Op:
    name: str
    cost: Cost
    params: sp.Expr = ZERO  # weight elements this op owns
    matmul: str = NO_MATMUL  # which precision pair the matmul runs in
    state: sp.Expr = ZERO  # bytes per sequence kept between steps whatever S (constant-state mixers' cache)
    # A weight GEMM's (d_in, d_out): the depth K it reduces over and the columns N it writes, on which its kernel's
    # rate depends (roofline.gemm_shape); () for every other op.
    shape: tuple = ()

    def map(self, bind) -> Op:
        """This op with `bind` applied to every expression it holds (a config's numbers put in its letters)."""
        return Op(self.name, self.cost.map(bind), bind(self.params), self.matmul, bind(self.state),
                  tuple(bind(x) for x in self.shape))


def tokens() -> sp.Expr:
    return B * T


def linear(name, d_in, d_out, bias=False, n=None, kv_out=ZERO, copies=1, copies_read=None, width=b_w,
           matmul=WEIGHT_MATMUL) -> Op:
    """Y (n, d_out) = X (n, d_in) @ W (d_in, d_out) [+ b]; kv_out of the outputs go to the KV cache.

    copies: weight matrices of this shape (E for routed experts); copies_read: how many are read.
    width: bytes per weight element (b_e for routed experts, their bias included); matmul: its roof's kind.
    """
    n = tokens() if n is None else n
    one = d_in * d_out + (d_out if bias else 0)
    params = copies * one
    weights_read = params if copies_read is None else copies_read * one
    return Op(name, Cost(
        flops=2 * n * d_in * d_out,              # n x d_in x d_out multiply-adds
        weights=width * weights_read,            # read W (and b)
        act_read=b_a * n * d_in,                 # read X
        act_write=b_a * n * (d_out - kv_out),    # write Y
        kv_write=b_kv * n * kv_out,              # write new K/V into the cache
    ), params, matmul, shape=(d_in, d_out))


def norm(name, width, layer_norm=False, n=None) -> Op:
    """RMSNorm (weight) or LayerNorm (weight, bias) over `width`: read X, write Y."""
    n = tokens() if n is None else n
    params = width * (2 if layer_norm else 1)
    return Op(name, Cost(weights=b_w * params, act_read=b_a * n * width, act_write=b_a * n * width), params)


def elementwise(name, read, write) -> Op:
    return Op(name, Cost(act_read=b_a * read, act_write=b_a * write))


def embedding(name, rows, width) -> Op:
    """Gather one row per token: reads min(n, rows) rows of the table, writes n x width."""
    n = tokens()
    return Op(name, Cost(weights=b_w * sp.Min(n, rows) * width, act_write=b_a * n * width), rows * width)


def causal_pairs(window: bool) -> sp.Expr:
    """Query-key pairs per sequence and head when T new queries end a context of S keys.

    Query j (1-based position) sees min(j, W) keys; f(x) = sum_{j<=x} min(j, W); pairs = f(S) - f(S-T).
    """
    def seen(x):
        full = x * (x + 1) / 2
        over = sp.Max(0, x - W)  # keys beyond the window that the first x queries no longer see
        return full - over * (over + 1) / 2 if window else full
    pairs = seen(S) - seen(S - T)
    return pairs if window else sp.expand(pairs)  # T*S - T*(T-1)/2 without a window


def chunk_pairs() -> sp.Expr:
    """Query-key pairs per sequence and head when T new queries end a context of S keys and each query
    sees only the keys of its own chunk of Wc positions (Llama 4's chunked layers).

    Query j (1-based) sees ((j-1) mod Wc) + 1 keys. The first x queries see
    g(x) = floor(x/Wc) Wc(Wc+1)/2 + r(r+1)/2, r = x mod Wc; pairs = g(S) - g(S-T).
    Limits: S <= Wc gives the causal T*S - T(T-1)/2; a prefill (T = S) of many chunks, about S(Wc+1)/2.
    """
    def seen(x):
        rest = sp.Mod(x, Wc)
        return sp.floor(x / Wc) * Wc * (Wc + 1) / 2 + rest * (rest + 1) / 2
    return seen(S) - seen(S - T)


def chunk_keys() -> sp.Expr:
    """Keys the T queries ending at key S read in a chunked layer: from the start of the first query's chunk.

    Decode (T = 1): S - Wc floor((S-1)/Wc) = ((S-1) mod Wc) + 1, a sawtooth between 1 and Wc; an engine
    keeps only these keys, so the layer's cache never exceeds Wc. Prefill (T = S): all S keys, once.
    """
    return S - Wc * sp.floor((S - T) / Wc)


def sparse_keys() -> sp.Expr:
    """Distinct keys the T queries ending at key S read when each reads its indexer's top Kt (DSA):
    at most T*Kt, at most the S there are. Decode: min(S, Kt), flat past Kt; prefill (T = S): S, once."""
    return sp.Min(S, T * Kt)


def attention(name, qk_dim, v_dim, kv_bytes_per_key, window=False, impl="flash", heads=N, causal=True,
              chunked=False, sparse=False) -> Op:
    """softmax(Q K^T) V for B sequences: T queries against S keys, `heads` query heads.

    flash: scores stay on chip, masked (causal, out-of-window) blocks are skipped, the cache is read
    once. eager: the full T x S score matrix is computed, written, softmaxed and read back.
    causal=False counts every query against every key (the lecture's accounting).
    chunked: a query sees only the keys of its own chunk of Wc positions (`chunk_pairs`, `chunk_keys`).
    sparse: DeepSeek Sparse Attention, query j reads min(j, Kt) keys (the window's count with W = Kt, though
    the keys are the indexer's choice, not the last ones); eager (Hugging Face) scores every key, then masks.
    """
    if impl == "flash":
        pairs = causal_pairs(window) if causal else T * S
        keys_read = sp.Min(S, W) if window else S
        scores_traffic = ZERO
        if chunked:
            pairs, keys_read = chunk_pairs(), chunk_keys()
        if sparse:
            pairs, keys_read = causal_pairs(True).xreplace({W: Kt}), sparse_keys()
    elif impl == "eager":
        # The score matrix is dense; a windowed cache keeps the last W - 1 keys plus the T new ones.
        keys_read = sp.Min(S, W + T - 1) if window else S
        if chunked:  # Hugging Face keeps a chunked layer's keys in a sliding cache of Wc - 1 (only the mask differs)
            keys_read = sp.Min(S, Wc + T - 1)
        pairs = T * keys_read
        scores_traffic = b_a * B * heads * pairs  # each of: write scores, read, write probs, read
    else:
        raise ValueError(f"attention: unknown implementation {impl!r}; use 'flash' or 'eager'")
    return Op(name, Cost(
        flops=2 * B * heads * pairs * qk_dim        # S_ = Q (B,heads,T,qk) @ K^T (B,heads,qk,S)
        + 2 * B * heads * pairs * v_dim,            # O = P (B,heads,T,S) @ V (B,heads,S,v)
        act_read=b_a * B * T * heads * qk_dim + 2 * scores_traffic,   # read Q
        act_write=b_a * B * T * heads * v_dim + 2 * scores_traffic,   # write O
        kv_read=B * keys_read * kv_bytes_per_key,   # read K, V of every visible key
    ), ZERO, ATTENTION_MATMUL)


def mha_block(window=False, impl="flash", qkv_bias=False, out_bias=False, cla=1, chunked=False, v_dim=H,
              values_are_keys=False, sparse=False) -> list[Op]:
    """MHA/GQA/MQA: fused QKV projection, attention over the KV cache, output projection.

    With cross-layer sharing (cla > 1) only one layer in `cla` projects and stores K, V. v_dim: the value heads'
    width when it is not H (MiMo-V2-Flash: 128 beside 192). values_are_keys: no V projection, V is the projected K
    (normed without rope), still stored beside K (Gemma 4's global layers, attention_k_eq_v). sparse: each KV head's
    queries read only their indexer's top Kt keys (MiniMax-M3's block-sparse layers, sparse_ops.block_indexer).
    """
    kv_width = K * (H + v_dim) / cla
    projected = K * H / cla if values_are_keys else kv_width
    ops = [linear("qkv_proj", D, N * H + projected, bias=qkv_bias, kv_out=projected)]  # Q,K,V = X @ W_qkv
    if values_are_keys:  # V (n, K*H) = norm(K): read K, write the second copy into the cache
        ops.append(Op("v_store", Cost(act_read=b_a * tokens() * K * H / cla, kv_write=b_kv * tokens() * K * H / cla)))
    return ops + [
        attention("attention", H, v_dim, K * (H + v_dim) * b_kv, window, impl, chunked=chunked, sparse=sparse),
        linear("o_proj", N * v_dim, D, bias=out_bias),                            # X = O @ W_o
    ]


def head_linear(name, d_in, d_out, heads=N) -> Op:
    """Y (n, heads, d_out) = X (n, heads, d_in) @ W (heads, d_in, d_out): one weight slice per head."""
    n = tokens()
    params = heads * d_in * d_out
    return Op(name, Cost(
        flops=2 * n * heads * d_in * d_out,
        weights=b_w * params,
        act_read=b_a * n * heads * d_in,
        act_write=b_a * n * heads * d_out,
    ), params, WEIGHT_MATMUL)


def mla_block(form="absorbed", impl="flash", q_lora=False, window=False, sparse=False) -> list[Op]:
    """DeepSeek multi-head latent attention (V2/V3).

    The engine cache holds the latent c_kv (C) and the shared rope key (R) per token:
      absorbed: W_UK folds into the query and W_UV into the output; attention runs in the latent
                space over C+R (what vLLM, SGLang and FlashMLA run in decode).
      naive:    the latent cache is decompressed to per-head K, V for every visible key, every step.
      expanded: the cache holds decompressed K (Hn+R) and V (Hv) per head (Hugging Face's cache).
    W_UK (N,Hn,C) and W_UV (N,C,Hv) are the two halves of kv_b_proj (C, N(Hn+Hv)).
    sparse (DSA): attention reads only the indexer's top Kt keys (`sparse_keys`); the indexer is its own op list
    (sparse_ops.lightning_indexer). Eager decompresses and scores every key, as Hugging Face does.
    """
    n = tokens()
    keys = sp.Min(S, W) if window else sparse_keys() if sparse and impl == "flash" else S
    latent_cached = ZERO if form == "expanded" else C + R
    if q_lora and form != "expanded":
        # The serving engines multiply X by [W_qa | W_kva] as one replicated GEMM of Cq + C + R columns (vLLM's and
        # SGLang's fused_qkv_a_proj, TensorRT-LLM's widened kv_a_proj_with_mqa): X read once, one launch, and the
        # width its kernel's rate follows (roofline.gemm_shape: Kimi-K2's 576-column kv_a_proj alone would run at
        # 0.4 of the 2112-column GEMM's rate in fp8).
        ops = [linear("qkv_a_proj", D, Cq + C + R, kv_out=latent_cached), norm("q_a_norm", Cq),
               linear("q_b_proj", Cq, N * (Hn + R)), norm("kv_a_norm", C)]
    else:  # Hugging Face's module (the expanded cache) runs q_a_proj and kv_a_proj_with_mqa apart
        ops = ([linear("q_a_proj", D, Cq), norm("q_a_norm", Cq), linear("q_b_proj", Cq, N * (Hn + R))] if q_lora
               else [linear("q_proj", D, N * (Hn + R))])
        ops += [linear("kv_a_proj", D, C + R, kv_out=latent_cached), norm("kv_a_norm", C)]
    if form == "absorbed":
        ops += [
            head_linear("q_absorb", Hn, C),          # q_lat (n,N,C) = q_nope (n,N,Hn) @ W_UK (N,Hn,C)
            attention("attention", C + R, C, (C + R) * b_kv, window, impl, sparse=sparse),
            head_linear("v_up", C, Hv),              # o (n,N,Hv) = o_lat (n,N,C) @ W_UV (N,C,Hv)
        ]
    elif form == "naive":
        ops += [
            Op("kv_b_proj", Cost(
                flops=2 * B * keys * C * N * (Hn + Hv),           # [K_nope|V] (B,S,N(Hn+Hv)) = c_kv @ W_UKV
                weights=b_w * C * N * (Hn + Hv),
                kv_read=b_kv * B * keys * (C + R),                 # read the latent cache
                act_write=b_a * B * keys * N * (Hn + Hv),          # write decompressed K_nope, V
            ), C * N * (Hn + Hv), WEIGHT_MATMUL),
            attention("attention", Hn + R, Hv, ZERO, window, impl, sparse=sparse),
            Op("attention.kv_act_read", Cost(act_read=b_a * B * keys * (N * (Hn + Hv) + R))),  # read K, V back
        ]
    elif form == "expanded":
        ops += [
            linear("kv_b_proj", C, N * (Hn + Hv), kv_out=N * (Hn + Hv)),  # K_nope, V of the new tokens
            Op("k_rope_store", Cost(kv_write=b_kv * n * N * R)),          # the rope key copied to every head
            attention("attention", Hn + R, Hv, N * (Hn + R + Hv) * b_kv, window, impl, sparse=sparse),
        ]
    else:
        raise ValueError(f"mla_form: unknown form {form!r}; use 'absorbed', 'naive' or 'expanded'")
    return ops + [linear("o_proj", N * Hv, D)]


def gated_mlp(prefix="mlp", width=F, n=None, bias=False, copies=1, copies_read=None, routed=False, d_in=D) -> list[Op]:
    """SwiGLU/GeGLU: [G|U] = X @ W_gate_up (D, 2F); A = act(G) * U; Y = A @ W_down (F, D).

    routed: the MoE's routed experts, whose weights are b_e wide and whose matmuls are EXPERT_MATMUL.
    d_in: the width X arrives in and Y leaves in (D; a latent MoE's Dl).
    """
    n = tokens() if n is None else n
    held = dict(width=b_e, matmul=EXPERT_MATMUL) if routed else {}
    return [
        linear(f"{prefix}.gate_up", d_in, 2 * width, bias=bias, n=n, copies=copies, copies_read=copies_read, **held),
        elementwise(f"{prefix}.act", 2 * n * width, n * width),
        linear(f"{prefix}.down", width, d_in, bias=bias, n=n, copies=copies, copies_read=copies_read, **held),
    ]


def plain_mlp(prefix="mlp", bias=True, width=F, n=None, copies=1, copies_read=None, routed=False, d_in=D) -> list[Op]:
    """GELU / relu^2 MLP: U = X @ W_up (D, F); A = act(U); Y = A @ W_down (F, D) (keywords as gated_mlp's)."""
    n = tokens() if n is None else n
    held = dict(width=b_e, matmul=EXPERT_MATMUL) if routed else {}
    return [linear(f"{prefix}.up", d_in, width, bias=bias, n=n, copies=copies, copies_read=copies_read, **held),
            elementwise(f"{prefix}.act", n * width, n * width),
            linear(f"{prefix}.down", width, d_in, bias=bias, n=n, copies=copies, copies_read=copies_read, **held)]


def expected_experts_touched() -> sp.Expr:
    """Distinct experts hit by n = B*T tokens choosing k of E uniformly: E (1 - (1 - k/E)^n)."""
    return E * (1 - (1 - k / E) ** tokens())


def moe_block(shared=True, router_bias=False, router_param_bias=False, expert_bias=False, gated=True,
              latent=False, every_expert=False) -> list[Op]:
    """Router, shared experts (dense, always on), and k of E routed experts per token.

    Routed weights read: only the experts the batch touches (expected count under uniform routing),
    never all E at batch 1 and never just k at large batch. Params: all E experts. The routed experts'
    weights are b_e bytes an element (Precision.experts: gpt-oss's MXFP4), their biases too (bf16 in
    gpt-oss's checkpoint: 0.035% of its expert elements, priced at b_e here).
    router_param_bias: the router's linear carries a learned bias (gpt-oss; DeepSeek's is a buffer);
    expert_bias: each expert's projections carry biases (gpt-oss). gated=False: each expert is an up/down MLP
    (Nemotron-H's relu^2). latent: the experts run in Dl, between a down-projection D -> Dl and an
    up-projection Dl -> D of the routed tokens (Nemotron-3 Super/Ultra's latent MoE; the shared expert stays in D).
    every_expert: every routed expert's weights are read each step, whatever the routing (Options.experts_read 'all').
    """
    n = tokens()
    router = linear("router", D, E, bias=router_param_bias)
    if router_bias:  # DeepSeek-V3 adds a per-expert bias to the routing scores (a buffer, not a parameter)
        router = Op(router.name, router.cost + Cost(weights=b_w * E), router.params, WEIGHT_MATMUL)
    ops = [router, elementwise("router.topk", n * E, n * k)]
    if shared:
        ops += gated_mlp("shared_experts", Es * Fe)
    expert = gated_mlp if gated else plain_mlp
    experts = expert("experts", bias=expert_bias, width=Fe, n=n * k, copies=E,
                     copies_read=E if every_expert else expected_experts_touched(),
                     routed=True, d_in=Dl if latent else D)
    if latent:  # X_l (n, Dl) = X (n, D) @ W_in (D, Dl) before the experts; Y (n, D) = Y_l @ W_out (Dl, D) after
        experts = [linear("moe_latent.in", D, Dl)] + experts + [linear("moe_latent.out", Dl, D)]
    return ops + experts


def head_norm(name, heads, weighted=True) -> Op:
    """A norm of each head's H-vector (Qwen3, Gemma 3, GLM-4.5 q/k norms: RMSNorm with one H-wide weight;
    Llama 4: a weightless L2 norm): read and write n x heads x H, no FLOPs counted."""
    n = tokens() * heads
    params = H if weighted else ZERO
    return Op(name, Cost(weights=b_w * params, act_read=b_a * n * H, act_write=b_a * n * H), params)


def attention_sinks() -> Op:
    """gpt-oss: one learned logit per query head joins each softmax's denominator (N parameters, read once a
    step); elementwise, so no FLOPs are counted."""
    return Op("attention.sinks", Cost(weights=b_w * N), N)


def lm_head(tied=False, logits_tokens=None) -> Op:
    """logits (n_out, V) = X (n_out, D) @ W_emb^T: n_out = B for the last token only, B*T for all."""
    n_out = B if logits_tokens is None else logits_tokens
    op = linear("lm_head", D, V, n=n_out)
    return Op(op.name, op.cost, ZERO if tied else op.params, WEIGHT_MATMUL, shape=op.shape)


def position_embedding() -> Op:
    return embedding("pos_embed", P, D)
