"""Bugs that recur in older LLM-inference calculators, each pinned by a number they get wrong."""
import pytest

from roofline import analyze, load_model
from roofline.compiled import compile_model


def decode_op(model, name, batch=1, prompt=1024):
    table = analyze(model, "h100-sxm", batch=[batch], prompt=prompt).op_table(batch, prompt)
    rows = table[(table.phase == "decode") & table.op.str.endswith(name)]
    return rows


def test_gqa_kv_cache_is_sized_by_kv_heads_not_query_heads():
    # Llama-3-8B: 2 (K,V) x 32 layers x 8 KV heads x 128 x 2 bytes; sizing by 32 query heads gives 4x.
    assert analyze("llama-3-8b", "h100-sxm").metrics["kv_bytes_per_token"].iloc[0] == 2 * 32 * 8 * 128 * 2


def test_head_dim_is_explicit_not_hidden_over_heads():
    gemma = load_model("gemma-2-9b")
    assert gemma.head_dim == 256 and gemma.d_model // gemma.n_heads == 224
    # 42 layers x 2 x 8 KV heads x 256 x 2 bytes per token while the context is inside the window.
    assert analyze(gemma, "h100-sxm").metrics["kv_bytes_per_token"].iloc[0] == 42 * 2 * 8 * 256 * 2


def test_moe_decode_at_batch_one_reads_the_active_experts_not_all():
    # Mixtral-8x7B: 46.7B parameters, 12.9B active per token (Mistral AI's announcement).
    rows = decode_op("mixtral-8x7b", "", batch=1)
    weights_read = rows["weights"].sum() / 2
    assert 12.5e9 < weights_read < 13.2e9


def test_moe_decode_at_large_batch_reads_nearly_every_expert():
    rows = decode_op("mixtral-8x7b", "experts.gate_up", batch=256)
    all_experts = 32 * 8 * 4096 * 2 * 14336 * 2
    assert rows["weights"].sum() == pytest.approx(all_experts, rel=1e-6)  # 1 - (3/4)^256 ~ 1


def test_e2e_integrates_kv_growth_instead_of_charging_the_final_length_every_step():
    prompt, gen, batch = 512, 200, 32
    result = analyze("llama-2-7b", "h100-sxm", batch=[batch], prompt=prompt, gen=gen).metrics.iloc[0]
    steps = [analyze("llama-2-7b", "h100-sxm", batch=[batch], prompt=prompt + j - 1).metrics.iloc[0]["tpot_s"]
             for j in range(1, gen)]
    exact = result["ttft_s"] + sum(steps)
    assert result["e2e_s"] == pytest.approx(exact, rel=1e-4)
    at_final_length = analyze("llama-2-7b", "h100-sxm", batch=[batch], prompt=prompt + gen - 1).metrics.iloc[0]
    assert result["e2e_s"] < result["ttft_s"] + (gen - 1) * at_final_length["tpot_s"]


def test_lm_head_flops_count_two_per_multiply_add_once():
    rows = decode_op("llama-2-13b", "lm_head", batch=4)
    assert rows["flops"].item() == 2 * 4 * 5120 * 32000


def test_decode_step_reads_the_cache_of_every_sequence():
    one = decode_op("llama-2-13b", "attention", batch=1)["kv_read"].item()
    many = decode_op("llama-2-13b", "attention", batch=16)["kv_read"].item()
    assert many == 16 * one == 16 * 1025 * 819200


def test_sliding_window_layers_read_at_most_the_window():
    short = decode_op("mistral-7b-v0.1", "attention", prompt=1000)["kv_read"].item()
    long = decode_op("mistral-7b-v0.1", "attention", prompt=30000)["kv_read"].item()
    assert long == 32 * 4096 * 2 * 8 * 128 * 2
    assert short == 32 * 1001 * 2 * 8 * 128 * 2


def test_mla_cache_holds_latent_plus_rope_per_layer():
    # DeepSeek-V3: (512 + 64) values x 61 layers x 2 bytes (the engine convention).
    compiled = compile_model(load_model("deepseek-v3"))
    assert compiled.kv_cache(1, 1, 2) == 576 * 61 * 2


def test_one_gpu_name_table_and_an_a100_must_say_its_memory():
    """published.py read a bare 'A100' as the 80 GB part, validation's fit as the 40 GB one: one table now."""
    from roofline.hardware import hardware_id_for_gpu
    assert hardware_id_for_gpu("NVIDIA A100-SXM4-40GB") == "a100-40gb"  # torch's device names
    assert hardware_id_for_gpu("NVIDIA A100 80GB PCIe") == hardware_id_for_gpu("A100-SXM4-80GB") == "a100-80gb"
    assert hardware_id_for_gpu("NVIDIA H100 PCIe") == "h100-pcie" and hardware_id_for_gpu("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert hardware_id_for_gpu("A100") is None  # 40 or 80 GB: not guessed
