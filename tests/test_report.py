"""`roofline report`: the lecture's study reproduced, tables equal to the library, HTML self-contained."""
import json
import math
import re
from html.parser import HTMLParser

import pandas as pd
import pytest

from roofline import analyze, bundled_models, load_model
from roofline.cli import main
from roofline.study.report import build_study
from roofline.study.report_whatifs import ACCEPTANCE, draft_model
from roofline.views.render import format_cell, html, markdown, results_frame, results_json
from roofline.serving.speculation import speculate
from roofline.deployment import Deployment

LECTURE = {"model": "llama-2-13b", "hardware": "h100-sxm", "batch": [1, 64, 256], "prompt": 1024, "gen": 128}


@pytest.fixture(scope="module")
def study():
    return build_study()


@pytest.fixture(scope="module")
def default_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    assert main(["report", "--out", str(out)]) == 0
    return out


def md_tables(text: str) -> list[pd.DataFrame]:
    """Every Markdown table of a report as a DataFrame of strings."""
    tables, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            def cells(line):
                return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            header, i = cells(lines[i]), i + 2
            rows = []
            while i < len(lines) and lines[i].startswith("| "):
                rows.append(cells(lines[i]))
                i += 1
            tables.append(pd.DataFrame(rows, columns=header))
        else:
            i += 1
    return tables


def table_with(text: str, header: str) -> pd.DataFrame:
    return next(t for t in md_tables(text) if header in t.columns)


def number(cell: str, unit: str) -> float:
    value, got = cell.split()
    assert got == unit, cell
    return float(value)


def test_default_report_contains_the_lecture_figures(default_report):
    text = (default_report / "report.md").read_text()
    assert "llama-2-13b" in text and "NVIDIA H100" in text
    decode = table_with(text, "TPOT (lecture napkin)").set_index("batch")
    assert round(number(decode.loc["1", "TPOT (lecture napkin)"], "ms"), 1) == 8.0
    assert abs(float(decode.loc["1", "tokens/s (lecture napkin)"]) - 124) < 1.0  # lecture: ~124 tokens/s
    memory = table_with(text, "memory (lecture napkin)").set_index("batch")
    assert number(memory.loc["1", "memory (lecture napkin)"], "GB") == pytest.approx(26.87, abs=0.01)
    assert number(memory.loc["64", "memory (lecture napkin)"], "GB") == pytest.approx(79.7, abs=0.05)
    assert number(memory.loc["256", "memory (lecture napkin)"], "GB") == pytest.approx(240, rel=0.01)
    assert memory.loc["256", "fits (lecture)"] == "no" and memory.loc["256", "fits"] == "no"
    assert memory.loc["1", "fits (lecture)"] == "yes"
    wall = table_with(text, "how it is found").set_index("quantity")
    # chunked prefill; 56 before issue 23 (the datasheet's 80e9 bytes, not the 85.5e9 CUDA shows less 1 GiB)
    assert wall.filter(like="memory wall", axis=0)["value"].iloc[0] == "61"


