"""Fuzzing the files a user hands in (issue 15): bundled config.json and hardware entries with one or more
fields replaced by a wrong type, a missing value, zero, a negative, a huge number or NaN. Loading one is
either a model/device or one ValueError naming the field; nothing else may escape (the CLI turns that
ValueError into exit code 2). 2000+ examples in the default run, 20000+ under `-m slow`."""
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roofline import analyze, sweep
from roofline.cli import main
from roofline.config import MODELS_DIR, ModelConfig, bundled_models
from roofline.hardware import HARDWARE_FILE, read_hardware_file

BAD_VALUES = st.one_of(
    st.none(), st.booleans(), st.just(0), st.just(-1), st.integers(-10**6, 10**6), st.just(10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.just(float("nan")), st.text(max_size=8),
    st.lists(st.integers(0, 4), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(0, 4), max_size=2),
)
CONFIGS = {name: json.loads((MODELS_DIR / f"{name}.json").read_text()) for name in bundled_models()}
HARDWARE = json.loads(HARDWARE_FILE.read_text())
FAST, SLOW = 1000, 10000  # per test; two tests: 2000 in the default run, 20000 under -m slow


@st.composite
def broken_config(draw):
    raw = dict(CONFIGS[draw(st.sampled_from(sorted(CONFIGS)))])
    for key in draw(st.lists(st.sampled_from(sorted(raw) + ["rope_scaling", "layer_types", "head_dim"]),
                             min_size=1, max_size=3)):
        if draw(st.booleans()) and key in raw:
            del raw[key]
        else:
            raw[key] = draw(BAD_VALUES)
    return raw


@st.composite
def broken_hardware(draw):
    hw_id = draw(st.sampled_from(sorted(HARDWARE)))
    entry = json.loads(json.dumps(HARDWARE[hw_id]))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["memory_bytes", "memory_bandwidth_bytes_per_s", "peak_flops", "interconnect",
                                      "name", "peak_flops.bf16", "interconnect.bytes_per_s", "interconnect.latency_s",
                                      "memory_bytes.value"]))
        outer, _, inner = where.partition(".")
        value = draw(BAD_VALUES)
        if inner and isinstance(entry.get(outer), dict):
            entry[outer] = {**entry[outer], inner: value}
        else:
            entry[outer] = value
    return {hw_id: entry}


def _load_config(raw):
    try:
        return ModelConfig.from_hf_config(raw, name="fuzzed.json")
    except ValueError as err:
        assert "fuzzed.json" in str(err) or "model 'fuzzed.json'" in str(err), err
        return None


def _check_config(raw):
    config = _load_config(json.loads(json.dumps(raw, allow_nan=True)))
    if config is not None:  # accepted: its dimensions are the positive integers the cost model needs
        assert all(isinstance(getattr(config, f), int) and getattr(config, f) > 0
                   for f in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size"))


def _check_hardware(raw, tmp_path_factory):
    path = tmp_path_factory.mktemp("hw") / "gpu.json"
    path.write_text(json.dumps(raw, allow_nan=True))
    try:
        (device,) = read_hardware_file(path).values()
    except ValueError as err:
        assert str(path) in str(err), err
        return
    assert device.memory_bytes > 0 and math.isfinite(device.memory_bandwidth) and device.memory_bandwidth > 0
    assert all(v > 0 and math.isfinite(v) for v in device.peak_flops.values())


@settings(max_examples=FAST, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_config())
def test_a_malformed_config_is_a_model_or_one_value_error(raw):
    _check_config(raw)


@settings(max_examples=FAST, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(broken_hardware())
def test_a_malformed_hardware_file_is_a_device_or_one_value_error(tmp_path_factory, raw):
    _check_hardware(raw, tmp_path_factory)


@pytest.mark.slow
@settings(max_examples=SLOW, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_config())
def test_many_malformed_configs(raw):
    _check_config(raw)


@pytest.mark.slow
@settings(max_examples=SLOW, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(broken_hardware())
def test_many_malformed_hardware_files(tmp_path_factory, raw):
    _check_hardware(raw, tmp_path_factory)


@st.composite
def architecture(draw):
    heads = draw(st.sampled_from([1, 2, 4, 8, 16]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4, 8, 16) if heads % k == 0]))
    raw = {"model_type": "llama", "hidden_size": heads * draw(st.sampled_from([16, 64, 128])),
           "num_hidden_layers": draw(st.integers(1, 8)), "num_attention_heads": heads, "num_key_value_heads": kv,
           "intermediate_size": draw(st.integers(1, 4096)), "vocab_size": draw(st.integers(2, 10**5)),
           "max_position_embeddings": 1 << 20}
    if draw(st.booleans()):
        raw.update(model_type="mixtral", num_local_experts=8, num_experts_per_tok=draw(st.integers(1, 8)))
    return raw


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(architecture(), st.integers(1, 512), st.integers(1, 65536), st.integers(1, 4096))
def test_a_valid_random_architecture_gives_finite_non_negative_numbers(raw, batch, prompt, gen):
    config = ModelConfig.from_hf_config(raw, name="random")
    metrics = analyze(config, "h100-sxm", batch=[batch], prompt=prompt, gen=gen).metrics
    grid = sweep(config, "h100-sxm", batch=[1, batch], context=[1, prompt], gen=[gen])
    for frame in (metrics, grid):
        numbers = frame.select_dtypes("number").to_numpy(dtype=float)
        assert np.all(np.isfinite(numbers)) and np.all(numbers >= 0)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(broken_config(), broken_hardware())
def test_the_cli_answers_a_malformed_file_with_exit_2_and_one_line(tmp_path_factory, capsys, raw, hardware):
    folder = tmp_path_factory.mktemp("cli")
    (folder / "config.json").write_text(json.dumps(raw, allow_nan=True))
    (folder / "gpu.json").write_text(json.dumps(hardware, allow_nan=True))
    for args in (["--model", str(folder / "config.json")], ["--hardware", str(folder / "gpu.json")]):
        capsys.readouterr()
        code = main(["analyze", "--batch", "1", "--prompt", "16", "--gen", "1", *args])
        err = capsys.readouterr().err
        assert code in (0, 2) and (code == 0 or (err.count("\n") == 1 and "error:" in err)), (code, err)
