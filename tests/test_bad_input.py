"""Bad input raises ValueError naming the field and the fix: never a traceback elsewhere or a NaN."""
import json

import pytest

from roofline import ModelConfig, Options, Precision, analyze, load_hardware, load_model


def llama(**changes):
    raw = json.loads(open(load_model.__globals__["MODELS_DIR"] / "llama-2-7b.json").read())
    raw.update(changes)
    return raw


@pytest.mark.parametrize("changes, field", [
    ({"hidden_size": 0}, "hidden_size"),
    ({"num_hidden_layers": -2}, "num_hidden_layers"),
    ({"num_attention_heads": "32"}, "num_attention_heads"),
    ({"head_dim": -1}, "head_dim"),
    ({"num_key_value_heads": 5}, "n_kv_heads"),
    ({"model_type": "mamba"}, "model_type"),
    ({"intermediate_size": None}, "intermediate_size"),
    ({"vocab_size": 1.5}, "vocab_size"),
])
def test_bad_config_names_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf_config(llama(**changes), name="broken")


@pytest.mark.parametrize("kwargs, field", [
    ({"batch": [0]}, "batch"),
    ({"batch": [-1, 4]}, "batch"),
    ({"prompt": 0}, "prompt"),
    ({"gen": float("nan")}, "gen"),
    ({"model": "gpt-17"}, "model"),
    ({"hardware": "tpu-v9"}, "hardware"),
    ({"n_kv_heads": 3}, "n_kv_heads"),
])
def test_bad_analysis_arguments_name_the_field(kwargs, field):
    args = {"model": "llama-2-7b", "hardware": "h100-sxm", **kwargs}
    with pytest.raises(ValueError, match=field):
        analyze(**args)


@pytest.mark.parametrize("make, field", [
    (lambda: Precision(weights="fp6"), "weights"),
    (lambda: Precision(kv="int3"), "kv"),
    (lambda: Precision(weight_group_size=0), "weight_group_size"),
    (lambda: Options(attention="paged"), "attention"),
    (lambda: Options(mla_form="compressed"), "mla_form"),
])
def test_bad_precision_and_options_name_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        make()


def test_malformed_files_are_clear_errors(tmp_path):
    bad_json = tmp_path / "config.json"
    bad_json.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read JSON"):
        load_model(str(bad_json))
    hw = tmp_path / "gpu.json"
    hw.write_text(json.dumps({"x1": {"memory_bytes": 8e10}}))
    with pytest.raises(ValueError, match="memory_bandwidth_bytes_per_s"):
        load_hardware(str(hw))
    hw.write_text(json.dumps({"x1": {"memory_bytes": 8e10, "memory_bandwidth_bytes_per_s": -1}}))
    with pytest.raises(ValueError, match="memory_bandwidth"):
        load_hardware(str(hw))


def test_a_user_hardware_file_with_plain_numbers_works(tmp_path):
    hw = tmp_path / "mygpu.json"
    hw.write_text(json.dumps({"mygpu": {"memory_bytes": 48e9, "memory_bandwidth_bytes_per_s": 1e12,
                                        "peak_flops": {"bf16": 200e12}}}))
    row = analyze("llama-2-7b", str(hw)).metrics.iloc[0]
    assert row["napkin_tpot_s"] == pytest.approx((row["weight_bytes"] + row["kv_bytes_per_token"] * 1024) / 1e12)


def test_hardware_without_a_sourced_peak_says_so_instead_of_guessing():
    with pytest.raises(ValueError, match="a10g.*peak"):
        analyze("llama-2-7b", "a10g")


def bundled(name, **changes):
    raw = json.loads(open(load_model.__globals__["MODELS_DIR"] / f"{name}.json").read())
    raw.update(changes)
    return raw


def scout_text(**changes):
    raw = bundled("llama-4-scout")
    raw["text_config"] = {**raw["text_config"], **changes}
    return raw


@pytest.mark.parametrize("raw, field", [
    (bundled("gpt-oss-20b", layer_types=["sliding_attention", "linear_attention"] * 12), r"layer_types\[1\]"),
    (bundled("gpt-oss-20b", layer_types=["sliding_attention"] * 3), "layer_types"),
    (bundled("gpt-oss-20b", num_local_experts=None), "num_local_experts"),
    (bundled("qwen3-30b-a3b", mlp_only_layers=[48]), "mlp_only_layers"),
    (bundled("qwen3-30b-a3b", decoder_sparse_step=0), "decoder_sparse_step"),
    (bundled("gemma-3-27b", text_config=None), "text_config"),
    (bundled("gemma-3-27b", text_config={"model_type": "llama"}), "text_config.model_type"),
    (scout_text(attention_chunk_size=None), "attention_chunk_size"),
    (scout_text(no_rope_layers=[1, 0, 2]), "no_rope_layers"),
    (scout_text(moe_layers=[99]), "moe_layers"),
    (bundled("glm-4.5-air", use_qk_norm="yes"), "use_qk_norm"),
])
def test_bad_fields_of_the_newer_families_name_the_field(raw, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf_config(raw, name="broken")


def test_bad_qk_norm_and_chunk_values_name_the_field():
    config = load_model("llama-4-scout")
    with pytest.raises(ValueError, match="qk_norm"):
        config.with_overrides(qk_norm="layer")
    with pytest.raises(ValueError, match="chunk"):
        config.with_overrides(chunk=0)


def test_an_abbreviated_or_unknown_flag_is_refused_not_guessed(capsys):
    """argparse would read `report --tp 4` as `--tpot 4` (report has no --tp): the command must refuse it."""
    from roofline.cli import main
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--model", "llama-2-7b", "--tp", "4"])
    assert exit_.value.code == 2 and "unrecognized arguments: --tp 4" in capsys.readouterr().err


def test_a_deprecated_flag_beside_a_bad_one_is_still_one_line(capsys):
    """Hypothesis's draw call=('crossovers', ['--model', '--calibration'], ['', 'ideal']): the deprecation note
    waits for the command to succeed; a refused command answers with its one error line."""
    from roofline.cli import main
    assert main(["crossovers", "--model", "", "--calibration", "ideal"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: model:" in err[0]
    assert main(["crossovers", "--model", "llama-2-7b", "--calibration", "ideal"]) == 0
    assert "note: --calibration is deprecated" in capsys.readouterr().err
