"""The published rows beyond calibration.csv (data/published/README.md): every file parses as a later fit
will read it, and no figure breaks the physics it was measured under.

Two oracles nobody here wrote: the datasheet peak of each GPU (data/hardware.json) bounds offline
throughput from above, since every prompt and output token costs at least 2 x (active weights) FLOPs;
and a decode step reads every weight at least once, so the memory bandwidth bounds TPOT from below.
A transcription slip of a digit, or ms read as s, breaks one of them.
"""
import csv
import json
import math
import re
from pathlib import Path

import pytest

from roofline import load_model
from roofline.model import active_parameter_count, parameter_count
from roofline.precision import ALIASES, BITS
from roofline.fitting.published import COLUMNS, weight_format

PUBLISHED = Path(__file__).resolve().parent.parent / "data" / "published"
HARDWARE = json.loads((PUBLISHED.parent / "hardware.json").read_text())
MODELS = PUBLISHED.parent / "models"
ROW_FILES = ("mlperf.csv", "sglang-benchmarks.csv", "trtllm-perf-overview.csv")
UNITS = {"offline_output_tokens_per_s_per_gpu": "tokens/s", "server_output_tokens_per_s_per_gpu": "tokens/s",
         "server_median_ttft": "ms", "server_median_tpot": "ms",
         "decode_tokens_per_s": "tokens/s", "output_throughput": "tokens/s", "ttft": "ms"}
# the gpu column's device, matched in this order (the first that the text contains)
GPU_KEYS = (("MI300X", "mi300x"), ("B200", "b200"), ("H200", "h200"), ("H100", "h100-sxm"), ("A100", "a100-80gb"))
# NVFP4 (E2M1 values, one fp8 scale per 16, one fp32 scale per tensor) is a format of these rows not yet priced
WEIGHT_FORMATS = set(BITS) | set(ALIASES) | {"nvfp4"}
# documents whose figures are kept aside to score transfer (data/published/README.md): never a source here
KEPT_ASIDE = ("gpt-fast", "GPU-Benchmarks-on-LLM-Inference", "databricks", "docs/source/performance.md",
              "aiconfigurator", "h100vsa100", "h200launch", "falcon180b")
SOURCE = re.compile(r"(github:[\w.-]+/[\w.-]+ \S+ @[0-9a-f]{40}|https://\S+)$")
# the total a per-GPU value was divided from, as every throughput row's notes quote it
QUOTED_TOTAL = re.compile(r"([\d.]+) tokens/s in total, divided by (\d+)")


def rows(name: str) -> list[dict]:
    with open(PUBLISHED / name, newline="") as handle:
        return list(csv.DictReader(handle))


ALL = [(name, line, row) for name in ROW_FILES for line, row in enumerate(rows(name), start=2)]
IDS = [f"{name}:{line}" for name, line, _ in ALL]


def length(text: str) -> int | None:
    """A stated token count, or None for a row that says its length is unstated (a dataset's spread)."""
    if text.startswith("~") and "unstated" in text:
        return None
    value = int(text)
    assert value > 0
    return value


def device(gpu: str) -> str:
    return next(key for word, key in GPU_KEYS if word in gpu)


@pytest.mark.parametrize("name", ROW_FILES)
def test_every_file_has_the_calibration_columns_in_order(name):
    with open(PUBLISHED / name, newline="") as handle:
        assert next(csv.reader(handle)) == [*COLUMNS, "notes"]
    assert rows(name), f"{name} holds no rows"


@pytest.mark.parametrize("name,line,row", ALL, ids=IDS)
def test_every_row_parses_into_the_fields_a_fit_reads(name, line, row):
    assert row["metric"] in UNITS and row["unit"] == UNITS[row["metric"]]
    value = float(row["value"])
    assert math.isfinite(value) and value > 0
    assert int(row["num_gpus"]) >= 1
    assert row["batch"] == "max" or re.fullmatch(r"poisson \d+(\.\d+)?/s", row["batch"]) or int(row["batch"]) >= 1
    length(row["input_len"]), length(row["output_len"])
    assert (MODELS / f"{row['model']}.json").is_file() or re.fullmatch(r"[\w.-]+/[\w.-]+", row["model"])
    assert any(word in row["gpu"] for word, _ in GPU_KEYS) and device(row["gpu"]) in HARDWARE
    assert weight_format(row["dtype_weights"])[0] in WEIGHT_FORMATS
    assert row["dtype_kv"] == "unstated" or weight_format(row["dtype_kv"])[0] in WEIGHT_FORMATS
    assert re.search(r"\d+\.\d+", row["framework"]), "the engine's version is part of the framework column"


