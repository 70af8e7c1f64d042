"""Our counts against Hugging Face reference modules (tests/hf_reference.py measures them).

What FlopCounterMode counts, and so what is compared: matmul FLOPs only (mm, addmm, bmm); no
elementwise work (norms, activations, softmax, rope, bias adds). The HF modules run eager
attention (full score matrix), logits for every prompt position, MoE experts as a per-expert
loop, and MLA decompressing the latent cache every step: our Options(attention="eager",
logits="all", mla_form="naive") describe the same computation. Hugging Face's Llama 4 MoE runs every
expert on every token (scaled by the router's masked scores): compared as top_k = E.
"""
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_reference import (STATE_CASES, TINY_CONFIGS, hf_flops, hf_kv_cache_bytes_per_token,  # noqa: E402
                          hf_parameter_count)

from roofline import ModelConfig, Options, bundled_models, load_model  # noqa: E402
from roofline.models.config import MODELS_DIR  # noqa: E402
from roofline.compiled import FLOPS_ROW, compile_model  # noqa: E402
from roofline.model import parameter_count  # noqa: E402

HF_LIKE = Options(attention="eager", logits="all", mla_form="naive")
# Constant-state families have their own oracles (tests/test_state_oracles.py): HF's counter sees only
# part of their scan, and their cache holds a state besides the per-token KV.
ATTENTION_CASES = sorted(set(TINY_CONFIGS) - set(STATE_CASES))
REAL_FLOP_CHECKS = ["llama-2-13b", "llama-3-8b", "mixtral-8x7b", "qwen2.5-7b", "gemma-2-9b", "gpt2",
                    "deepseek-v2-lite", "deepseek-v3", "mistral-7b-v0.1",
                    "qwen3-8b", "qwen3-30b-a3b", "gemma-3-27b", "glm-4.5-air", "kimi-k2", "llama-4-scout",
                    "llama-4-maverick", "gpt-oss-20b", "minimax-m2.5", "deepseek-v3.2", "gemma-4-26b-a4b",
                    "mimo-v2-flash", "mimo-7b-base", "minimax-m3",
                    "deepseek-v4-flash"]  # not step-3.7-flash: its experts' loop cannot run on meta
HF_RUNS_EVERY_EXPERT = ("llama4_text",)
NOT_IN_TRANSFORMERS = ("nemotron-nas",)  # DeciLM's remote code only
# DeepSeek-V4's cache is a window ring plus compressed entries: its growth is checked in tests/test_mixed_attention.py.
COMPRESSED_CASES = ("deepseek-v4",)


def raw_config(name: str) -> dict:
    return json.loads((MODELS_DIR / f"{name}.json").read_text())


def our_flops(config: ModelConfig, phase: str, batch: int, prompt: int) -> float:
    if config.family in HF_RUNS_EVERY_EXPERT:
        config = config.with_overrides(top_k=config.n_experts)
    compiled = compile_model(config, HF_LIKE)
    step, context = (compiled.prefill, prompt) if phase == "prefill" else (compiled.decode, prompt + 1)
    return float(step(batch, context, (4.0, 4.0, 4.0, 4.0))[:, FLOPS_ROW].sum())


@pytest.mark.parametrize("name", bundled_models())
def test_parameter_count_equals_the_hugging_face_module(name):
    if load_model(name).family in NOT_IN_TRANSFORMERS:
        pytest.skip("transformers has no module for this family: checked by hand in tests/test_late_families.py")
    assert parameter_count(load_model(name)) == hf_parameter_count(raw_config(name))


@pytest.mark.parametrize("case", ATTENTION_CASES)
@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("batch, prompt", [(2, 16), (3, 5)])
def test_flops_equal_flop_counter_on_tiny_models(case, phase, batch, prompt):
    config = ModelConfig.from_hf_config(TINY_CONFIGS[case], name=case)
    expected = hf_flops(TINY_CONFIGS[case], batch, prompt, phase)
    assert our_flops(config, phase, batch, prompt) == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("name", REAL_FLOP_CHECKS)
