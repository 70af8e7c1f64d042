"""Layers of two attention shapes (Gemma 4, MiMo-V2-Flash, Step-3.7): hand-worked numbers from the published configs.

The oracles against transformers (parameters, FLOPs, cache bytes) are in tests/test_hf_oracles.py and
tests/test_aiconfigurator_configs.py; here each new piece is checked against a count done by hand from the
config.json, and against the wrong formula it replaces.
"""
import json
from pathlib import Path

import pytest

from roofline import ModelConfig, load_model
from roofline.compiled import FLOPS_ROW, compile_model
from roofline.models.config import MODELS_DIR
from roofline.model import DECODE, Options, parameter_count, phase_ops
from roofline.symbols import B, S, b_e, b_kv, b_w
from roofline.sharding import shard

BF16 = 2.0
CONFIGS = Path(__file__).parent / "data" / "aiconfigurator_configs"


def cache_growth_per_token(config: ModelConfig, context: int) -> float:
    """Bytes one more token adds to one sequence's cache at this context."""
    compiled = compile_model(config)
    return compiled.kv_cache(1, context + 1, BF16) - compiled.kv_cache(1, context, BF16)


def test_gemma4_caches_sliding_and_global_layers_in_their_own_head_shapes():
    config = load_model("gemma-4-26b-a4b")  # 25 sliding layers: 8 KV heads x 256; 5 global: 2 x 512, K = V
    sliding, global_ = 25 * 2 * 8 * 256 * 2, 5 * 2 * 2 * 512 * 2
    assert compile_model(config).kv_cache(1, 1, BF16) == sliding + global_ == 225_280
    assert cache_growth_per_token(config, 5000) == global_  # past the 1024-token window only global layers grow
    uniform = config.with_overrides(attention_shapes=())  # the global layers sized like the sliding ones
    assert cache_growth_per_token(uniform, 5000) != global_


def test_gemma4_global_layers_project_keys_once_and_store_them_twice():
    config = load_model("gemma-4-26b-a4b")
    qkv = next(p for p in phase_ops(config, Options(), DECODE) if p.name == "layers[global,moe].qkv_proj")
    assert qkv.op.params == 2816 * (16 * 512 + 2 * 512)  # q_proj and k_proj; no v_proj (attention_k_eq_v)
    with_values = config.with_overrides(values_are_keys=())
    assert parameter_count(with_values) - parameter_count(config) == 5 * 2816 * 2 * 512


def test_gemma4_moe_layers_add_the_experts_beside_the_dense_mlp():
    config = load_model("gemma-4-26b-a4b")
    per_layer = (3 * 2816 * 2112  # the dense gated MLP
                 + 128 * 3 * 2816 * 704 + 2816 * 128  # 128 experts (gate, up, down) and the router
                 + 2816 + 128  # the router's input scale and per-expert scale
                 + 4 * 2816)  # pre-MLP norm, post-MLP norm, the experts' pre and post norms (post-FF norm apart)
    mlp = sum(p.op.params for p in phase_ops(config, Options(), DECODE)
              if p.group == "layers[window,moe]" and p.op.name not in
              ("attn_norm", "qkv_proj", "attention", "o_proj", "q_norm", "k_norm", "v_norm", "post_attn_norm",
               "post_mlp_norm"))
    assert mlp == per_layer


def test_a_tensor_parallel_shard_replicates_gemma4_s_two_global_kv_heads():
    config = load_model("gemma-4-26b-a4b")
    at_tp8 = shard(config, 8)  # 8 sliding KV heads: one a GPU; 2 global KV heads: each GPU keeps one whole
    assert compile_model(at_tp8).kv_cache(1, 1, BF16) == 25 * 2 * 1 * 256 * 2 + 5 * 2 * 1 * 512 * 2
    at_tp2 = shard(config, 2)
    assert compile_model(at_tp2).kv_cache(1, 1, BF16) == 25 * 2 * 4 * 256 * 2 + 5 * 2 * 1 * 512 * 2


def test_mimo_v2_flash_caches_192_wide_keys_and_128_wide_values_in_both_layer_kinds():
    config = load_model("mimo-v2-flash")  # 39 sliding layers of 8 KV heads, 9 full layers of 4
    assert (config.n_kv_heads, config.head_dim, config.v_head_dim, config.window) == (8, 192, 128, 129)
    assert compile_model(config).kv_cache(1, 1, BF16) == 39 * 8 * (192 + 128) * 2 + 9 * 4 * (192 + 128) * 2
    assert cache_growth_per_token(config, 10_000) == 9 * 4 * 320 * 2  # the 128 + 1 window caps the rest
    at_tp8 = shard(config, 8)  # sliding: 1 KV head a GPU; full: 4 heads over 8 GPUs, each keeps one
    assert compile_model(at_tp8).kv_cache(1, 1, BF16) == 39 * 1 * 320 * 2 + 9 * 1 * 320 * 2


