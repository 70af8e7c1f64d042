"""Fuzzing the files a user hands in (issue 15): bundled config.json and hardware entries with one or more
fields replaced by a wrong type, a missing value, zero, a negative, a huge number or NaN. Loading one is
either a model/device or one ValueError naming the field; nothing else may escape (the CLI turns that
ValueError into exit code 2). 2000+ examples in the default run, 20000+ under `-m slow`."""
import contextlib
import json
import math
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from roofline import analyze, sweep
from roofline.cli import main
from roofline.models.config import MODELS_DIR, ModelConfig, bundled_models
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


# --- issue 21: the whole CLI, in-process ----------------------------------------------------------------------
# Every subcommand but validate, fit and accuracy's flags (a real torch decode; seconds of fitting a run) with one to three of
# its flags given a value from BAD_TEXT, and every file kind the tool reads, mutated. The run is an answer
# (exit 0 or plan's 1) without NaN in what it prints, or exit 2 with one line that names the flag or the file.
ROOT = MODELS_DIR.parent
BAD_TEXT = st.one_of(
    st.sampled_from(["", " ", "0", "-1", "1", "2", "3", "1.5", "0.5", "inf", "-inf", "nan", "1e300", "1e-300", "abc",
                     "1,1", ",", "1,,2", "bf16", "bf16,bf16", "int4", "fp8", "mxfp4", "q4_0", "none", "all", "p90",
                     "100", "9" * 30, "✓", "/proc/nope", "/nonexistent/x.json", "ideal", "h100-sxm", "a10g",
                     "llama-2-7b", "deepseek-v2-lite", "gpt-oss-20b", "nobody/missing", "absorbed", "naive",
                     "eager", "napkin", "static", "contiguous", "0x10", "1_000", "+3", "2.", "-0", "1e3"]),
    st.integers(-3, 70).map(str))
FAST_BASE = {  # small sizes, so that an accepted value costs milliseconds
    "analyze": ["--model", "llama-2-7b", "--batch", "1", "--prompt", "16", "--gen", "2"],
    "speculate": ["--model", "llama-2-13b", "--draft", "0.1", "--prompt", "16"],
    "crossovers": ["--model", "llama-2-7b", "--prompt", "16", "--gen", "2"],
    "simulate": ["--model", "llama-2-7b", "--requests", "20", "--prompt-mean", "16", "--output-mean", "4"],
    "parallel": ["--model", "llama-2-7b", "--prompt", "16", "--gen", "2", "--batch", "1"],
    "plan": ["--model", "llama-2-7b", "--hardware", "h100-sxm", "--tp", "1", "--weights", "bf16", "--prompt", "16",
             "--gen", "4"],
    "report": ["--model", "llama-2-7b", "--no-plots", "--format", "md", "--batch", "1", "--prompt", "16", "--gen", "2"],
    "accuracy": ["--engine", "gpt-fast"],
    "fit-engine": ["--engine", "gpt-fast"],
}
FLAGS = {  # each command's value flags (from its parser), without the ones that only switch
    "analyze": ["--model", "--hardware", "--batch", "--prompt", "--gen", "--weights", "--experts", "--kv", "--act",
                "--kv-heads", "--method", "--attention", "--mla-form", "--cla", "--calibration", "--engine", "--tp",
                "--replicas", "--prefill-chunk"],
    "speculate": ["--model", "--hardware", "--prompt", "--weights", "--experts", "--kv", "--act", "--calibration",
                  "--engine", "--draft", "--gamma", "--alpha", "--batch", "--tp"],
    "crossovers": ["--model", "--hardware", "--prompt", "--weights", "--kv", "--act", "--calibration", "--engine",
                   "--gen", "--batch", "--tp", "--prefill-chunk"],
    "simulate": ["--model", "--hardware", "--weights", "--kv", "--act", "--engine", "--rate", "--requests", "--policy",
                 "--block-size", "--prompt-mean", "--output-mean", "--max-batch", "--chunk", "--seed", "--tp"],
    "parallel": ["--model", "--hardware", "--prompt", "--weights", "--experts", "--kv", "--act", "--engine", "--gen",
                 "--batch", "--tp", "--pp", "--ep", "--microbatches"],
    "plan": ["--model", "--rate", "--prompt", "--gen", "--ttft", "--tpot", "--e2e", "--percentile", "--hardware", "--tp",
             "--pp", "--ep", "--weights", "--kv", "--experts", "--engine", "--max-batch", "--prefill-chunk",
             "--max-gpus", "--prices", "--frontier", "--requests", "--top"],
    "report": ["--model", "--hardware", "--batch", "--prompt", "--gen", "--weights", "--kv", "--experts", "--engine",
               "--format", "--rate", "--ttft", "--tpot", "--e2e", "--out"],
    # accuracy: in the file fuzz only. A bad --engine there scores every bundled engine (10-30 s a run), and
    # --plot to a bad path fails after computing (issue 21, section 2: the engine work's fix).
    "fit-engine": ["--engine"],
}
# The command list weights the cheap commands: report costs a second when its flags are accepted.
COMMANDS = sorted(set(FLAGS) - {"report"}) * 3 + ["report"]
NAN_WORD = re.compile(r"\bnan\b", re.IGNORECASE)


