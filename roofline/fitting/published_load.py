"""The public rows measured under load (data/published/: trtllm-perf-overview.csv, mlperf.csv,
sglang-benchmarks.csv), each priced by the load model (roofline.serving.load) under its engine's profile.

How a row reads (data/published/README.md): `offline_*` queues every request at once and the engine batches
them continuously, so its output tokens/s is the saturation rate x G (the largest rate the load model keeps a
steady state at: the token budget, the running cap or the KV pool, whichever binds first); `server_*` offers
Poisson arrivals at the rate in `batch` (per deployment of `num_gpus` GPUs): throughput rate x G (NaN where
the model saturates below that rate), TTFT and TPOT the load model's means beside the rows' medians. Values
per GPU: / num_gpus. The engine's default scheduler and KV rule (its profile's `scheduler:` and `memory:`).
Engine by framework and version: TensorRT-LLM 0.x -> `tensorrt-llm` (MLPerf v4.1's harness too: its results
of August 2024 predate TensorRT-LLM 1.0), >= 1.0 -> `tensorrt-llm-1`, SGLang -> `sglang`, vLLM -> `vllm`.
Formats: fp8 weights run W8A8 (as published_serving); NVFP4 weights W4A4 on a device with FP4 tensor cores (the
GEMMs at its nvfp4 peak: TensorRT-LLM runs ModelOpt's NVFP4 checkpoints with NVFP4 activations), weight-only (16-bit
activations) on one without, as serving_rows prices them on Hopper; a KV format `unstated` is 16-bit (as
serving_rows).
Lengths: a stated number is every request's; ShareGPT's unstated prompt is SHAREGPT_PROMPT, its unstated
output the same README's offline mean (SHAREGPT_OUTPUT). Other unstated prompts (MLPerf's OpenOrca) are left out.
Left out, counted by reason (REASONS): gpu (no bundled device), format, length (a prompt or output length
unstated). Read but not priced (NaN, outside `priced` in the scores): a rate past the model's saturation, a KV pool
holding no sequence.
"""
from __future__ import annotations

import csv
import math
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..deployment import Deployment
from ..engine import load_engine
from ..hardware import DATA_DIR, hardware_id_for_gpu, load_hardware
from ..models.config import load_model
from ..precision import Precision, as_served
from ..serving.load import LoadModel, Policy, kv_sequences
from .published import COLUMNS, _number, weight_format

LOAD_FILES = tuple(DATA_DIR / "published" / name for name in
                   ("trtllm-perf-overview.csv", "mlperf.csv", "sglang-benchmarks.csv"))
METRICS = {"offline_output_tokens_per_s_per_gpu": "offline throughput",
           "server_output_tokens_per_s_per_gpu": "server throughput",
           "server_median_ttft": "server TTFT", "server_median_tpot": "server TPOT"}
REASONS = ("gpu", "format", "length")
# ShareGPT through a benchmark's sampler (prompts < 1024 tokens, prompt + output < 2048) with a Llama-3 tokenizer:
# 229,711 prompt tokens over 1,000 requests (vllm-project/vllm pull 18566, `vllm bench serve` on
# Llama-3.1-8B-Instruct, ShareGPT_Vicuna_unfiltered): a mean of 230. SGLang's sampler filters alike.
SHAREGPT_PROMPT = 230
SHAREGPT_OUTPUT = 194  # sglang-benchmarks.csv's offline rows: output tokens/s over requests/s, same dataset
# Rows whose harness calls the engine in its own process (trtllm-bench; MLPerf's LoadGen harnesses): no OpenAI-compatible
# server, so no front end (roofline.serving.front_end). sglang-benchmarks.csv's went through each engine's HTTP server.
IN_PROCESS = ("trtllm-perf-overview.csv", "mlperf.csv")
RATE = re.compile(r"poisson\s+([\d.]+)\s*/s")
VERSION = re.compile(r"TensorRT-LLM\s+(\d+)\.")


@dataclass(frozen=True)
class LoadRow:
    file: str
    line: int
    framework: str
    engine: str  # the bundled profile its framework and version price under
    model: str
    hardware: str
    tp: int
    precision: Precision
    rate: float | None  # Poisson requests/s per deployment; None: offline (every request queued at once)
    prompt: int
    gen: int
    metric: str
    value: float  # SI: tokens/s per GPU, or seconds

    @property
    def family(self) -> str:
        return METRICS[self.metric]


@dataclass(frozen=True)
class LoadRead:
    rows: list
    left_out: dict  # reason -> rows


def engine_for(framework: str) -> str | None:
    """The bundled profile a framework's text names (its version decides TensorRT-LLM's), None if none."""
    if framework.startswith("TensorRT-LLM"):
        version = VERSION.match(framework)
        return "tensorrt-llm-1" if version and int(version.group(1)) >= 1 else "tensorrt-llm"
    for prefix, engine in (("SGLang", "sglang"), ("vLLM", "vllm")):
        if framework.startswith(prefix):
            return engine
    return None


def _length(text: str, dataset_mean: int, path: Path, line: int, column: str) -> int | None:
    """A stated length, ShareGPT's mean where the row says ShareGPT without one, else None (left out)."""
    if "unstated" not in text:
        return int(_number(text, path, line, column, column))
    return dataset_mean if "sharegpt" in text.lower() else None


