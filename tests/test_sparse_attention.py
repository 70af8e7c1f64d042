"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): attention reads the indexer's top Kt keys, the indexer all S.

Hand-worked numbers for GLM-5 (config: kv_lora_rank C 512, qk_rope_head_dim R 64, index_head_dim Hi 128,
index_n_heads Ni 32, index_topk Kt 2048, 64 query heads, 78 layers): one decode step of one sequence reads
(C+R) x 2 bytes x min(S, 2048) of latent cache and Hi x 2 bytes x S of index keys per layer. The Hugging
Face oracles (parameters, FLOPs, cache bytes against GlmMoeDsa / DeepseekV32 modules) are in
tests/test_hf_oracles.py (tiny configs glm-moe-dsa, deepseek-v32) and tests/test_aiconfigurator_configs.py.
"""
import sympy as sp

from roofline import load_model
from roofline.models.config import SHARED_SPARSE, SPARSE
from roofline.derivations import sparse_attention_crossover
from roofline.model import DECODE, PREFILL, Options, kv_cache_expr, phase_ops
from roofline.symbols import B, C, Hi, Kt, N, Ni, R, S, b_kv

GLM5 = {C: 512, R: 64, Hi: 128, Ni: 32, Kt: 2048, N: 64}


def decode_read(name: str, op: str, context: int) -> float:
    """Cache bytes one op reads in one decode step of one sequence, summed over its layers (bf16 cache)."""
    placed = phase_ops(load_model(name), Options(), DECODE)
    return float(sum(p.op.cost.kv_read * p.count for p in placed if p.op.name == op).subs({B: 1, S: context, b_kv: 2}))


def test_the_crossover_where_the_indexer_outreads_attention_is_kt_times_c_plus_r_over_hi():
    crossover = sparse_attention_crossover()
    assert sp.simplify(crossover["bytes_crossover"] - Kt * (C + R) / Hi) == 0
    assert crossover["bytes_crossover"].xreplace(GLM5) == 2048 * 576 // 128 == 9216
    assert crossover["long_context_bytes_ratio"].xreplace(GLM5) == sp.Rational(128, 576) == sp.Rational(2, 9)
    # FLOPs: absorbed attention 2 N Kt (C+R) + 2 N Kt C against the indexer's 2 Ni S Hi + 2 Ni S
    assert sp.simplify(crossover["flops_crossover"] - N * Kt * (2 * C + R) / (Ni * (Hi + 1))) == 0
    assert float(crossover["flops_crossover"].xreplace(GLM5)) == 64 * 2048 * 1088 / (32 * 129)


def test_glm5_attention_reads_stop_at_the_top_k_while_the_indexer_keeps_growing():
    layers = 78
    for context in (1024, 2048, 4096, 65536):
        assert decode_read("glm-5", "attention", context) == layers * 576 * 2 * min(context, 2048)
        assert decode_read("glm-5", "indexer.scores", context) == layers * 128 * 2 * context
    # past the crossover (9,216 tokens) the indexer reads more than attention does
    assert decode_read("glm-5", "indexer.scores", 9217) > decode_read("glm-5", "attention", 9217)
    assert decode_read("glm-5", "indexer.scores", 9215) < decode_read("glm-5", "attention", 9215)


def test_a_dense_mla_twin_would_read_every_key_and_the_oracle_sees_the_difference():
    sparse = load_model("glm-5")
    dense = sparse.with_overrides(layer_attention=("global",) * sparse.n_layers, index_heads=0, index_head_dim=0,
                                  index_topk=0)
    placed = phase_ops(dense, Options(), DECODE)
    dense_read = float(sum(p.op.cost.kv_read * p.count for p in placed).subs({B: 1, S: 65536, b_kv: 2}))
    assert dense_read == 78 * 576 * 2 * 65536
    sparse_read = decode_read("glm-5", "attention", 65536) + decode_read("glm-5", "indexer.scores", 65536)
    assert sparse_read / dense_read == (2048 * 576 + 65536 * 128) / (65536 * 576)


def test_the_cache_holds_every_token_s_latent_and_index_key_the_top_k_does_not_shrink_it():
    per_token = kv_cache_expr(load_model("glm-5")).subs({B: 1, S: 1, b_kv: 2})
    assert per_token == 78 * (576 + 128) * 2  # 109,824 bytes


def test_glm52_layers_that_share_an_indexer_keep_no_index_keys():
    glm52 = load_model("tests/data/aiconfigurator_configs/zai-org--GLM-5.2_config.json")
    full = glm52.layer_attention.count(SPARSE)
    assert full + glm52.layer_attention.count(SHARED_SPARSE) == 78 and 0 < full < 78
    per_token = kv_cache_expr(glm52).subs({B: 1, S: 1, b_kv: 2})
    assert per_token == 78 * 576 * 2 + full * 128 * 2


def test_prefill_indexer_scores_every_causal_pair():
    placed = phase_ops(load_model("deepseek-v3.2"), Options(), PREFILL)
    scores = next(p for p in placed if p.op.name == "indexer.scores")
    flops = scores.op.cost.flops.subs({B: 1, S: 8192})
    assert flops == 2 * 64 * (8192 * 8193 // 2) * 128 + 2 * (8192 * 8193 // 2) * 64  # Ni 64, Hi 128