def _run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse: a flag without its value
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _check_answer(argv, code, out, err, named) -> None:
    """Exit 0 (plan: 1, nothing feasible) with no NaN printed, or exit 2 with one line naming a flag or file."""
    assert code in (0, 1, 2), (argv, code, err)
    if code in (0, 1):
        assert not NAN_WORD.search(out), (argv, out[-2000:])
        return
    lines = err.strip().splitlines()
    if lines and lines[0].startswith("usage:"):  # argparse's own refusal: usage, then the one error line
        lines = lines[-1:]
    assert len(lines) == 1 and "error:" in lines[0], (argv, err)
    assert any(n in lines[0] or n.lstrip("-") in lines[0] for n in named), (argv, named, lines[0])


@contextlib.contextmanager
def _inside(folder):
    """Run in a scratch folder (a fuzzed --out writes there, never in the checkout), offline."""
    here, offline = os.getcwd(), os.environ.get("HF_HUB_OFFLINE")
    os.chdir(folder)
    os.environ["HF_HUB_OFFLINE"] = "1"  # a hub id ('nobody/missing') is refused from the cache, not the network
    try:
        yield
    finally:
        os.chdir(here)
        if offline is None:
            del os.environ["HF_HUB_OFFLINE"]
        else:
            os.environ["HF_HUB_OFFLINE"] = offline


@st.composite
def cli_call(draw):
    command = draw(st.sampled_from(COMMANDS))
    flags = draw(st.lists(st.sampled_from(FLAGS[command]), min_size=1, max_size=3, unique=True))
    values = [draw(BAD_TEXT) for _ in flags]
    return command, flags, values


def _check_cli_call(call, folder, capsys) -> None:
    command, flags, values = call
    argv = [command, *FAST_BASE[command], *(f"{f}={v}" for f, v in zip(flags, values))]
    if command == "report" and "--out" not in flags:
        argv += ["--out", str(folder / "report")]
    with _inside(folder):
        code, out, err = _run_cli(argv, capsys)
    _check_answer(argv, code, out, err, named=FLAGS[command] + [v for v in values if v.strip()])


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(cli_call())
@example(("analyze", ["--replicas"], ["999999999999999999999999999999"]))  # found once: an int64 overflow, not exit 2
def test_every_subcommand_answers_a_bad_flag_value_in_one_line_naming_it(tmp_path_factory, capsys, call):
    _check_cli_call(call, tmp_path_factory.mktemp("cli"), capsys)


