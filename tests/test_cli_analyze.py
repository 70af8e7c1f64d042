"""`roofline analyze`: the JSON contract, the lecture's napkin figures through the CLI, and bad input."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from roofline import METRIC_DEFINITIONS, Precision, analyze
from roofline.cli import main
from roofline.cli.analyze import parse_batches

CONTRACT_KEYS = (
    "batch", "prompt_len", "gen_len", "params", "weight_bytes", "kv_bytes_per_token", "kv_bytes", "memory_bytes",
    "fits", "max_batch", "prefill_flops", "prefill_bytes", "ttft_s", "decode_flops", "decode_bytes", "tpot_s",
    "tokens_per_s", "e2e_s", "decode_bound", "napkin_tpot_s", "roofline_tpot_s", "model", "hardware", "method",
    "calibration", "tpot_definition",
)
LECTURE = {  # CS336 lecture 10, Llama-2-13B on an H100, S = 1024: batch -> (napkin latency s, tokens/s, memory B)
    1: (8.02e-3, 124.7, 26.87e9),
    64: (23.8e-3, 2689, 79.7e9),
    256: (71.9e-3, 3562, 240.8e9),
}
REPO = Path(__file__).resolve().parent.parent


def _strict_json(text: str):
    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


def run_json(capsys, *args) -> list[dict]:
    assert main(["analyze", "--json", *args]) == 0
    return _strict_json(capsys.readouterr().out)


def test_json_has_every_contract_key_with_finite_numbers_for_every_batch(capsys):
    rows = run_json(capsys, "--batch", "1,16,64")
    assert [row["batch"] for row in rows] == [1, 16, 64]
    for row in rows:
        assert set(CONTRACT_KEYS) <= set(row)
        for key in CONTRACT_KEYS:
            value = row[key]
            assert isinstance(value, (int, float, bool, str)), key
            if isinstance(value, float):
                assert math.isfinite(value), key
        assert (row["model"], row["hardware"], row["method"], row["calibration"]) == (
            "llama-2-13b", "h100-sxm", "roofline", "ideal")
        assert row["tpot_definition"] == METRIC_DEFINITIONS["tpot_s"]


def test_json_decode_figures_are_the_librarys_analysis_values(capsys):
    rows = run_json(capsys, "--batch", "1,64", "--prompt", "2048", "--gen", "64", "--kv", "fp8")
    expected = analyze("llama-2-13b", "h100-sxm", batch=[1, 64], prompt=2048, gen=64,
                       precision=Precision(kv="fp8")).records()
    for row, want in zip(rows, expected, strict=True):
        for key in ("decode_flops", "decode_bytes", "decode_bound", "tpot_s", "tokens_per_s", "kv_bytes", "ttft_s"):
            assert row[key] == want[key], key
        assert row["roofline_tpot_s"] == want["tpot_s"]
        assert row["napkin_tpot_s"] == want["napkin_tpot_s"]


def test_napkin_method_reproduces_the_lecture_latency_throughput_and_memory(capsys):
    rows = run_json(capsys, "--method", "napkin", "--batch", "1,64,256", "--prompt", "1024")
    for row in rows:
        latency, throughput, memory = LECTURE[row["batch"]]
        assert row["method"] == "napkin"
        assert row["tpot_s"] == row["napkin_tpot_s"] == pytest.approx(latency, rel=5e-3)
        assert row["tokens_per_s"] == pytest.approx(throughput, rel=5e-3)
        # The lecture's memory is weights + KV at the prompt; the JSON's kv_bytes is at prompt + gen.
        napkin_memory = row["weight_bytes"] + row["kv_bytes_per_token"] * row["batch"] * row["prompt_len"]
        assert napkin_memory == pytest.approx(memory, rel=5e-3)
        assert row["roofline_tpot_s"] != row["tpot_s"]  # the roofline figure stays available alongside
        assert row["tpot_definition"] == METRIC_DEFINITIONS["napkin_tpot_s"]


def test_kv_heads_8_shrinks_the_llama_2_13b_kv_cache_five_fold(capsys):
    full = run_json(capsys, "--batch", "1")[0]
    grouped = run_json(capsys, "--batch", "1", "--kv-heads", "8")[0]
    assert full["kv_bytes_per_token"] == pytest.approx(5 * grouped["kv_bytes_per_token"], rel=1e-12)
    assert grouped["weight_bytes"] < full["weight_bytes"]  # fewer K and V projection weights too


def test_human_table_names_model_hash_hardware_and_units_and_defines_tpot(capsys):
    assert main(["analyze", "--batch", "1,64"]) == 0
    out = capsys.readouterr().out
    config_hash = analyze().config.source_hash
    for text in ("llama-2-13b", config_hash, "h100-sxm", "bf16", "ideal bound", "TPOT", "ms", "GB",
                 "excludes the first token"):
        assert text in out, text
    assert "Traceback" not in out


@pytest.mark.parametrize("args, field", [
    (["--batch", "0"], "--batch"),
    (["--batch", "abc"], "--batch"),
    (["--batch", "1,,64"], "--batch"),
    (["--prompt", "-5"], "--prompt"),
    (["--gen", "many"], "--gen"),
    (["--weights", "bf17"], "--weights"),
    (["--kv", "nf4"], "--kv"),
    (["--model", "no-such-model"], "model"),
    (["--hardware", "no-such-gpu"], "hardware"),
    (["--kv-heads", "7"], "--kv-heads"),
    (["--cla", "3"], "--cla"),
    (["--method", "guess"], "--method"),
    (["--model", "deepseek-v2-lite", "--kv-heads", "8"], "--kv-heads"),
])
def test_bad_input_exits_2_with_one_line_naming_the_field(capsys, args, field):
    assert main(["analyze", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert field in captured.err
    assert captured.err.count("\n") == 1
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("flag", ["--model", "--hardware"])
def test_malformed_json_file_exits_2_naming_the_field(capsys, tmp_path, flag):
    path = tmp_path / "broken.json"
    path.write_text('{"model_type": "llama",')
    assert main(["analyze", flag, str(path)]) == 2
    err = capsys.readouterr().err
    assert flag.lstrip("-") in err and "cannot read JSON" in err
    assert err.count("\n") == 1 and "Traceback" not in err


SLOW_LINK = ("name: slow-link\nbandwidth_efficiency: 0.5\nflops_efficiency: 1.0\nattention_bandwidth_efficiency: 0.5\n"
             "attention_flops_efficiency: 1.0\nlayer_overhead_s: 0.0\nstep_overhead_s: 0.001\nrequest_overhead_s: 0.0\n")


def test_an_engine_file_changes_the_numbers_and_is_named(capsys, tmp_path):
    path = tmp_path / "slow.yaml"
    path.write_text(SLOW_LINK)
    assert main(["analyze", "--batch", "1", "--engine", str(path), "--json"]) == 0
    slow = json.loads(capsys.readouterr().out)[0]
    assert main(["analyze", "--batch", "1", "--json"]) == 0
    ideal = json.loads(capsys.readouterr().out)[0]
    assert slow["engine"] == slow["calibration"] == "slow-link" and ideal["engine"] == ideal["calibration"] == "ideal"
    # Memory-bound at batch 1: half the bandwidth doubles the step, plus the fixed overhead.
    assert slow["tpot_s"] == pytest.approx(2 * ideal["tpot_s"] + 0.001, rel=0.01)


@pytest.mark.parametrize("flag", ["--engine", "--calibration"])  # --calibration: the deprecated alias
def test_a_malformed_engine_file_exits_2_naming_the_field(capsys, tmp_path, flag):
    path = tmp_path / "bad.yaml"
    path.write_text(SLOW_LINK.replace("bandwidth_efficiency: 0.5\nflops", "bandwidth_efficiency: fast\nflops"))
    assert main(["analyze", flag, str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "bandwidth_efficiency must be a number" in err and str(path) in err


@pytest.mark.parametrize("text", ["0", "abc", "", "1,-2", "1.5"])
def test_batch_parsing_raises_value_error_naming_the_flag(text):
    with pytest.raises(ValueError, match="--batch"):
        parse_batches(text)


def test_batch_parsing_accepts_spaces():
    assert parse_batches("1, 64 ,256") == [1, 64, 256]


def test_python_m_roofline_cli_analyze_json_runs_as_a_program():
    done = subprocess.run([sys.executable, "-m", "roofline.cli", "analyze", "--json", "--batch", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    (row,) = _strict_json(done.stdout)
    assert row["batch"] == 1 and row["model"] == "llama-2-13b" and row["tpot_s"] > 0


def test_napkin_throughput_counts_every_replica(capsys):
    one = run_json(capsys, "--method", "napkin", "--batch", "8", "--tp", "2")
    three = run_json(capsys, "--method", "napkin", "--batch", "8", "--tp", "2", "--replicas", "3")
    assert three[0]["tokens_per_s"] == pytest.approx(3 * one[0]["tokens_per_s"], rel=1e-12)
    assert three[0]["tpot_s"] == one[0]["tpot_s"]


def test_roofline_help_prints_every_command_summary_with_its_percent_sign():
    done = subprocess.run([sys.executable, "-m", "roofline.cli", "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert "90% saturation" in " ".join(done.stdout.split()) and "%%" not in done.stdout
    for command in ("analyze", "report", "speculate", "crossovers", "simulate", "parallel", "validate", "fit"):
        assert f"    {command} " in done.stdout
