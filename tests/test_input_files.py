"""Files a user hands in (issue 15): every bad one is one ValueError naming the file, the field and the fix;
the CLI turns it into exit code 2 and one line on stderr, never a traceback."""
import json

import pytest

from roofline import analyze, load_hardware, load_model
from roofline.cli import main
from roofline.models.config import MODELS_DIR


def model_file(tmp_path, base: str, **changes):
    raw = json.loads((MODELS_DIR / f"{base}.json").read_text())
    raw.update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return path


def hardware_file(tmp_path, raw):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(raw))
    return path


GOOD_GPU = {"memory_bytes": 8e10, "memory_bandwidth_bytes_per_s": 3.35e12, "peak_flops": {"bf16": 9.89e14}}


@pytest.mark.parametrize("base, changes, field, found", [
    ("deepseek-v2-lite", {"moe_layer_freq": 0}, "moe_layer_freq", "0"),  # was ZeroDivisionError
    ("deepseek-v2-lite", {"first_k_dense_replace": "3"}, "first_k_dense_replace", "'3'"),  # was TypeError
    ("deepseek-v2-lite", {"n_routed_experts": -4}, "n_routed_experts", "-4"),
    ("mistral-7b-v0.1", {"sliding_window": "abc"}, "sliding_window", "'abc'"),  # was "invalid literal for int()"
    ("mistral-7b-v0.1", {"sliding_window": 0.5}, "sliding_window", "0.5"),
    ("qwen2.5-7b", {"max_window_layers": "x", "use_sliding_window": True, "sliding_window": 4096},
     "max_window_layers", "'x'"),
    ("llama-3.1-8b", {"rope_scaling": "llama3"}, "rope_scaling", "'llama3'"),
    ("llama-2-7b", {"tie_word_embeddings": "no"}, "tie_word_embeddings", "'no'"),
    ("gemma-2-9b", {"layer_types": 7}, "layer_types", "7"),
    ("mixtral-8x7b", {"num_hidden_layers": 10**30}, "num_hidden_layers", str(10**30)),  # found by the slow fuzz
])
def test_a_bad_config_field_names_the_file_the_field_what_was_found_and_the_fix(tmp_path, base, changes, field, found):
    path = model_file(tmp_path, base, **changes)
    with pytest.raises(ValueError) as err:
        load_model(str(path))
    message = str(err.value)
    assert str(path) in message and repr(field) in message and f"got {found}" in message and "fix:" in message


@pytest.mark.parametrize("raw, field", [
    ({"x1": {**GOOD_GPU, "interconnect": "nvlink"}}, "interconnect"),  # was AttributeError
    ({"x1": {**GOOD_GPU, "peak_flops": [1e14]}}, "peak_flops"),  # was AttributeError
    ({"x1": {**GOOD_GPU, "peak_flops": {"bf16": "fast"}}}, "peak_flops.bf16"),
    ({"x1": {**GOOD_GPU, "interconnect": {"bytes_per_s": "450 GB/s"}}}, "interconnect.bytes_per_s"),
    ({"x1": {**GOOD_GPU, "memory_bytes": True}}, "memory_bytes"),
    ({"x1": {**GOOD_GPU, "memory_bytes": float("inf")}}, "memory_bytes"),
    (GOOD_GPU, "not under a hardware id"),  # fields at the top level: the file is not keyed by an id
    ({"x1": "h100"}, "key the file by a hardware id"),  # was "entry must be an object, got str"
])
def test_a_bad_hardware_file_names_the_file_the_field_and_the_fix(tmp_path, raw, field):
    path = hardware_file(tmp_path, raw)
    with pytest.raises(ValueError) as err:
        load_hardware(str(path))
    message = str(err.value)
    assert str(path) in message and field in message and "fix:" in message, message


def test_a_hugging_face_snapshot_directory_is_a_model(tmp_path):
    snapshot = tmp_path / "models--meta-llama--Llama-2-7b-hf" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((MODELS_DIR / "llama-2-7b.json").read_text())
    config = load_model(str(snapshot))
    assert config.source_hash == load_model("llama-2-7b").source_hash and config.name == str(snapshot)


def test_a_directory_without_config_json_says_what_is_expected(tmp_path):
    with pytest.raises(ValueError, match="holds no config.json; fix: pass a Hugging Face snapshot directory"):
        load_model(str(tmp_path))


@pytest.mark.parametrize("flag, make", [
    ("--model", lambda tmp: model_file(tmp, "deepseek-v3", moe_layer_freq=0)),
    ("--model", lambda tmp: model_file(tmp, "deepseek-v3", first_k_dense_replace="3")),
    ("--hardware", lambda tmp: hardware_file(tmp, {"x1": {**GOOD_GPU, "interconnect": "nvlink"}})),
    ("--hardware", lambda tmp: hardware_file(tmp, {"x1": {**GOOD_GPU, "peak_flops": [1e14]}})),
])
@pytest.mark.parametrize("command", ["analyze", "crossovers", "speculate"])
def test_the_cli_turns_a_bad_file_into_exit_2_and_one_line(capsys, tmp_path, flag, make, command):
    path = make(tmp_path)
    assert main([command, flag, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "fix:" in err and "Traceback" not in err, err


def test_sizes_no_model_has_are_refused_not_overflowed(tmp_path):
    path = model_file(tmp_path, "mixtral-8x7b", num_local_experts=1 << 20, intermediate_size=1 << 24,
                      hidden_size=1 << 24)
    with pytest.raises(ValueError, match="parameters; fix: check hidden_size"):
        analyze(str(path), "h100-sxm")
    with pytest.raises(ValueError, match="hidden_size.*up to"):
        load_model(str(model_file(tmp_path, "llama-2-7b", hidden_size=1 << 30)))
    with pytest.raises(ValueError, match="memory_bytes: expected a positive number \\(SI units, up to 1e\\+18\\)"):
        load_hardware(str(hardware_file(tmp_path, {"x1": {**GOOD_GPU, "memory_bytes": 1e30}})))
