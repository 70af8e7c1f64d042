"""Engine profiles as files: the harness fits are profiles too, and a bad file or row is one line naming it."""
import csv
import dataclasses

import pytest
import yaml

import roofline
from roofline import engine as engines
from roofline.cli import main
from roofline.engine import Engine, load_engine, transfer_profile
from roofline.hardware import DATA_DIR, load_hardware

GOOD = load_engine("gpt-fast").as_document()
with open(DATA_DIR / "published" / "calibration.csv", newline="") as handle:
    PUBLISHED = list(csv.DictReader(handle))


def write_rows(path, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(PUBLISHED[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write(path, document):
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def refusal(capsys, argv) -> str:
    """The CLI's refusal of argv: exit 2 and one line on stderr."""
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


@pytest.mark.parametrize("change, named", [
    ({"quantized_efficiency": "x"}, "quantized_efficiency must be a mapping"),
    ({"quantized_efficiency": {"int4": "x"}}, "quantized_efficiency.int4 must be a number"),
    ({"launch_overhead_s": 1e-6}, "unknown keys ['launch_overhead_s']"),
    ({"layer_overhead_s": {"value": 1e-6, "note": "typo"}}, "layer_overhead_s has unknown keys ['note']"),
    ({"layer_overhead_s": 1e300}, "layer_overhead_s = 1e+300 is out of its physical range: it must be in [0, 0.01] s"),
    ({"request_overhead_s": -1.0}, "request_overhead_s = -1.0 is out of its physical range"),
    ({"allreduce_latency_s": 5.0}, "allreduce_latency_s = 5.0 is out of its physical range"),
    ({"allreduce_doubling_s": -1e-6}, "allreduce_doubling_s = -1e-06 is out of its physical range"),
    ({"hardware": "tpu-v9"}, "hardware 'tpu-v9' is not a bundled device"),
])
def test_a_bad_engine_file_is_one_line_naming_the_file_and_the_field(tmp_path, capsys, change, named):
    path = write(tmp_path / "bad.yaml", {**GOOD, **change})
    line = refusal(capsys, ["analyze", "--engine", str(path)])
    assert named in line and str(path) in line


def test_a_profile_without_a_name_is_named_by_its_file_stem(tmp_path):
    path = write(tmp_path / "mine.yaml", {k: v for k, v in GOOD.items() if k != "name"})
    assert load_engine(str(path)).name == "mine"


@pytest.mark.parametrize("column, value, named", [
    ("value", "0", "column 'value' = '0.0' must be a number in (0, 1e+07]"),
    ("value", "-35", "column 'value' = '-35.0' must be a number in (0, 1e+07]"),
    ("value", "1e300", "must be a number in (0, 1e+07]"),
    ("batch", "0", "column 'batch' = '0' must be a whole number in [1, 1e+06]"),
    ("batch", "1e300", "column 'batch' = '1e300' must be a whole number"),
    ("num_gpus", "1.5", "column 'num_gpus' = '1.5' must be a whole number"),
])
def test_fit_engine_refuses_an_unphysical_published_row_naming_its_line(tmp_path, capsys, column, value, named):
    row = next(r for r in PUBLISHED if r["framework"].startswith("llama.cpp"))
    path = write_rows(tmp_path / "rows.csv", [{**row, column: value}])
    line = refusal(capsys, ["fit-engine", str(path), "--engine", "llama.cpp"])
    assert named in line and "line 2" in line and str(path) in line


def test_accuracy_refuses_a_plot_it_cannot_write_before_computing(capsys):
    line = refusal(capsys, ["accuracy", "--plot", "/proc/nope/x.png"])
    assert "--plot '/proc/nope/x.png': cannot write there" in line


def test_accuracy_scores_the_engines_with_rows_and_names_those_without(tmp_path, capsys):
    path = write_rows(tmp_path / "llama.csv", [r for r in PUBLISHED if r["framework"].startswith("llama.cpp")])
    assert main(["accuracy", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    assert list(yaml.safe_load(captured.out)) == ["llama.cpp"]
    assert "no rows" in captured.err and "gpt-fast" in captured.err and "tensorrt-llm" in captured.err


@pytest.mark.parametrize("name, hardware, source", [("harness", "h100-sxm", "cuda-h100-fused.csv"),
                                                    ("harness-cpu", "measured", "cpu-amd-epyc-2-threads.csv")])
def test_each_harness_fit_is_a_profile_that_names_its_device_and_measurements(name, hardware, source):
    profile = load_engine(name)
    assert profile.hardware == hardware and profile.harness_fit["sources"] == [source]
    assert (DATA_DIR / "measurements" / source).is_file()
    for phase in ("decode", "prefill"):  # what `roofline fit` held out, kept with the profile
        assert profile.harness_fit[phase]["heldout_median_abs_err"] < 0.10


def test_the_committed_h100_harness_profile_is_what_roofline_fit_writes(tmp_path):
    out = tmp_path / "harness.yaml"
    assert main(["fit", str(DATA_DIR / "measurements" / "cuda-h100-fused.csv"), "--out", str(out), "--no-plots"]) == 0
    fresh, committed = load_engine(str(out)), load_engine("harness")
    for name, value in committed.parameters().items():
        assert fresh.parameters()[name] == (value if value is None else pytest.approx(value, rel=1e-6)), name


def test_values_copied_from_the_harness_profile_match_it():
    """gpt-fast and TensorRT-LLM take the GEMM and attention efficiencies their rows cannot pin from the H100
    harness: a refit of the harness must carry into them (to the two digits they keep)."""
    from roofline import kernel_roofs
    harness = load_engine("harness")
    # on kernel roofs a copied value is a factor over the device's kernel roof (the A100's: the H100's fractions)
    curves = {"flops_efficiency": "gemm", "attention_bandwidth_efficiency": "decode_attention",
              "attention_flops_efficiency": "prefill_attention", "bandwidth_efficiency": "weight_stream"}
    a100 = load_hardware("a100-80gb")
    copied = 0
    for name in engines.known_engines():
        profile = load_engine(name)
        for parameter, note in profile.pinned_by.items():
            if str(note).startswith("data/engines/harness.yaml"):
                roof = kernel_roofs.curve(a100, curves[parameter], "bf16")() if profile.roofs == "kernel" else 1.0
                assert getattr(profile, parameter) * roof == pytest.approx(getattr(harness, parameter), abs=0.005), \
                    (name, parameter)
                copied += 1
    assert copied >= 4


@pytest.mark.parametrize("phase, field", [("decode", "attention_bandwidth_efficiency"),  # reads the cache
                                           ("prefill", "attention_flops_efficiency")])  # S x S products
def test_attention_efficiencies_slow_the_attention_ops_alone(phase, field):
    kwargs = dict(model="llama-2-7b", hardware="h100-sxm", batch=[8], prompt=3968)  # + 128 generated: the window
    ideal = roofline.analyze(**kwargs).op_table(8, 3968).set_index(["phase", "op"])["time_s"]
    slow = roofline.analyze(**kwargs, engine=Engine("half", **{field: 0.5})).op_table(8, 3968)
    ratio = (slow.set_index(["phase", "op"])["time_s"] / ideal).xs(phase)
    attention = ratio.index.str.endswith("attention")
    assert attention.any()
    assert list(ratio[attention]) == pytest.approx([2.0] * attention.sum())  # the binding roof halved
    assert list(ratio[~attention]) == pytest.approx([1.0] * (~attention).sum())


def test_the_transfer_profile_is_a_harness_fit_of_the_same_device_that_never_saw_the_file(monkeypatch):
    dev = dataclasses.replace(Engine("dev", bandwidth_efficiency=0.9), hardware="measured",
                              harness_fit={"device_name": "EPYC (2 threads)", "sources": ["dense.csv"]})
    monkeypatch.setattr(engines, "harness_profiles", lambda: {"dev": dev, "gpt-fast": load_engine("gpt-fast")})
    assert transfer_profile("EPYC (2 threads)", "moe.csv") is dev
    assert transfer_profile("EPYC (2 threads)", "dense.csv") is None  # its own data: fitted, not scored
    assert transfer_profile("H100", "moe.csv") is None  # another device


def test_the_bundled_harness_profiles_are_found_as_such():
    assert set(engines.harness_profiles()) == {"harness", "harness-cpu"}
