"""Quantized checkpoints read as shipped: the formats in config.json's quantization_config and ModelOpt's
hf_quant_config.json, the bytes each format costs, and the CLI flags that still override them.

Bytes per weight, by hand: NVFP4 is a 4-bit E2M1 value plus one 8-bit E4M3 scale per 16 values
(4 + 8/16 = 4.5 bits, 0.5625 bytes; NVIDIA's NVFP4 description, ModelOpt's group_size 16); MXFP4 a 4-bit
value plus one 8-bit exponent per 32 (4.25 bits, the OCP MX v1.0 spec); compressed-tensors INT4 with a
bf16 scale per 32 (Kimi-K2.5's group_size 32): 4 + 16/32 = 4.5 bits.
"""
import json
from pathlib import Path

import pytest

from roofline import load_model
from roofline.models.checkpoint_format import load_shipped_precision, shipped_precision
from roofline.cli import main
from roofline.model import parameter_count, routed_parameter_count
from roofline.precision import Precision

CONFIGS = Path(__file__).parent / "data" / "aiconfigurator_configs"


def shipped(stem: str) -> Precision:
    return load_shipped_precision(str(CONFIGS / f"{stem}_config.json"))


def test_nvfp4_costs_four_and_a_half_bits_a_weight():
    assert Precision(weights="nvfp4").weight_bytes == 4 / 8 + 1 / 16 == 0.5625
    assert Precision(weights="mxfp4").weight_bytes == 4 / 8 + 1 / 32


def test_modelopt_nvfp4_checkpoints_quantize_the_experts_and_the_kv_but_not_attention():
    glm5 = shipped("nvidia--GLM-5-NVFP4")  # exclude_modules: every layer's attention and indexer, lm_head
    assert (glm5.weights, glm5.experts, glm5.kv, glm5.expert_bytes) == ("bf16", "nvfp4", "fp8", 0.5625)
    qwen3 = shipped("nvidia--Qwen3-235B-A22B-NVFP4")  # excludes only the routers and lm_head
    assert (qwen3.weights, qwen3.experts, qwen3.kv) == ("nvfp4", "nvfp4", "fp8")


def test_a_dense_checkpoint_takes_its_mlp_format_throughout():
    assert shipped("nvidia--Gemma-4-31B-IT-NVFP4").weights == "nvfp4"
    assert shipped("nvidia--Qwen3.6-27B-NVFP4").weights == "nvfp4"  # MIXED_PRECISION: MLP NVFP4, attention FP8
    static = shipped("Qwen--Qwen3-32B-FP8-Static-PerTensor")
    assert (static.weights, static.kv) == ("fp8", "fp8")


def test_block_fp8_int4_and_mxfp4_checkpoints_of_the_serving_rows():
    assert shipped("MiniMaxAI--MiniMax-M2.5").weights == "fp8"
    assert (shipped("moonshotai--Kimi-K2.5").experts, shipped("moonshotai--Kimi-K2.5").expert_group_size) == ("int4", 32)
    gpt_oss = shipped("openai--gpt-oss-120b")
    assert (gpt_oss.weights, gpt_oss.experts) == ("bf16", "mxfp4")
    assert load_shipped_precision("qwen3-32b") is None  # a bf16 checkpoint states nothing: bf16 as before


def test_kimi_k25_int4_experts_make_a_594_gb_checkpoint():
    config, precision = load_model("kimi-k2.5"), load_shipped_precision("kimi-k2.5")
    held = precision.held_weight_bytes(parameter_count(config), routed_parameter_count(config))
    routed = routed_parameter_count(config)
    assert held == pytest.approx(routed * 0.5625 + (parameter_count(config) - routed) * 2)
    assert 590e9 < held < 600e9


def test_an_unknown_quantization_method_is_one_line_naming_the_file_and_field():
    with pytest.raises(ValueError, match=r"x.json: field 'quantization_config.quant_method'.*fix:"):
        shipped_precision({"quantization_config": {"quant_method": "gguf"}}, name="x.json")
    with pytest.raises(ValueError, match=r"quant_algo"):
        shipped_precision({}, {"quantization": {"quant_algo": "FP3"}}, name="y.json")


def analyze_precision(*flags) -> dict:
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["analyze", "--json", "--batch", "1", *flags]) == 0
    row = json.loads(out.getvalue())[0]
    return {k: row[k] for k in ("weights", "experts", "kv")}


def test_the_cli_reads_the_shipped_formats_and_each_flag_still_overrides_one():
    path = str(CONFIGS / "nvidia--MiniMax-M2.5-NVFP4_config.json")
    assert analyze_precision("--model", path) == {"weights": "bf16", "experts": "bf16", "kv": "bf16"}
    assert analyze_precision("--model", path, "--as-shipped") == {"weights": "bf16", "experts": "nvfp4", "kv": "fp8"}
    assert analyze_precision("--model", path, "--as-shipped", "--kv", "bf16", "--experts", "fp8") == {
        "weights": "bf16", "experts": "fp8", "kv": "bf16"}