def test_default_report_writes_every_file(default_report):
    names = {p.name for p in default_report.iterdir()}
    assert {"report.md", "report.html", "results.csv", "results.json"} <= names
    assert {"roofline-h100-sxm.png", "latency-throughput.png", "memory.png", "regime-h100-sxm.png"} <= names
    for name in names:
        if name.endswith(".png"):
            assert (default_report / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_report_states_the_metric_definitions_and_all_seven_sections(study):
    text = markdown(study)
    for section in ("1. Configuration and provenance", "2. The derivation", "3. Prefill and decode across batch",
                    "4. Plots", "5. Crossovers and sensitivities", "6. What-ifs against the baseline",
                    "7. Validation"):
        assert f"## {section}" in text
    assert "excludes the first token" in text and "time to first token" in text and "batch / tpot_s" in text
    assert study.config.source_hash and study.config.source_hash in text
    assert "3.35 TB/s" in text and "datasheet" in text  # hardware numbers with their sources
    assert "No measurements or harness fit for this hardware (h100-sxm)." in text


def test_tables_equal_the_librarys_numbers(study):
    metrics = analyze(**LECTURE).metrics
    text = markdown(study)
    prefill = table_with(text, "TTFT")
    decode = table_with(text, "TPOT (lecture napkin)")
    memory = table_with(text, "memory (lecture napkin)")
    for i, row in metrics.iterrows():
        expected = [
            (prefill, "FLOPs", "prefill_flops", row["prefill_flops"]), (prefill, "TTFT", "ttft_s", row["ttft_s"]),
            (decode, "TPOT (roofline)", "tpot_s", row["tpot_s"]),
            (decode, "tokens/s (roofline)", "tokens_per_s", row["tokens_per_s"]),
            (decode, "TPOT (lecture napkin)", "napkin_tpot_s", row["napkin_tpot_s"]),
            (decode, "bytes moved", "decode_bytes", row["decode_bytes"]),
            (decode, "FLOP/byte", "decode_intensity", row["decode_intensity"]),
            (memory, "memory (roofline)", "memory_bytes", row["memory_bytes"]),
            (memory, "memory (lecture napkin)", "napkin_memory_bytes", row["napkin_memory_bytes"]),
            (memory, "KV at S=P (lecture)", "napkin_kv_bytes", row["napkin_kv_bytes"]),
            (memory, "max batch", "max_batch", row["max_batch"]), (memory, "fits", "fits", row["fits"]),
        ]
        for table, header, column, value in expected:
            assert table[header].iloc[i] == format_cell(column, value), (header, i)
    device = study.devices[0]
    pd.testing.assert_series_equal(device.decode["tpot_s"], metrics["tpot_s"])
    weights = 13_015_864_320 * 2  # bf16; KV: 2 (K, V) x 40 layers x 40 heads x 128 x 2 bytes per token
    assert device.memory["napkin_memory_bytes"].tolist() == [weights + 819_200 * 1024 * b for b in (1, 64, 256)]


def test_results_csv_and_json_hold_the_librarys_numbers(default_report):
    metrics = analyze(**LECTURE).metrics
    csv = pd.read_csv(default_report / "results.csv")
    header = (default_report / "results.csv").read_text().splitlines()[0].split(",")
    assert len(header) == len(set(header))  # the library's napkin columns are not added a second time
    assert list(csv["batch"]) == [1, 64, 256]
    for column in ("tpot_s", "ttft_s", "e2e_s", "memory_bytes", "napkin_tpot_s", "decode_flops"):
        assert csv[column].tolist() == pytest.approx(metrics[column].tolist(), rel=1e-12)
    text = (default_report / "results.json").read_text()
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert json.dumps(data, sort_keys=True, indent=1) + "\n" == text  # keys sorted
    rows = data["devices"][0]["metrics"]
    assert [r["tpot_s"] for r in rows] == pytest.approx(metrics["tpot_s"].tolist(), rel=1e-12)
    assert data["config"]["source_hash"] == load_model("llama-2-13b").source_hash
    assert {"ttft_s", "tpot_s", "tokens_per_s"} <= set(data["definitions"])


class ImageAndLinkCollector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.references, self.tags = [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        for key in ("href", "src"):
            if key in attrs and tag != "img":
                self.references.append(attrs[key])


def test_html_parses_and_references_only_embedded_images(default_report):
    parser = ImageAndLinkCollector()
    parser.feed((default_report / "report.html").read_text())
    parser.close()
    assert parser.images and all(src.startswith("data:image/png;base64,") for src in parser.images)
    assert len(parser.images) == len(list(default_report.glob("*.png")))
    assert parser.references == [] and "script" not in parser.tags and "link" not in parser.tags
    assert "table" in parser.tags


def test_two_runs_give_the_same_files_apart_from_the_timestamp_line(default_report, tmp_path):
    assert main(["report", "--out", str(tmp_path)]) == 0
    for path in default_report.iterdir():
        first, second = path.read_bytes(), (tmp_path / path.name).read_bytes()
        if path.suffix in (".md", ".html"):
            def strip(data):
                return [line for line in data.decode().splitlines() if "Generated " not in line]
            assert strip(first) == strip(second), path.name
            assert sum("Generated " in line for line in first.decode().splitlines()) == 1
        else:
            assert first == second, path.name


def test_every_bundled_model_reports_on_two_hardware_entries():
    for model in bundled_models():
        prompt = min(1024, (load_model(model).max_positions or 1 << 30) - 128)  # GPT-2: 1024 positions in all
        study = build_study(model, ["h100-sxm", "mi300x"], batch=[1, 32], prompt=prompt, plots=False)
        text = markdown(study)
        assert len(re.findall(r"^## ", text, re.M)) == 7 and "Side by side" in text, model
        for device in study.devices:
            expected = analyze(model, device.hardware, batch=[1, 32], prompt=prompt).metrics
            assert device.decode["tpot_s"].tolist() == expected["tpot_s"].tolist(), model
            whatifs = device.whatifs.set_index("scenario")
            assert whatifs.index[0] == "baseline"
            for name, row in whatifs.filter(like="tensor parallelism", axis=0).iterrows():
                assert (row["tpot_s B=1"] > 0) != row["note"].startswith("not applicable"), (model, name)
            speculation = whatifs.loc["speculative decoding"]
            assert speculation["tpot_s B=32"] <= expected["tpot_s"].iloc[1] * (1 + 1e-12), model  # γ = 0 is a choice
            assert ("MTP-style" in speculation["change"]) == (draft_model(load_model(model)) is None), model
        parser = ImageAndLinkCollector()
        parser.feed(html(study))
        assert parser.images == [], model  # no plots asked for
        json.loads(results_json(study))
        assert len(results_frame(study)) == 4


def test_what_ifs_compute_what_the_library_has_and_say_so_for_the_rest(study):
    whatifs = study.devices[0].whatifs.set_index("scenario")
    gqa = analyze(**LECTURE, n_kv_heads=8).metrics
    assert whatifs.loc["GQA", "tpot_s B=256"] == gqa["tpot_s"].iloc[-1]
    assert whatifs.loc["GQA", "kv_bytes_per_token"] == 819_200 * 8 / 40
    assert whatifs.loc["MQA", "kv_bytes_per_token"] == 819_200 / 40
    assert whatifs.loc["int4 weights", "tpot_s B=1"] < whatifs.loc["int8 weights", "tpot_s B=1"] < whatifs.loc[
        "baseline", "tpot_s B=1"]
    assert whatifs.loc["fp8 KV", "kv_bytes_per_token"] == 819_200 / 2
    assert "not applicable" in whatifs.loc["MLA", "note"]
    mla = build_study("deepseek-v2-lite", "h100-sxm", batch=[1], plots=False).devices[0].whatifs.set_index("scenario")
    assert "already uses MLA" in mla.loc["MLA", "note"] and "not applicable" in mla.loc["GQA", "note"]


def test_tensor_parallel_what_if_is_the_librarys_per_gpu_numbers(study):
    tp4 = analyze(**LECTURE, tp=4).metrics
    whatifs = study.devices[0].whatifs.set_index("scenario")
    row = whatifs.loc["tensor parallelism, tp=4"]
    assert row["tpot_s B=64"] == tp4["tpot_s"].iloc[1] and row["tokens_per_s B=256"] == tp4["tokens_per_s"].iloc[-1]
    assert row["per_gpu_memory_bytes B=256"] == tp4["per_gpu_memory_bytes"].iloc[-1]
    assert row["per_gpu_memory_bytes B=256"] < whatifs.loc["baseline", "per_gpu_memory_bytes B=256"] / 3  # sharded
    assert row["comm_s B=256"] == tp4["comm_s"].iloc[-1] > 0 and row["gpus"] == 4
    assert "latency 10.0 µs assumed" in row["note"]  # the h100-sxm entry gives no link latency
    table = table_with(markdown(study), "all-reduce per step, B=256").set_index("scenario")
    shown = table.loc["tensor parallelism, tp=4"]
    assert shown["TPOT (roofline), B=64"] == format_cell("tpot_s", tp4["tpot_s"].iloc[1])
    assert shown["memory per GPU, B=256"] == format_cell("per_gpu_memory_bytes", tp4["per_gpu_memory_bytes"].iloc[-1])
    assert shown["all-reduce per step, B=256"] == format_cell("comm_s", tp4["comm_s"].iloc[-1])
    qwen = build_study("qwen2.5-7b", "h100-sxm", batch=[1], plots=False).devices[0].whatifs.set_index("scenario")
    assert "does not divide the 28 query heads" in qwen.loc["tensor parallelism, tp=8", "note"]


def test_speculative_what_if_is_the_librarys_speculation_at_the_best_lookahead(study):
    draft = load_model("tinyllama-1.1b-chat-v1.0")
    probe = speculate(Deployment.of(study.config, "h100-sxm"), draft, 1, ACCEPTANCE, batch=64, prompt=1024)
    best = speculate(Deployment.of(study.config, "h100-sxm"), draft, probe.best_gamma, ACCEPTANCE, batch=64, prompt=1024)
    whatifs = study.devices[0].whatifs.set_index("scenario")
    row = whatifs.loc["speculative decoding"]
    assert probe.best_gamma >= 1 and row["tpot_s B=64"] == best.tpot_s < whatifs.loc["baseline", "tpot_s B=64"]
    assert f"B=64 γ={probe.best_gamma}" in row["note"] and "α = 0.8" in row["change"] and draft.name in row["change"]
    assert math.isnan(row["per_gpu_memory_bytes B=256"])  # the draft's memory is not counted: no number
    shown = table_with(markdown(study), "all-reduce per step, B=256").set_index("scenario").loc["speculative decoding"]
    assert shown["TPOT (roofline), B=64"] == format_cell("tpot_s", best.tpot_s)


@pytest.mark.parametrize("target, draft", [
    ("llama-3.1-70b", "llama-3.1-8b"), ("llama-2-13b", "tinyllama-1.1b-chat-v1.0"), ("qwen2.5-72b", "qwen2.5-7b"),
    ("mistral-7b-v0.1", None), ("gemma-2-9b", None), ("tinyllama-1.1b-chat-v1.0", None),
])
def test_the_draft_is_the_smallest_bundled_model_of_the_same_family_and_vocabulary(target, draft):
    found = draft_model(load_model(target))  # mistral shares llama-2's vocabulary size but not its family
    assert (found.name if found else None) == draft


def test_crossovers_agree_with_the_sweeps_they_come_from(study):
    crossovers = study.devices[0].crossovers.set_index("quantity")["value"]
    kv_overtakes = crossovers.filter(like="KV reads overtake").iloc[0]
    rows = analyze(**{**LECTURE, "batch": [kv_overtakes - 1, kv_overtakes]}).metrics
    assert rows["decode_bound"].tolist() == ["weight-bandwidth", "kv-bandwidth"]
    assert crossovers.filter(like="critical batch").iloc[0] == pytest.approx(989.4e12 / 3.35e12)
    assert crossovers.filter(like="memory wall").iloc[0] == analyze(**LECTURE).metrics["max_batch"].iloc[0] == 61
    sensitivities = study.devices[0].sensitivities.set_index("input")
    assert sensitivities.loc["memory bandwidth", "tpot_s B=1"] == pytest.approx(-1, abs=0.01)  # bandwidth-bound


def test_several_hardware_values_give_a_side_by_side_comparison(tmp_path):
    assert main(["report", "--out", str(tmp_path), "--hardware", "h100-sxm", "a100-80gb", "--no-plots",
                 "--format", "md"]) == 0
    side = table_with((tmp_path / "report.md").read_text(), "hardware")
    assert side["hardware"].tolist() == ["h100-sxm"] * 3 + ["a100-80gb"] * 3
    assert not (tmp_path / "report.html").exists()
    assert set(pd.read_csv(tmp_path / "results.csv")["hardware"]) == {"h100-sxm", "a100-80gb"}


@pytest.mark.parametrize("argv, message", [
    (["--batch", "0"], "batch"), (["--batch", "1,x"], "batch"), (["--prompt", "-5"], "prompt"),
    (["--hardware", "nope"], "nope"), (["--model", "nope"], "nope"), (["--format", "pdf"], "pdf"),
    (["--weights", "int3"], "int3"), (["--fit", "missing.yaml"], "missing.yaml"),
])
def test_bad_input_is_one_clear_line_and_exit_code_2(tmp_path, capsys, argv, message):
    assert main(["report", "--out", str(tmp_path / "out"), "--no-plots", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("roofline report: error:") and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


CALIBRATION = """name: test-fit
hardware: h100-sxm
bandwidth_efficiency: 0.8
flops_efficiency: 0.7
attention_bandwidth_efficiency: 0.8
attention_flops_efficiency: 0.7
step_overhead_s: 1.0e-5
layer_overhead_s: 2.0e-6
request_overhead_s: 0.0
harness_fit:
  device_name: NVIDIA H100 80GB HBM3
  sources: [measured.csv]
  decode: {n_points: 4, n_heldout: 4, heldout_median_abs_err: 0.05, heldout_p90_abs_err: 0.09,
           insample_median_abs_err: 0.03}
"""
MEASURED = ("model,n_layers,d_model,n_heads,n_kv_heads,head_dim,d_ff,vocab_size,"
            "dtype,phase,batch,context,status,time_s\n"
            "tiny,2,64,4,2,16,128,256,bf16,decode,1,128,ok,2.5e-5\n"
            "tiny,2,64,4,2,16,128,256,bf16,decode,8,128,ok,3.0e-5\n"
            "tiny,2,64,4,2,16,128,256,bf16,decode,64,128,does-not-fit,\n")


def test_validation_section_shows_the_fit_and_measured_against_predicted(tmp_path):
    calibration, measured = tmp_path / "h100.yaml", tmp_path / "measured.csv"
    calibration.write_text(CALIBRATION)
    measured.write_text(MEASURED)
    out = tmp_path / "out"
    assert main(["report", "--out", str(out), "--fit", str(calibration), "--measurements", str(measured)]) == 0
    text = (out / "report.md").read_text()
    section = text[text.index("## 7. Validation"):]
    assert "Fitted parameters" in section and "0.8" in section and "5.0%" in section  # held-out median error
    comparison = table_with(section, "predicted (calibrated)")
    assert len(comparison) == 2  # the point that did not fit is not a measurement
    from roofline import Engine, ModelConfig, Precision
    tiny = ModelConfig(name="tiny", family="llama", d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                       d_ff=128, vocab_size=256)
    fitted = Engine(name="h100", bandwidth_efficiency=0.8, flops_efficiency=0.7, attention_bandwidth_efficiency=0.8,
                    attention_flops_efficiency=0.7, step_overhead_s=1e-5, layer_overhead_s=2e-6)
    predicted = analyze(tiny, "h100-sxm", batch=[1, 8], prompt=128, gen=1, precision=Precision(), engine=fitted)
    assert comparison["predicted (calibrated)"].tolist() == [format_cell("calibrated_s", v)
                                                             for v in predicted.metrics["tpot_s"]]
    assert (out / "measured-vs-predicted-h100-sxm.png").is_file()
    assert "measured-vs-predicted-h100-sxm.png" in json.loads((out / "results.json").read_text())["figures"]


@pytest.mark.parametrize("flag", ["--fit", "--calibration"])  # --calibration: the deprecated alias
def test_a_harness_fit_for_other_hardware_is_refused(tmp_path, capsys, flag):
    calibration = tmp_path / "a100.yaml"
    calibration.write_text(CALIBRATION.replace("h100-sxm", "a100-80gb"))
    assert main(["report", "--out", str(tmp_path / "out"), "--no-plots", flag, str(calibration)]) == 2
    assert "--hardware a100-80gb" in capsys.readouterr().err


def test_bundled_harness_fits_are_found_for_their_own_hardware_only(tmp_path, monkeypatch):
    from roofline.cli import report as cli_report
    calibrations, measurements = tmp_path / "calibration", tmp_path / "measurements"
    calibrations.mkdir()
    measurements.mkdir()
    (calibrations / "h100.yaml").write_text(CALIBRATION)
    (calibrations / "cpu.yaml").write_text(CALIBRATION.replace("h100-sxm", "cpu"))
    (calibrations / "engine.yaml").write_text(CALIBRATION.split("harness_fit:")[0])  # a profile no harness wrote
    (measurements / "measured.csv").write_text(MEASURED)
    monkeypatch.setattr(cli_report, "FITS_DIR", calibrations)
    monkeypatch.setattr(cli_report, "MEASUREMENTS_DIR", measurements)
    found = cli_report.find_validation(["h100-sxm", "a100-80gb"], None, None)
    assert list(found) == ["h100-sxm"]  # the cpu fit is for hardware not in the report
    assert len(found["h100-sxm"].measurements) == 2 and found["h100-sxm"].engine.bandwidth_efficiency == 0.8
    alone = cli_report.find_validation(["a100-80gb"], None, [str(measurements / "measured.csv")])
    assert alone["a100-80gb"].engine is None and len(alone["a100-80gb"].measurements) == 2


def test_the_derivation_counts_this_models_mlp_and_attention_from_the_library():
    from roofline.symbols import B, S
    terms = build_study(plots=False).terms.set_index(["part", "phase"])
    d_model, d_ff, heads, head_dim = 5120, 13824, 40, 128
    assert terms.loc[("MLP", "decode"), "flops"] == 6 * d_model * d_ff * B  # gate, up, down: 3 x 2·B·D·F
    assert terms.loc[("attention", "decode"), "flops"] == 4 * heads * head_dim * B * S  # Q·K and P·V per key
    assert terms.loc[("attention", "decode"), "intensity"] == S / (S + 1)  # no B: batching does not help


def test_the_sensitivities_probe_a_whole_token_longer_at_a_one_token_prompt():
    """+10% of a 1-token prompt rounds to +0 tokens: the rerun divided by log(1) (ZeroDivisionError)."""
    from roofline import Precision, load_hardware, load_model
    from roofline.study.report_whatifs import sensitivities
    table = sensitivities(load_model("llama-2-13b"), load_hardware("h100-sxm"), Precision(),
                          {"batch": [1, 8], "prompt": 1, "gen": 4})
    row = table[table["input"] == "prompt length"].iloc[0]
    assert all(math.isfinite(row[f"{m} B={b}"]) for m in ("ttft_s", "tpot_s") for b in (1, 8))
