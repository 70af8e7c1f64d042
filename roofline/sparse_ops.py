"""DeepSeek Sparse Attention's lightning indexer in letters, one line a kernel step.

DeepSeek-V3.2-Exp (and GLM-5, which ships the same layer): before attention, a small indexer with
Ni heads of width Hi scores every cached key against the query, I(t,s) = sum_j w_j ReLU(q_j . k_s),
and attention then reads only the top Kt keys (ops.sparse_keys). The indexer keeps one Hi-wide key per
token per layer (its own cache, growing with S); its queries come from MLA's query latent (Cq wide).
Source: DeepSeek-V3.2-Exp technical report (DSA), transformers' DeepseekV32Indexer / GlmMoeDsaIndexer.
The index keys are priced at b_kv (DeepSeek's kernels store them in FP8 with a scale: set --kv fp8).
MiniMax-M3 puts a variant on GQA attention (`block_indexer`): its queries come from the hidden state, and each of
its Ni heads (one per KV head) keeps the top blocks of keys for its own query group.
"""
from __future__ import annotations

import sympy as sp

from .cost import Cost
from .ops import ATTENTION_MATMUL, Op, causal_pairs, elementwise, linear, norm, tokens
from .symbols import B, Cq, D, Hi, Kt, Ni, S, T, b_a, b_kv


def index_pairs(impl: str = "flash") -> sp.Expr:
    """Query-key pairs the indexer scores per sequence: every visible key (causal), or T x S when eager."""
    return causal_pairs(False) if impl == "flash" else T * S


def lightning_indexer(impl: str = "flash") -> list[Op]:
    """The indexer's projections, its key write, and its scores over all S keys; the top-k pick is elementwise."""
    n = tokens()
    pairs = index_pairs(impl)
    return [
        linear("indexer.q_proj", Cq, Ni * Hi),                # q_I (n, Ni*Hi) = q_latent (n, Cq) @ W_qI (Cq, Ni*Hi)
        linear("indexer.k_proj", D, Hi, kv_out=Hi),           # k_I (n, Hi) = X (n, D) @ W_kI (D, Hi), into its cache
        norm("indexer.k_norm", Hi, layer_norm=True),          # LayerNorm(k_I): weight and bias
        linear("indexer.weights_proj", D, Ni),                # w (n, Ni) = X (n, D) @ W_w (D, Ni)
        Op("indexer.scores", Cost(
            flops=2 * B * Ni * pairs * Hi                     # ReLU(q_I (B,Ni,T,Hi) @ k_I^T (B,Hi,S))
            + 2 * B * pairs * Ni,                             # I = w (B,T,1,Ni) @ scores (B,T,Ni,S)
            act_read=b_a * B * T * (Ni * Hi + Ni),            # read q_I, w
            act_write=b_a * B * pairs,                        # write the logits I (B,T,S), one per pair
            kv_read=b_kv * B * S * Hi,                        # read every cached index key
        ), sp.Integer(0), ATTENTION_MATMUL),
        elementwise("indexer.topk", B * pairs, n * Kt),       # read I, write each query's Kt key indices
    ]


def block_indexer(impl: str = "flash") -> list[Op]:
    """MiniMax-M3's indexer (MiniMaxM3VLIndexer, transformers 5.24): Ni heads of Hi score every cached key, max-pool the
    scores over blocks of keys, and each head keeps the top blocks (Kt keys: index_topk_blocks x index_block_size, the
    query's own block among them) for its KV head's query group. No weights_proj and no value path: selection only."""
    n = tokens()
    pairs = index_pairs(impl)
    return [
        linear("indexer.q_proj", D, Ni * Hi),                 # q_I (n, Ni*Hi) = X (n, D) @ W_qI (D, Ni*Hi)
        norm("indexer.q_norm", Hi, n=n * Ni),                 # RMSNorm of each head's q_I (one Hi-wide weight)
        linear("indexer.k_proj", D, Hi, kv_out=Hi),           # k_I (n, Hi) = X (n, D) @ W_kI (D, Hi), into its cache
        norm("indexer.k_norm", Hi),                           # RMSNorm(k_I)
        Op("indexer.scores", Cost(
            flops=2 * B * Ni * pairs * Hi,                    # q_I (B,Ni,T,Hi) @ k_I^T (B,Hi,S)
            act_read=b_a * B * T * Ni * Hi,                   # read q_I
            act_write=b_a * B * Ni * pairs,                   # write each head's scores (B,Ni,T,S)
            kv_read=b_kv * B * S * Hi,                        # read every cached index key
        ), sp.Integer(0), ATTENTION_MATMUL),
        elementwise("indexer.topk", B * Ni * pairs, n * Ni * Kt),  # block max-pool and top-k, per head
    ]