def _precision(weights_text: str, kv_text: str, hardware: str) -> Precision:
    weights, group = weight_format(weights_text)
    kv = weight_format(kv_text)[0]
    kv = "bf16" if kv == "unstated" else kv
    activations = "fp16" if weights == "fp16" else "bf16"
    # fp8 W8A8, nvfp4 W4A4 on FP4 tensor cores (the module docstring): as an engine runs them (precision.as_served)
    return as_served(Precision(weights=weights, activations=activations, kv=kv, weight_group_size=group),
                     load_hardware(hardware).peak_flops)


def _row(raw: dict, path: Path, line: int) -> LoadRow | str:
    where = f"published rows {str(path)!r}, line {line}"
    metric = raw["metric"].strip()
    if metric not in METRICS:
        raise ValueError(f"{where}: metric {metric!r} is not one of {', '.join(METRICS)}")
    engine = engine_for(raw["framework"])
    if engine is None:
        raise ValueError(f"{where}: framework {raw['framework']!r} names no bundled engine; fix: start it with "
                         "TensorRT-LLM <version>, SGLang or vLLM")
    try:  # a stem of data/models
        load_model(raw["model"].strip())
    except ValueError as err:
        raise ValueError(f"{where}: model {raw['model'].strip()!r}: {err}") from None
    hardware = hardware_id_for_gpu(re.sub(r"(\d)G\b", r"\1GB", raw["gpu"]))  # "A100 80G" is the 80GB part
    if hardware is None:
        return "gpu"
    try:
        precision = _precision(raw["dtype_weights"], raw["dtype_kv"], hardware)
    except ValueError:
        return "format"
    prompt = _length(raw["input_len"], SHAREGPT_PROMPT, path, line, "input_len")
    gen = _length(raw["output_len"], SHAREGPT_OUTPUT, path, line, "output_len")
    if prompt is None or gen is None:
        return "length"
    batch = raw["batch"].strip()
    rate = RATE.fullmatch(batch)
    if batch != "max" and rate is None:
        raise ValueError(f"{where}: column 'batch' = {batch!r} must be 'max' (offline) or 'poisson R/s'")
    value = _number(raw["value"], path, line, "value")
    value = value / 1e3 if raw["unit"].strip() == "ms" else value
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{where}: column 'value' = {raw['value']!r} must be a positive number")
    return LoadRow(path.name, line, raw["framework"], engine, raw["model"].strip(), hardware,
                   int(_number(raw["num_gpus"], path, line, "num_gpus", "num_gpus")), precision,
                   float(rate.group(1)) if rate else None, prompt, gen, metric, value)


def read_load_rows(path: Path) -> LoadRead:
    """Every row of a published file measured under load, and the rows left out counted by reason."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"published rows {str(path)!r}: no such file")
    rows, left_out = [], Counter({reason: 0 for reason in REASONS})
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        missing = set(COLUMNS) - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"published rows {str(path)!r}: missing columns {sorted(missing)}; see "
                             "data/published/README.md for the format")
        for line, raw in enumerate(reader, start=2):
            row = _row(raw, path, line)
            if isinstance(row, str):
                left_out[row] += 1
            else:
                rows.append(row)
    return LoadRead(rows, dict(left_out))


def predict(rows: list[LoadRow]) -> np.ndarray:
    """Each row's metric as the load model gives it under the row's engine (NaN: saturated, or no KV pool)."""
    out = np.full(len(rows), np.nan)
    groups: dict = {}
    for i, row in enumerate(rows):
        groups.setdefault((row.engine, row.model, row.hardware, row.precision, row.tp, row.prompt, row.gen,
                           Path(row.file).name in IN_PROCESS), []).append(i)
    for (name, model, hardware, precision, tp, prompt, gen, in_process), members in groups.items():
        engine = load_engine(name)
        if in_process:  # no HTTP server between the harness and the engine: no front end to queue for
            engine = replace(engine, frontend_request_s=0.0, frontend_chunk_s=0.0)
        d = Deployment(load_model(model), load_hardware(hardware), precision, tp=tp, engine=engine)
        budget, running = engine.scheduler.token_budget, engine.scheduler.max_sequences
        pool = kv_sequences(d, prompt, gen, token_budget=budget)
        if pool < 1:
            continue
        load = LoadModel(d, prompt, gen, Policy(budget, running, pool))
        for i in members:
            row = rows[i]
            if row.rate is None:
                out[i] = load.saturation() * gen / tp
                continue
            state = load.at_rate([row.rate])  # NaN throughout where the rate saturates
            out[i] = {"server_output_tokens_per_s_per_gpu": state["goodput_tokens_per_s"][0] / tp,
                      "server_median_ttft": state["ttft_s"][0], "server_median_tpot": state["tpot_s"][0]}[row.metric]
    return out


def scores(rows: list[LoadRow], predicted: np.ndarray) -> dict:
    """Per engine profile and metric family ("tensorrt-llm: offline throughput"): rows, rows priced, median and p90
    of |predicted / measured - 1|, and the bias (median of predicted / measured - 1: above 0, too fast for a
    throughput, too slow for a time)."""
    measured = np.array([r.value for r in rows])
    report = {}
    for engine in sorted({r.engine for r in rows}):
        for metric, family in METRICS.items():
            chosen = np.array([r.engine == engine and r.metric == metric for r in rows], dtype=bool)
            if not chosen.any():
                continue
            error = predicted[chosen] / measured[chosen] - 1
            error = error[np.isfinite(error)]
            report[f"{engine}: {family}"] = {
                "n": int(chosen.sum()), "priced": int(error.size),
                "median": float(np.median(np.abs(error))) if error.size else None,
                "p90": float(np.percentile(np.abs(error), 90)) if error.size else None,
                "bias": float(np.median(error)) if error.size else None}
    return report