def test_mimo_v2_flash_has_sinks_on_its_sliding_layers_only():
    config = load_model("mimo-v2-flash")
    sinks = [p for p in phase_ops(config, Options(), DECODE) if p.op.name == "attention.sinks"]
    assert sum(p.count for p in sinks) == 39 and all(p.op.params == 64 for p in sinks)


def test_step37_gates_each_query_head_with_one_weight_row_a_layer():
    config = load_model("step-3.7-flash")
    assert parameter_count(config) - parameter_count(config.with_overrides(head_gate=False)) == 45 * 4096 * 64
    assert config.shared_expert_width == 1280 and config.layer_mlp.count("moe") == 42


def test_step37_sliding_layers_may_have_their_own_query_heads():
    hf = json.loads(load_model_path("step-3.7-flash"))
    wide = ModelConfig.from_hf_config({**hf, "attention_other_setting": {"num_attention_heads": 96}}, name="step")
    extra_heads = 32 * 128 * (4096 + 4096) + 32 * 4096  # q_proj and o_proj rows, and the gate, of 32 more heads
    sliding_layers = 33  # of 45: full attention on every 4th from layer 0
    assert parameter_count(wide) - parameter_count(load_model("step-3.7-flash")) == sliding_layers * extra_heads


def load_model_path(name: str) -> str:
    return (MODELS_DIR / f"{name}.json").read_text()


@pytest.mark.parametrize("key", ["hidden_size_per_layer_input", "num_kv_shared_layers"])
def test_gemma4_s_small_models_are_refused_naming_the_feature(key):
    hf = json.loads(load_model_path("gemma-4-26b-a4b"))
    hf["text_config"][key] = 256
    with pytest.raises(ValueError, match=f"field '{key}' must be 0.*not modelled"):
        ModelConfig.from_hf_config(hf, name="gemma-4-e4b")


def decode_read(name: str, op: str, context: int, group: str = "") -> float:
    """Cache bytes one op reads in one decode step of one sequence, summed over its layers (bf16 cache)."""
    placed = [p for p in phase_ops(load_model(name), Options(), DECODE) if p.op.name == op and group in p.group]
    return float(sum(p.op.cost.kv_read * p.count for p in placed).subs({B: 1, S: context, b_kv: 2}))


def test_minimax_m3_sparse_layers_read_each_kv_head_s_top_2048_keys_and_the_indexer_every_key():
    # 57 block-sparse layers (16 blocks of 128 keys per KV head), 3 dense ones; 4 KV heads x 128 (K and V),
    # one 128-wide index key per token per sparse layer.
    for context in (1000, 2048, 4096, 65536):
        sparse, dense = 57 * 2 * 4 * 128 * 2 * min(context, 2048), 3 * 2 * 4 * 128 * 2 * context
        assert decode_read("minimax-m3", "attention", context) == sparse + dense
        assert decode_read("minimax-m3", "indexer.scores", context) == 57 * 128 * 2 * context
    # on a sparse layer the indexer outreads attention past 2048 x (2 K H) / Hi = 16,384 tokens
    sparse = "layers[sparse,"
    assert decode_read("minimax-m3", "indexer.scores", 16385, sparse) > decode_read("minimax-m3", "attention", 16385, sparse)
    assert decode_read("minimax-m3", "indexer.scores", 16383, sparse) < decode_read("minimax-m3", "attention", 16383, sparse)


def test_minimax_m3_caches_every_key_and_index_key_the_top_k_does_not_shrink_it():
    config = load_model("minimax-m3")
    assert compile_model(config).kv_cache(1, 1, BF16) == 60 * 2 * 4 * 128 * 2 + 57 * 128 * 2 == 137_472
    assert cache_growth_per_token(config, 100_000) == 137_472