@pytest.mark.slow
@settings(max_examples=6000, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(cli_call())
def test_many_bad_flag_values(tmp_path_factory, capsys, call):
    _check_cli_call(call, tmp_path_factory.mktemp("cli"), capsys)


# Each file kind: a real file, the flag that reads it, and the command around it.
FILE_KINDS = {
    "engine": (ROOT / "engines" / "gpt-fast.yaml", lambda p: ["analyze", *FAST_BASE["analyze"], "--engine", p]),
    "harness fit": (ROOT / "engines" / "harness-cpu.yaml",
                    lambda p: ["analyze", *FAST_BASE["analyze"], "--hardware", "cpu", "--engine", p]),
    "prices": (ROOT / "prices.yaml", lambda p: ["plan", *FAST_BASE["plan"], "--prices", p]),
    "workload": (None, lambda p: ["plan", *FAST_BASE["plan"], "--prompt", f"csv:{p}"]),
    "published": (ROOT / "published" / "calibration.csv", lambda p: ["accuracy", p, "--engine", "gpt-fast"]),
    "published-fit": (ROOT / "published" / "calibration.csv", lambda p: ["fit-engine", p, "--engine", "gpt-fast"]),
    "measurements": (ROOT / "measurements" / "cpu-amd-epyc-2-threads.csv",
                     lambda p: ["report", *FAST_BASE["report"], "--hardware", "cpu", "--measurements", p]),
}
WORKLOAD_CSV = "prompt_tokens,output_tokens\n512,128\n1024,64\n90,300\n"
# The measurements (report, a second a run) are drawn a third as often as the rest.
ENGINE_KINDS = ("engine", "published", "published-fit")
MINE = ("harness fit", "prices", "workload") * 3 + ("measurements",)


@st.composite
def mutated_file(draw, kinds):
    """A real file of one kind with a line dropped, a value or cell replaced, the header alone, or garbage."""
    kind = draw(st.sampled_from(kinds))
    source = FILE_KINDS[kind][0]
    lines = (WORKLOAD_CSV if source is None else source.read_text()).splitlines()
    how = draw(st.sampled_from(["value", "value", "value", "cell", "cell", "drop", "header", "garbage"]))
    if how == "garbage":
        return kind, draw(st.sampled_from(["", "\x00\xff", "[" * 5000, "{", "a: [", "- 1\n- 2", "null", "\t"]))
    if how == "header":
        return kind, lines[0] + "\n"
    index = draw(st.integers(0, len(lines) - 1))
    line, bad = lines[index], draw(BAD_TEXT)
    if how == "drop":
        lines.pop(index)
    elif how == "value" and ":" in line:
        key = line.partition(":")[0]
        lines[index] = f"{key}: {bad}"
    else:  # a CSV cell (or a whole YAML line)
        cells = line.split(",")
        cells[draw(st.integers(0, len(cells) - 1))] = bad
        lines[index] = ",".join(cells)
    return kind, "\n".join(lines) + "\n"


def _check_file(sample, folder, capsys) -> None:
    kind, text = sample
    suffix = ".csv" if kind in ("workload", "published", "published-fit", "measurements") else ".yaml"
    path = folder / f"fuzzed-{kind}{suffix}"
    path.write_text(text, errors="surrogateescape")
    argv = FILE_KINDS[kind][1](str(path))
    if argv[0] == "report":
        argv += ["--out", str(folder / "report")]
    with _inside(folder):
        code, out, err = _run_cli(argv, capsys)
    _check_answer(argv, code, out, err, named=[str(path)])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(mutated_file(MINE))
def test_every_file_kind_when_malformed_is_an_answer_or_one_line_naming_the_file(tmp_path_factory, capsys, sample):
    _check_file(sample, tmp_path_factory.mktemp("files"), capsys)


@pytest.mark.slow
@settings(max_examples=4000, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(mutated_file(MINE))
def test_many_malformed_files(tmp_path_factory, capsys, sample):
    _check_file(sample, tmp_path_factory.mktemp("files"), capsys)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(mutated_file(ENGINE_KINDS))
def test_engine_and_published_files_when_malformed_are_an_answer_or_one_line(tmp_path_factory, capsys, sample):
    _check_file(sample, tmp_path_factory.mktemp("files"), capsys)