@pytest.mark.parametrize("name,line,row", ALL, ids=IDS)
def test_every_row_names_an_allowed_source_with_its_commit_and_conditions(name, line, row):
    source = row["source_url_or_repo_path"]
    assert SOURCE.match(source), f"{source!r}: want 'github:owner/name path @commit' or a URL"
    assert not any(word.lower() in source.lower() for word in KEPT_ASIDE)
    assert len(row["notes"]) > 40, "notes say how the figure was measured"


@pytest.mark.parametrize("name,line,row", [r for r in ALL if r[2]["unit"] == "tokens/s"],
                         ids=[i for i, r in zip(IDS, ALL) if r[2]["unit"] == "tokens/s"])
def test_a_per_gpu_throughput_is_the_quoted_total_divided_by_the_quoted_gpus(name, line, row):
    total, gpus = QUOTED_TOTAL.search(row["notes"]).groups()
    assert float(row["value"]) == pytest.approx(float(total) / int(gpus), abs=0.01)


def compute_bound_rows():
    for name, line, row in ALL:
        prompt, gen = length(row["input_len"]), length(row["output_len"])
        weights = weight_format(row["dtype_weights"])[0]
        peak = HARDWARE[device(row["gpu"])]["peak_flops"].get(weights)
        if row["metric"] == "offline_output_tokens_per_s_per_gpu" and prompt and gen and peak:
            yield pytest.param(row, prompt, gen, peak["value"], id=f"{name}:{line}")


@pytest.mark.parametrize("row,prompt,gen,peak", list(compute_bound_rows()))
def test_offline_throughput_stays_under_the_datasheet_compute_roof(row, prompt, gen, peak):
    # a request of P + G tokens costs >= 2 x active weights FLOPs a token (attention only adds), spread over
    # the num_gpus GPUs: G output tokens a request, so per GPU tokens/s <= peak x G / (2 N (P + G))
    flops_per_token = 2 * active_parameter_count(load_model(row["model"]))
    assert float(row["value"]) <= peak * gen / (flops_per_token * (prompt + gen))


@pytest.mark.parametrize("name,line,row", [r for r in ALL if r[2]["metric"] == "server_median_tpot"],
                         ids=[i for i, r in zip(IDS, ALL) if r[2]["metric"] == "server_median_tpot"])
def test_a_decode_step_is_no_faster_than_reading_the_weights_once(name, line, row):
    config = load_model(row["model"])
    assert not config.n_experts, "a MoE step reads only the routed experts: this bound is for dense models"
    weight_bytes = parameter_count(config) * BITS[weight_format(row["dtype_weights"])[0]] / 8
    bandwidth = HARDWARE[device(row["gpu"])]["memory_bandwidth_bytes_per_s"]["value"]
    assert float(row["value"]) / 1e3 >= weight_bytes / (int(row["num_gpus"]) * bandwidth)


def test_the_roofs_would_catch_a_digit_slip_and_seconds_read_as_ms():
    # TensorRT-LLM 0.17, Llama-3.1-8B fp16 on one A100, 128 in / 128 out: 6627.27 tokens/s sits at 0.68 of the
    # roof; one digit more would be 6.8x over it
    roof = HARDWARE["a100-80gb"]["peak_flops"]["fp16"]["value"] * 128 / (
        2 * active_parameter_count(load_model("llama-3.1-8b")) * 256)
    assert 6627.27 <= roof < 66272.7
    # MLPerf v4.1 H100 TP2 Llama-2-70B fp8: median TPOT 156.4 ms; the same figure read as seconds (0.1564 ms)
    # would be faster than reading 69 GB of fp8 weights over two GPUs' 3.35 TB/s (10.3 ms)
    floor_ms = parameter_count(load_model("llama-2-70b")) / (2 * 3.35e12) * 1e3
    assert 0.1564 < floor_ms < 156.4
