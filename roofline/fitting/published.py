"""Published measurements of serving engines (`data/published/`), read as the step pricer's inputs.

Each row is one figure from a public source: a model, a GPU, a tensor-parallel degree, weight and KV
formats, a batch, prompt and output lengths, and one metric. Three families of metric, read as the
README of data/published says every comparison so far has read them:
- decode_tokens_per_s: batch 1; 1 / the average time per output token over the generation;
- output_throughput: tokens per second per GPU of a static batch: B x G / (TTFT + the G - 1 decode
  steps), divided by the GPUs;
- ttft: batch 1, one output token: the prefill, plus the engine's per-request cost.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..models.config import load_model
from ..deployment import Deployment
from ..engine import Engine
from ..evaluate import evaluate
from ..hardware import DATA_DIR, GPU_NAMES, hardware_id_for_gpu
from ..precision import Precision
from ..sharding import shard

PUBLISHED = DATA_DIR / "published" / "calibration.csv"
FAMILIES = {"decode_tokens_per_s": "batch-1 decode", "output_throughput": "batched throughput", "ttft": "TTFT"}
UNSTATED_PROMPT = 300  # llama.cpp's rows do not state the prompt; data/published/README.md says to take 300
# What a row may say, physically: (low, high) per column; outside it a figure is a typo or a unit slip.
RANGES = {"num_gpus": (1, 1e5), "batch": (1, 1e6), "input_len": (1, 1e8), "output_len": (1, 1e8),
          "decode_tokens_per_s": (0, 1e7), "output_throughput": (0, 1e7), "ttft": (0, 3600.0)}
COLUMNS = ("source_url_or_repo_path", "framework", "model", "gpu", "num_gpus", "dtype_weights", "dtype_kv", "batch",
           "input_len", "output_len", "metric", "value", "unit")


@dataclass(frozen=True)
class Row:
    line: int
    source: str
    framework: str
    model: str
    hardware: str
    tp: int
    precision: Precision
    batch: int
    prompt: int
    gen: int
    metric: str
    value: float  # SI: tokens/s, or seconds for ttft

    @property
    def family(self) -> str:
        return FAMILIES[self.metric]


def weight_format(text: str) -> tuple[str, int | None]:
    """'int4 g32 (weight-only)' -> ('int4', 32); 'fp16' -> ('fp16', None); 'q4_0' -> ('q4_0', None)."""
    words = text.lower().replace("(weight-only)", "").split()
    group = next((int(w[1:]) for w in words[1:] if re.fullmatch(r"g\d+", w)), None)
    return words[0], group


def _number(text: str, path: Path, line: int, column: str, limits: str | None = None) -> float:
    """The column's number, inside RANGES[limits] (whole numbers for counts): a bad one names its line."""
    try:
        value = float(str(text).strip().lstrip("~"))
    except ValueError:
        raise ValueError(f"published rows {str(path)!r}, line {line}: column {column!r} must be a number, "
                         f"got {text!r}") from None
    if limits is not None:
        low, high = RANGES[limits]
        whole = limits in ("num_gpus", "batch", "input_len", "output_len")
        if not (low < value <= high if low == 0 else low <= value <= high) or (whole and value != int(value)):
            kind = "a whole number" if whole else "a number"
            bound = f"in ({low:g}, {high:g}]" if low == 0 else f"in [{low:g}, {high:g}]"
            raise ValueError(f"published rows {str(path)!r}, line {line}: column {column!r} = {text!r} must be "
                             f"{kind} {bound}{' (' + limits + ')' if limits != column else ''}; fix the row")
    return value


