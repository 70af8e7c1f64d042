"""DeepSeek-V4's layer in letters, one line a kernel step: compressed attention and hyper-connections.

Every layer runs shared-KV MQA (one H-wide vector per token is both key and value) over a sliding window of W
tokens, kept in a ring buffer (a constant W x H per sequence, held as state); a compressed sparse layer also
pools every Mc tokens into one H-wide entry and a lightning indexer (Ni x Hi, over its own Hi-wide pooled
entries) picks the top Kt entries for each query; a heavily compressed layer pools every Mh tokens and reads
every entry. The residual is Nc streams mixed by hyper-connections before each block. Queries come through a
low-rank Cq, the output through Go groups of rank Ro. Source: transformers 5.24's models/deepseek_v4
(DeepseekV4Attention, DeepseekV4CSACompressor, DeepseekV4Indexer, DeepseekV4HCACompressor, DeepseekV4HyperConnection)
and the DeepSeek-V4 report (§2.2-2.3). Approximations: a flash prefill's compressed pairs are the causal pairs
over Mc (each query sees floor(j/Mc) entries); the pooling's softmax and the Sinkhorn iterations are elementwise.
"""
from __future__ import annotations

import sympy as sp

from .cost import Cost
from .ops import ATTENTION_MATMUL, WEIGHT_MATMUL, Op, causal_pairs, elementwise, linear, norm, tokens
from .symbols import B, Cq, D, Go, H, Hi, Kt, Mc, Mh, N, Nc, Ni, Ro, S, T, W, b_a, b_kv, b_w

ZERO = sp.Integer(0)


def entries(ratio) -> sp.Expr:
    """Compressed entries a sequence of S tokens holds: one per closed window of `ratio` tokens."""
    return sp.floor(S / ratio)


def compressor(prefix: str, width, ratio, overlap: bool) -> list[Op]:
    """Pool every `ratio` tokens into one `width`-wide entry: C = X @ W_kv, Z = X @ W_gate, entry = norm(sum softmax(Z+b) C).
    overlap (compressed sparse): two series of `width` each, an entry pools 2 x ratio tokens with stride ratio."""
    n = tokens()
    series = 2 if overlap else 1
    return [
        linear(f"{prefix}.kv_proj", D, series * width),        # C (n, s*w) = X (n, D) @ W_kv (D, s*w)
        linear(f"{prefix}.gate_proj", D, series * width),      # Z (n, s*w) = X (n, D) @ W_gate (D, s*w)
        Op(f"{prefix}.pool", Cost(                             # softmax over each window, weighted sum, RMSNorm, rope
            weights=b_w * (ratio * series * width + width),   # the position bias (ratio, s*w) and the norm weight
            act_read=2 * b_a * n * series * width,
            kv_write=b_kv * n * width / ratio,                 # one entry per `ratio` tokens into the cache
        ), ratio * series * width + width),
    ]