def test_decode_flops_equal_flop_counter_on_real_configs(name):
    expected = hf_flops(raw_config(name), 1, 64, "decode", device="meta")
    assert our_flops(load_model(name), "decode", 1, 64) == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("case", [c for c in ATTENTION_CASES if c not in COMPRESSED_CASES])
def test_kv_bytes_per_token_equal_the_hugging_face_cache_tensors(case):
    config = ModelConfig.from_hf_config(TINY_CONFIGS[case], name=case)
    expected = hf_kv_cache_bytes_per_token(TINY_CONFIGS[case], dtype=torch.bfloat16)
    assert compile_model(config).kv_cache(1, 1, 2.0) == expected


@pytest.mark.parametrize("name", ["llama-2-7b", "llama-3-8b", "deepseek-v3", "deepseek-v2-lite", "qwen3-8b",
                                  "qwen3-30b-a3b", "gemma-3-27b", "glm-4.5-air", "kimi-k2", "llama-4-scout",
                                  "gpt-oss-20b", "gpt-oss-120b", "glm-5", "deepseek-v3.2", "minimax-m2.5",
                                  "kimi-k2.5", "qwen3-32b", "gemma-4-26b-a4b", "mimo-v2-flash", "mimo-7b-base",
                                  "minimax-m3"])
def test_kv_bytes_per_token_of_real_configs(name):
    expected = hf_kv_cache_bytes_per_token(raw_config(name), dtype=torch.bfloat16, device="meta")
    assert compile_model(load_model(name)).kv_cache(1, 1, 2.0) == expected


def test_the_oracle_catches_a_kv_cache_sized_by_query_heads():
    case = next(c for c in ATTENTION_CASES if TINY_CONFIGS[c].get("num_key_value_heads", 0)
                and TINY_CONFIGS[c]["num_key_value_heads"] < TINY_CONFIGS[c]["num_attention_heads"])
    config = ModelConfig.from_hf_config(TINY_CONFIGS[case], name=case)
    wrong = config.with_overrides(n_kv_heads=config.n_heads)
    expected = hf_kv_cache_bytes_per_token(TINY_CONFIGS[case], dtype=torch.bfloat16)
    assert compile_model(wrong).kv_cache(1, 1, 2.0) != expected


def test_the_oracle_catches_moe_experts_counted_densely():
    config = ModelConfig.from_hf_config(TINY_CONFIGS["mixtral"], name="mixtral")
    dense = config.with_overrides(top_k=config.n_experts)  # every token through every expert
    expected = hf_flops(TINY_CONFIGS["mixtral"], 2, 16, "prefill")
    assert our_flops(dense, "prefill", 2, 16) > 1.2 * expected


@pytest.mark.parametrize("case, wrong", [("qwen3", {"qk_norm": ""}), ("gemma3-text", {"norms_per_layer": 2}),
                                         ("gpt-oss", {"attention_sinks": False}), ("gpt-oss", {"expert_bias": False}),
                                         ("gpt-oss", {"router_param_bias": False}), ("minimax-m2", {"qk_norm": "rms"}),
                                         ("glm-moe-dsa", {"layer_attention": ("sparse",) * 3}),
                                         ("nemotron-h-latent-moe", {"moe_latent": 0}),
                                         ("nemotron-h-latent-moe", {"gated_mlp": True}),
                                         ("gemma4-moe", {"values_are_keys": ()}),
                                         ("gemma4-moe", {"dense_beside_moe": False}),
                                         ("gemma4-moe", {"attention_shapes": ()}),
                                         ("mimo-v2-flash", {"sink_kinds": ("window", "global")}),
                                         ("step3p7", {"head_gate": False}),
                                         ("step3p7", {"attention_shapes": ()}),
                                         ("minimax-m3", {"layer_attention": ("global",) * 3}),
                                         ("deepseek-v4", {"hc_streams": 1}),
                                         ("deepseek-v4", {"o_groups": 1})])
def test_the_oracle_catches_a_dropped_norm_sink_or_bias(case, wrong):
    config = ModelConfig.from_hf_config(TINY_CONFIGS[case], name=case)
    assert parameter_count(config) == hf_parameter_count(TINY_CONFIGS[case])
    assert parameter_count(config.with_overrides(**wrong)) != hf_parameter_count(TINY_CONFIGS[case])