def test_deepseek_v4_decode_reads_the_window_the_top_entries_and_every_heavy_entry():
    # V4-Flash: 2 window layers, 21 compressed sparse (entries of 4 tokens, top 512 read), 20 heavily compressed
    # (entries of 128, all read); one 512-wide K=V vector per key, window 128; the indexer reads 128-wide entries.
    for context in (100, 4096, 1 << 20):
        window = 43 * min(context, 128)
        picked = 21 * min(context // 4, 512) + 20 * (context // 128)
        assert decode_read("deepseek-v4-flash", "attention", context) == (window + picked) * 512 * 2
        assert decode_read("deepseek-v4-flash", "indexer.scores", context) == 21 * (context // 4) * 128 * 2


def test_deepseek_v4_pro_caches_about_a_tenth_of_deepseek_v32_s_per_token_at_a_million_tokens():
    # Per token past the window: V4-Pro's 30 compressed sparse layers keep (512 + 128) / 4 values, its 31 heavily
    # compressed ones 512 / 128; DeepSeek-V3.2's 61 layers keep 576 latent + 128 index values. DeepSeek reports
    # "10% of the KV cache" at 1M tokens (its own mix of precisions; both bf16 here: 11.5%).
    pro = ModelConfig.from_hf_config(json.loads((CONFIGS / "deepseek-ai--DeepSeek-V4-Pro_config.json").read_text()),
                                     name="v4-pro")
    def per_token(config):  # averaged over 512 tokens: whole windows of 4 and of 128
        compiled = compile_model(config)
        return (compiled.kv_cache(1, (1 << 20) + 512, BF16) - compiled.kv_cache(1, 1 << 20, BF16)) / 512
    v4, v32 = per_token(pro), per_token(load_model("deepseek-v3.2"))
    assert v4 == (30 * 640 / 4 + 31 * 512 / 128) * 2 and v32 == 61 * (576 + 128) * 2
    assert v4 / v32 == pytest.approx(0.115, abs=0.001)


def test_deepseek_v4_cache_grows_as_transformers_cache_does():
    pytest.importorskip("transformers")
    from hf_reference import TINY_CONFIGS, hf_compressed_cache_bytes
    config = ModelConfig.from_hf_config(TINY_CONFIGS["deepseek-v4"], name="deepseek-v4")
    compiled = compile_model(config)
    for short, long in ((128, 256), (256, 384)):  # whole windows of 4 and 128 tokens: no pooling buffer left open
        theirs = hf_compressed_cache_bytes(TINY_CONFIGS["deepseek-v4"], long) - hf_compressed_cache_bytes(
            TINY_CONFIGS["deepseek-v4"], short)
        assert compiled.kv_cache(1, long, BF16) - compiled.kv_cache(1, short, BF16) == theirs


def test_deepseek_v4_prefill_flops_equal_the_flop_counter_past_a_heavy_window():
    pytest.importorskip("transformers")
    from hf_reference import TINY_CONFIGS, hf_flops
    config = ModelConfig.from_hf_config(TINY_CONFIGS["deepseek-v4"], name="deepseek-v4")
    hf_like = compile_model(config, Options(attention="eager", logits="all"))
    for phase, step, context in (("prefill", hf_like.prefill, 140), ("decode", hf_like.decode, 141)):
        ours = float(step(1, context, (4.0,) * 4)[:, FLOPS_ROW].sum())
        assert ours == hf_flops(TINY_CONFIGS["deepseek-v4"], 1, 140, phase)


def test_a_deepseek_v4_shard_keeps_whole_output_groups_and_replicates_the_one_kv_head():
    config = load_model("deepseek-v4-flash")  # 64 heads in 8 output groups of rank 1024; one 512-wide K=V head
    at_tp8 = shard(config, 8)
    assert (at_tp8.n_heads, at_tp8.o_groups, at_tp8.n_kv_heads) == (8, 1, 1)
    o_b = next(p for p in phase_ops(at_tp8, Options(), DECODE) if p.op.name == "o_b_proj")
    assert o_b.op.params == 1 * 1024 * 4096  # an eighth of the 8 x 1024 x 4096 projection
    assert compile_model(at_tp8).kv_cache(1, 1 << 16, BF16) == compile_model(config).kv_cache(1, 1 << 16, BF16)
    with pytest.raises(ValueError, match="tp: 16 does not divide the 8 output-projection groups"):
        shard(config, 16)


def test_deepseek_v4_s_kv_read_equals_its_weight_read_past_both_caps_at_the_solved_context():
    from roofline.derivations import kv_equals_weights_context
    config = load_model("deepseek-v4-flash")
    _, context = kv_equals_weights_context(config)
    assert context > 4 * 512  # past the window (128) and the top-k's cap (512 entries of 4 tokens)
    placed = phase_ops(config, Options(), DECODE)
    grows = 21 * 128 / 4 + 20 * 512 / 128  # index entries (128 wide, 1 per 4 tokens) and heavy entries, per token
    flat = (43 * 128 + 21 * 512) * 512  # the window ring and the top 512 entries, each 512 wide
    weights = float(sum(p.op.cost.weights * p.count for p in placed).subs({B: 1, b_w: 2, b_e: 2}))
    assert (flat + grows * context) * 2 == pytest.approx(weights, rel=1e-9)
