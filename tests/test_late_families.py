"""Issue 25's families where no transformers module is the oracle, or where one family reuses another.

Nemotron-NAS (Llama-3.3-Nemotron-Super-49B, DeciLM remote code): counted by hand from its block_configs.
Each kept attention is Llama-3.3-70B's (64 query heads, 8 KV heads of 128, D 8192) with its input norm; each
kept MLP is a SwiGLU of width F' = 2 ffn_mult D / 3 rounded up to 256 (ffn_mult 5.25 gives 28,672, the 70B's
intermediate_size) with its norm; embeddings and LM head untied (V 128,256).
"""
import json
import math
from pathlib import Path

import pytest

from roofline import load_model
from roofline.model import parameter_count
from roofline.sharding import shard

NAS = "llama-3.3-nemotron-super-49b"


def nas_blocks() -> list[dict]:
    path = Path(__file__).parents[1] / "data" / "models" / f"{NAS}.json"
    return json.loads(path.read_text())["block_configs"]


def by_hand(blocks: list[dict]) -> int:
    d, vocab, heads, kv, head = 8192, 128_256, 64, 8, 128
    total = 2 * vocab * d + d  # embedding, LM head, final norm
    for block in blocks:
        if not block["attention"]["no_op"]:
            total += d + d * heads * head + 2 * d * kv * head + heads * head * d  # norm, q, k, v, o
        if not block["ffn"]["no_op"]:
            width = math.ceil(int(2 * block["ffn"]["ffn_mult"] * d / 3) / 256) * 256
            total += d + 3 * d * width  # norm, gate, up, down
    return total


def test_nemotron_nas_parameters_equal_the_hand_count_of_its_blocks():
    assert parameter_count(load_model(NAS)) == by_hand(nas_blocks()) == 49_867_145_216
    assert 49e9 <= parameter_count(load_model(NAS)) < 50e9  # the name's 49B (nvidia's model card)


def test_nemotron_nas_drops_attention_in_31_of_80_layers_and_sizes_each_mlp():
    config = load_model(NAS)
    assert config.layer_attention.count("none") == 31 and config.d_ff == 28_672
    assert sorted(set(config.layer_mlp)) == ["dense:1", "dense:1/2", "dense:1/4", "dense:11/112", "dense:11/56",
                                             "dense:5/8"]


def test_a_nas_shard_halves_every_layer_s_mlp_with_the_tensor_parallel_degree():
    config = load_model(NAS)
    embeddings = 2 * config.vocab_size * config.d_model
    halves = parameter_count(shard(config, 2)) - embeddings // 2
    whole = parameter_count(config) - embeddings
    assert halves == pytest.approx(whole / 2, rel=1e-3)  # norms are not split


def test_kimi_k25_is_kimi_k2_s_architecture_in_a_vision_language_config():
    assert parameter_count(load_model("kimi-k2.5")) == parameter_count(load_model("kimi-k2"))
    assert load_model("kimi-k2.5").text_tower_of == "kimi_k25" and load_model("kimi-k2").text_tower_of == ""


def test_a_tiny_qwen35_text_tower_has_the_parameters_of_the_hugging_face_module():
    pytest.importorskip("transformers")
    from hf_reference import TINY_CONFIGS, hf_parameter_count

    from roofline import ModelConfig
    tiny = TINY_CONFIGS["qwen3.5-moe"]
    assert parameter_count(ModelConfig.from_hf_config(tiny, name="qwen3.5-moe")) == hf_parameter_count(tiny)