def v4_attention(kind: str, impl: str = "flash") -> list[Op]:
    """Shared-KV MQA over the window and, by kind, the compressed entries; sinks; grouped output projection."""
    n = tokens()
    window_pairs, window_keys = causal_pairs(True), sp.Min(S, W)
    picked_pairs, picked_keys = ZERO, ZERO
    ops = [linear("q_a_proj", D, Cq), norm("q_a_norm", Cq), linear("q_b_proj", Cq, N * H),
           elementwise("q_b_norm", n * N * H, n * N * H),                   # weightless RMSNorm of each head
           linear("kv_proj", D, H), norm("kv_norm", H),
           Op("kv_window_store", Cost(kv_write=b_kv * n * H), state=b_kv * W * H)]  # K=V into the W-entry ring
    if kind == "compressed_sparse":
        ops += compressor("compressor", H, Mc, overlap=True) + indexer(impl)
        picked_pairs = causal_pairs(True).xreplace({W: Kt * Mc}) / Mc    # query j: min(j/Mc, Kt) entries
        picked_keys = sp.Min(entries(Mc), T * Kt)
        every = entries(Mc)
    elif kind == "heavily_compressed":
        ops += compressor("compressor", H, Mh, overlap=False)
        picked_pairs, picked_keys = causal_pairs(False) / Mh, entries(Mh)   # query j: j/Mh entries, all read
        every = entries(Mh)
    else:
        every = ZERO
    if impl == "eager":  # Hugging Face: scores against the window's keys and every compressed entry, then masks
        window_keys = sp.Min(S, W + T - 1)
        window_pairs, picked_pairs, picked_keys = T * window_keys, T * every, every
    elif impl != "flash":
        raise ValueError(f"attention: unknown implementation {impl!r}; use 'flash' or 'eager'")
    pairs = window_pairs + picked_pairs
    scores = 2 * b_a * B * N * pairs if impl == "eager" else ZERO
    return ops + [
        Op("attention", Cost(
            flops=2 * B * N * pairs * H                  # S_ = Q (B,N,T,H) @ KV^T (B,H,keys)
            + 2 * B * N * pairs * H,                     # O = P (B,N,T,keys) @ KV (B,keys,H)
            act_read=b_a * B * T * N * H + scores, act_write=b_a * B * T * N * H + scores,
            kv_read=b_kv * B * (window_keys + picked_keys) * H,  # one H-wide vector per key: K and V at once
        ), ZERO, ATTENTION_MATMUL),
        Op("attention.sinks", Cost(weights=b_w * N), N),
        Op("o_a_proj", Cost(                              # Go groups: O_g (n, NH/Go) @ W_g (NH/Go, Ro)
            flops=2 * n * N * H * Ro, weights=b_w * N * H * Ro, act_read=b_a * n * N * H, act_write=b_a * n * Go * Ro,
        ), N * H * Ro, WEIGHT_MATMUL),
        linear("o_b_proj", Go * Ro, D),                   # X (n, D) = O' (n, Go*Ro) @ W (Go*Ro, D)
    ]


def indexer(impl: str = "flash") -> list[Op]:
    """The compressed sparse layer's lightning indexer: its own pooled Hi-wide entries, queries from the query
    latent, I(t,s) = sum_h w_h ReLU(q_h . k_s) over the entries, top Kt kept."""
    n = tokens()
    seen = entries(Mc) * T if impl == "eager" else causal_pairs(False) / Mc
    return compressor("indexer", Hi, Mc, overlap=True) + [
        linear("indexer.q_b_proj", Cq, Ni * Hi),             # q_I (n, Ni*Hi) = q_latent (n, Cq) @ W (Cq, Ni*Hi)
        linear("indexer.weights_proj", D, Ni),               # w (n, Ni) = X @ W_w (D, Ni)
        Op("indexer.scores", Cost(
            flops=2 * B * Ni * seen * Hi,                    # q_I (B,T,Ni,Hi) @ k_I^T (B,Hi,entries)
            act_read=b_a * B * T * (Ni * Hi + Ni), act_write=b_a * B * seen,
            kv_read=b_kv * B * entries(Mc) * Hi,             # every pooled index entry
        ), ZERO, ATTENTION_MATMUL),
        elementwise("indexer.topk", B * seen, n * Kt),
    ]


def hyper_connection(prefix: str) -> list[Op]:
    """Mix the Nc residual streams before a block: pre, post and comb weights from one projection of all streams,
    X (n, Nc*D) @ W ((Nc*D), (2+Nc)*Nc), comb Sinkhorn-normalized; the streams mixed by comb (Nc x Nc)."""
    n = tokens()
    mixes = (2 + Nc) * Nc
    return [
        Op(f"{prefix}.weights", Cost(flops=2 * n * Nc * D * mixes, weights=b_w * (Nc * D * mixes + mixes + 3),
                                     act_read=b_a * n * Nc * D, act_write=b_a * n * mixes),
           Nc * D * mixes + mixes + 3, WEIGHT_MATMUL),
        Op(f"{prefix}.mix", Cost(flops=2 * n * Nc * Nc * D,          # streams (n, Nc, D) = comb^T (n,Nc,Nc) @ streams
                                 act_read=2 * b_a * n * Nc * D, act_write=b_a * n * Nc * D)),
    ]


def hyper_head() -> Op:
    """Collapse the Nc streams into one before the final norm: weights X (n, Nc*D) @ W (Nc*D, Nc)."""
    n = tokens()
    return Op("hc_head", Cost(flops=2 * n * Nc * D * Nc, weights=b_w * (Nc * Nc * D + Nc + 1),
                              act_read=b_a * n * Nc * D, act_write=b_a * n * D), Nc * Nc * D + Nc + 1, WEIGHT_MATMUL)
