"""Precision rules (bytes, scales, which peak a matmul runs at) and architecture what-ifs."""
import subprocess
import sys

import pytest

from roofline import Options, Precision, analyze, load_hardware, load_model
from roofline.compiled import compile_model
from roofline.model import parameter_count


def decode_rows(model, batch=1, prompt=1024, **kwargs):
    analysis = analyze(model, kwargs.pop("hardware", "h100-sxm"), batch=[batch], prompt=prompt, **kwargs)
    table = analysis.op_table(batch, prompt)
    return table[table.phase == "decode"]


def test_int4_weights_cost_half_a_byte_plus_one_bf16_scale_per_group():
    assert Precision(weights="int4").weight_bytes == 0.5 + 2 / 128
    assert Precision(weights="int4", weight_group_size=32).weight_bytes == 0.5 + 2 / 32
    assert Precision(weights="int8").weight_bytes == 1.0  # per-channel scales by default


def test_mxfp4_costs_four_bits_plus_one_e8m0_byte_per_32_values():
    assert Precision(weights="mxfp4").weight_bytes * 8 == 4.25  # OCP MX v1.0; gpt-oss's expert weights
    assert Precision(weights="mxfp4").weight_bytes < Precision(weights="q4_0").weight_bytes  # q4_0: fp16 scale
    assert Precision(weights="mxfp4").weight_matmul_dtype == "bf16"  # dequantized into a bf16 matmul here


def test_gpt_oss_in_mxfp4_weighs_its_parameters_at_four_and_a_quarter_bits():
    row = analyze("gpt-oss-120b", "h100-sxm", batch=[1], precision=Precision(weights="mxfp4")).metrics.iloc[0]
    assert row["weight_bytes"] == pytest.approx(parameter_count(load_model("gpt-oss-120b")) * 4.25 / 8)


def test_weight_only_int4_computes_at_the_bf16_peak_and_w8a8_at_the_int8_peak():
    assert Precision(weights="int4").weight_matmul_dtype == "bf16"
    assert Precision(weights="int8", activations="int8").weight_matmul_dtype == "int8"
    assert Precision(weights="fp8", activations="fp8", kv="fp8").attention_matmul_dtype == "fp8"


def test_fp8_prefill_is_twice_as_fast_where_compute_binds():
    bf16 = analyze("llama-2-7b", "h100-sxm", batch=[16], prompt=3968).metrics.iloc[0]  # + 128 generated: the window
    fp8 = analyze("llama-2-7b", "h100-sxm", batch=[16], prompt=3968,
                  precision=Precision(weights="fp8", activations="fp8", kv="fp8")).metrics.iloc[0]
    assert bf16["prefill_bound"] == "compute"
    assert fp8["ttft_s"] == pytest.approx(bf16["ttft_s"] / 2, rel=0.05)


def test_a100_has_no_fp8_units_so_fp8_matmuls_fall_back_to_bf16():
    a100 = load_hardware("a100-80gb")
    assert "fp8" not in a100.peak_flops
    assert a100.peak("fp8") == a100.peak("bf16")


def test_int4_weights_shrink_batch_one_decode_nearly_fourfold():
    bf16 = analyze("llama-2-7b", "h100-sxm").metrics.iloc[0]["tpot_s"]
    int4 = analyze("llama-2-7b", "h100-sxm", precision=Precision(weights="int4")).metrics.iloc[0]["tpot_s"]
    assert 3.0 < bf16 / int4 < 4.0  # the KV cache and the scales do not shrink


def test_fp8_kv_halves_the_cache_bytes():
    bf16 = compile_model(load_model("llama-3-8b")).kv_cache(1, 1, Precision().kv_bytes)
    fp8 = compile_model(load_model("llama-3-8b")).kv_cache(1, 1, Precision(kv="fp8").kv_bytes)
    assert fp8 == bf16 / 2


def test_cross_layer_kv_sharing_divides_cache_and_kv_projections():
    base = load_model("llama-2-7b")
    shared = base.with_overrides(cla_factor=2)
    assert compile_model(shared).kv_cache(1, 1, 2) == compile_model(base).kv_cache(1, 1, 2) / 2
    kv_projection_params = 32 * 2 * 4096 * 4096
    assert parameter_count(base) - parameter_count(shared) == kv_projection_params / 2
    # Every layer still reads the (shared) cache it attends over.
    assert decode_rows(shared)["kv_read"].sum() == decode_rows(base)["kv_read"].sum()


def test_mla_absorbed_decode_reads_the_latent_and_naive_decompresses_it():
    absorbed = decode_rows("deepseek-v2-lite", prompt=4096)
    naive = decode_rows("deepseek-v2-lite", prompt=4096, options=Options(mla_form="naive"))
    assert absorbed["kv_read"].sum() == naive["kv_read"].sum() == 27 * 4097 * 576 * 2
    assert naive["flops"].sum() > 5 * absorbed["flops"].sum()  # re-expanding 4097 keys every step


def test_mla_expanded_cache_holds_per_head_keys_and_values():
    config = load_model("deepseek-v2-lite")
    expanded = compile_model(config, Options(mla_form="expanded")).kv_cache(1, 1, 2)
    assert expanded == 27 * 16 * (128 + 64 + 128) * 2


def test_gemma_alternates_windowed_and_global_layers():
    gemma = load_model("gemma-2-9b")
    assert gemma.layer_attention[:4] == ("window", "global", "window", "global")
    cache = compile_model(gemma).kv_cache
    per_layer_token = 2 * 8 * 256 * 2
    assert cache(1, 8192, 2) == 21 * per_layer_token * 8192 + 21 * per_layer_token * 4096


def test_the_core_imports_without_torch_or_streamlit():
    code = "import sys, roofline; roofline.analyze(); print(sorted({'torch', 'streamlit'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
