"""Issue 21, sections 2-4: inputs refused in one line, and what a practitioner reads, against hand-worked numbers."""
import json

import pytest

from roofline.cli import main
from roofline.models.config import MODELS_DIR, ModelConfig, config_from_json
from roofline.hardware import hardware_from_dict, load_hardware

LLAMA3 = json.loads((MODELS_DIR / "llama-3-8b.json").read_text())


def refused(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    return captured.err


def answer_json(capsys, argv: list[str]) -> list[dict]:
    capsys.readouterr()
    assert main([*argv, "--json"]) in (0, 1)
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("field", ["num_key_value_heads", "head_dim", "max_position_embeddings"])
def test_a_zero_where_transformers_would_take_a_default_is_refused_by_name(field):
    with pytest.raises(ValueError, match=f"config 'zero.json': field '{field}' must be a positive integer, got 0; fix:"):
        ModelConfig.from_hf_config({**LLAMA3, field: 0}, name="zero.json")


def test_absent_kv_heads_and_head_dim_are_multi_head_attention_over_hidden_by_heads():
    raw = {k: v for k, v in LLAMA3.items() if k not in ("num_key_value_heads", "head_dim")}
    config = ModelConfig.from_hf_config(raw, name="mha")
    assert (config.n_kv_heads, config.head_dim) == (32, 4096 // 32)


def test_first_k_dense_replace_above_the_layer_count_is_refused_and_equal_to_it_is_all_dense():
    raw = json.loads((MODELS_DIR / "deepseek-v2-lite.json").read_text())  # 27 layers
    with pytest.raises(ValueError, match="'first_k_dense_replace' must be at most num_hidden_layers \\(27\\), got 28"):
        ModelConfig.from_hf_config({**raw, "first_k_dense_replace": 28}, name="dsv2")
    assert set(ModelConfig.from_hf_config({**raw, "first_k_dense_replace": 27}, name="dsv2").layer_mlp) == {"dense"}


def test_an_fp8_only_device_refuses_bf16_matmuls_instead_of_pricing_them_at_the_fp8_peak():
    fp8_only = hardware_from_dict("fp8-only", {"memory_bytes": 8e10, "memory_bandwidth_bytes_per_s": 3.35e12,
                                               "peak_flops": {"fp8": 1.979e15}})
    assert fp8_only.peak("fp8") == 1.979e15
    with pytest.raises(ValueError, match="no sourced peak FLOP/s for bf16 matmuls, nor a wider .* fix: add peak_flops.bf16"):
        fp8_only.peak("bf16")
    a100 = load_hardware("a100-80gb")  # no fp8 units: fp8 runs at the next wider unit, bf16
    assert a100.peak("fp8") == a100.peak_flops["bf16"]


def test_a_config_nested_200000_levels_deep_is_one_line_from_the_cli_and_the_uploader(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000)
    assert "nested more than 64 levels" in refused(capsys, ["analyze", "--model", str(path)])
    with pytest.raises(ValueError, match="upload.json.*nested more than 64 levels"):
        config_from_json(b"[" * 200_000, "upload.json", name="upload")  # what the app's uploader calls
    with pytest.raises(ValueError, match="nested more than 64 levels"):
        config_from_json('{"a": ' * 100 + "1" + "}" * 100, "upload.json", name="upload")  # parses, too deep


@pytest.mark.parametrize("rate", ["inf", "nan", "0", "-1", "1e30"])
def test_plan_refuses_a_rate_that_is_not_a_finite_positive_number(capsys, rate):
    err = refused(capsys, ["plan", f"--rate={rate}", "--hardware", "h100-sxm", "--tp", "1"])
    assert "--rate" in err and "fix:" in err


def test_plan_top_0_prints_nothing_before_its_refusal(capsys):
    assert "--top" in refused(capsys, ["plan", "--top", "0", "--hardware", "h100-sxm", "--tp", "1"])


def test_plan_prices_each_weight_format_once_however_often_it_is_named(capsys):
    base = ["plan", "--model", "llama-2-7b", "--hardware", "h100-sxm", "--tp", "1,2"]
    once = answer_json(capsys, [*base, "--weights", "bf16,fp8"])
    again = answer_json(capsys, [*base, "--weights", "bf16,bf16,fp8,bfloat16,fp8"])
    assert len(once) == len(again)
    assert sum(row["mode"] == "aggregated" for row in once) == 4  # 2 formats x tp 1, 2 (the rest: pool pairs)


def test_plan_says_1_candidate_not_1_candidates(capsys):
    capsys.readouterr()
    main(["plan", "--model", "llama-2-7b", "--hardware", "h100-sxm", "--tp", "1", "--weights", "bf16",
          "--no-disaggregated"])
    assert "; 1 candidate ranked" in capsys.readouterr().out


def test_a_header_only_workload_csv_names_its_file(tmp_path, capsys):
    path = tmp_path / "lengths.csv"
    path.write_text("prompt_tokens\n")
    assert str(path) in refused(capsys, ["plan", "--prompt", f"csv:{path}", "--hardware", "h100-sxm", "--tp", "1"])


def test_report_refuses_an_unwritable_out_before_computing(tmp_path, capsys, monkeypatch):
    import roofline.cli.report as report_cli

    def never(*args, **kwargs):
        raise AssertionError("the study was computed before --out was checked")
    monkeypatch.setattr(report_cli, "build_study", never)
    assert "--out: cannot write in '/proc/nope'" in refused(capsys, ["report", "--out", "/proc/nope"])
    (tmp_path / "file").write_text("")
    assert "not a directory" in refused(capsys, ["report", "--out", str(tmp_path / "file")])


def test_activations_in_a_weight_only_format_are_refused(capsys):
    assert "--act: int4 is a group-quantized weight format" in refused(capsys, ["analyze", "--act", "int4"])


def test_mla_form_is_refused_on_a_model_without_mla_and_taken_on_one(capsys):
    assert "--mla-form: model 'llama-2-13b' has no multi-head latent attention" in \
        refused(capsys, ["analyze", "--mla-form", "naive"])
    naive = answer_json(capsys, ["analyze", "--model", "deepseek-v2-lite", "--mla-form", "naive", "--batch", "1"])
    absorbed = answer_json(capsys, ["analyze", "--model", "deepseek-v2-lite", "--batch", "1"])
    assert naive[0]["tpot_s"] != absorbed[0]["tpot_s"]


def test_speculate_without_a_draft_picks_one_sharing_the_targets_vocabulary(capsys):
    capsys.readouterr()
    assert main(["speculate", "--model", "llama-3-8b"]) == 0  # was: llama-2-7b, then its vocabulary refused
    out = capsys.readouterr().out
    assert "MTP-style head" in out and "the draft runs at the target's tp (1)" in out
    record = answer_json(capsys, ["speculate", "--model", "llama-2-70b", "--tp", "2"])
    assert record["draft"] == "tinyllama-1.1b-chat-v1.0"  # V = 32000 like Llama-2, the smallest such model


def test_moe_napkin_reads_only_the_experts_a_step_can_pick(capsys):
    # Mixtral-8x7B, top-2 of 8: routed experts 32 layers x 8 x (3 x 4096 x 14336) = 45,097,156,608 weights.
    # Batch 1 reads 2 of 8; batch 4 can read all 8. KV: 32 x 2 x 8 heads x 128 x 2 B = 131,072 B a token.
    rows = answer_json(capsys, ["analyze", "--model", "mixtral-8x7b", "--batch", "1,4", "--prompt", "1024"])
    routed_bytes = 32 * 8 * 3 * 4096 * 14336 * 2
    for row, read_share in zip(rows, (2 / 8, 1.0)):
        kv = row["batch"] * 131_072 * 1024
        want = (row["weight_bytes"] - routed_bytes * (1 - read_share) + kv) / 3.35e12
        assert row["napkin_tpot_s"] == pytest.approx(want, rel=1e-9)
    assert rows[0]["napkin_tpot_s"] < 2 * rows[0]["tpot_s"]  # was 13-18x the roofline for MoE models


def test_the_kv_cache_of_a_window_model_is_given_at_the_context_not_as_all_global(capsys):
    # gpt-oss-120b: 36 layers alternating window (128) and global, 8 KV heads of 64: 2 x 8 x 64 x 2 = 2048 B a
    # layer a token. At 1024 + 128 tokens: 18 x 1152 x 2048 + 18 x 128 x 2048 = 47,185,920 B; past the window
    # 18 x 2048 = 36,864 B a token. (It read "73.73 kB per token", window layers counted as global.)
    capsys.readouterr()
    assert main(["analyze", "--model", "gpt-oss-120b", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    assert ("KV cache 47.19 MB per sequence at prompt + gen (1152 tokens; window layers keep at most 128), "
            "then 36.86 kB per token (global layers)") in out
    assert "napkin TPOT: the lecture's napkin" in out  # defined where it is shown