def read_rows(path: Path = PUBLISHED) -> list[Row]:
    """Every row of a published-measurements CSV (data/published/README.md's columns); a bad row names its line."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"published rows {str(path)!r}: no such file")
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        missing = set(COLUMNS) - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"published rows {str(path)!r}: missing columns {sorted(missing)}; see "
                             "data/published/README.md for the format")
        return [_row(raw, path, number) for number, raw in enumerate(reader, start=2)]


def rows_for(framework: str, path: Path = PUBLISHED) -> list[Row]:
    """The rows of an engine's framework (its `framework` prefix); none for an engine without one."""
    return [r for r in read_rows(path) if framework and r.framework.startswith(framework)]


def _row(raw: dict, path: Path, line: int) -> Row:
    where = f"published rows {str(path)!r}, line {line}"
    short = [c for c in COLUMNS if raw.get(c) is None]  # csv fills a row that ends early with None
    if short:
        raise ValueError(f"{where}: no value for {', '.join(short)}; fix: give every column "
                         "(data/published/README.md)")
    try:  # the model a row names, loaded here so a bad one is refused with its line
        config = load_model(raw["model"].strip())
    except ValueError as err:
        raise ValueError(f"{where}: model {raw['model'].strip()!r}: {err}") from None
    gpus = int(_number(raw["num_gpus"], path, line, "num_gpus", "num_gpus"))
    try:  # the GPUs shard the model by tensor parallelism: a degree that cannot split it is refused with its line
        shard(config, gpus)
    except ValueError as err:
        raise ValueError(f"{where}: num_gpus {gpus}: {err}; fix: the tensor-parallel degree the row ran") from None
    metric = raw["metric"].strip()
    if metric not in FAMILIES:
        raise ValueError(f"{where}: metric {metric!r} is not one of {', '.join(FAMILIES)}")
    hardware = hardware_id_for_gpu(raw["gpu"])
    if hardware is None:
        raise ValueError(f"{where}: gpu {raw['gpu']!r} matches no bundled hardware; fix: name the GPU with its memory "
                         f"(e.g. 'A100 80GB'), one of {', '.join(h for _, h in GPU_NAMES)}")
    weights, group = weight_format(raw["dtype_weights"])
    kv, _ = weight_format(raw["dtype_kv"])
    try:
        precision = Precision(weights=weights, activations="bf16" if weights == "bf16" else "fp16", kv=kv,
                              weight_group_size=group)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    prompt = (UNSTATED_PROMPT if "unstated" in raw["input_len"] else
              int(_number(raw["input_len"], path, line, "input_len", "input_len")))
    unit = raw["unit"].strip()
    value = _number(raw["value"], path, line, "value")
    if metric == "ttft":
        value = value / 1e3 if unit == "ms" else value
    _number(str(value), path, line, "value", metric)  # in SI: tokens/s, or seconds
    return Row(line, raw["source_url_or_repo_path"], raw["framework"], raw["model"].strip(), hardware,
               gpus, precision,
               int(_number(raw["batch"], path, line, "batch", "batch")), prompt,
               int(_number(raw["output_len"], path, line, "output_len", "output_len")), metric, value)


def predict(row: Row, engine: Engine) -> float:
    """The row's metric as the step pricer gives it under `engine`."""
    deployment = Deployment.of(row.model, row.hardware, precision=row.precision, tp=row.tp, engine=engine)
    gen = max(row.gen, 1)
    m = evaluate(deployment, row.batch, row.prompt, gen, parallel_columns=False)
    ttft = float(m["ttft_s"])  # the engine's per-request cost included
    if row.metric == "ttft":
        return ttft
    decode_s = float(m["e2e_s"]) - ttft  # the gen - 1 decode steps, KV growth integrated
    if row.metric == "decode_tokens_per_s":
        return (gen - 1) / decode_s if gen > 1 else 1 / float(m["tpot_s"])
    return row.batch * gen / (ttft + decode_s) / row.tp  # output_throughput, per GPU


def errors(rows: list[Row], engine: Engine) -> np.ndarray:
    """predicted / measured - 1 per row."""
    return np.array([predict(row, engine) / row.value - 1 for row in rows])
