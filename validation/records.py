"""Measurements on disk: one CSV row per finished point, appended and flushed at once.

A rerun reads the file back, skips the points already there and appends the rest. A process
killed mid-write leaves at most one partial trailing line: it is dropped with a warning (and cut
off the file before the next append); corruption anywhere else is an error.
"""
from __future__ import annotations

import csv
import io
import os
import re
import warnings
from pathlib import Path

import pandas as pd

from roofline import Precision

COLUMNS = (
    "device", "device_name", "torch_version", "cuda_version", "threads", "load_average", "timing_method",
    "matmul_kernel",
    "model", "config_hash", "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size",
    "n_experts", "top_k", "d_expert", "window", "kv_lora_rank", "q_lora_rank", "qk_rope_dim", "qk_nope_dim",
    "v_head_dim",
    "dtype", "kv_dtype", "weight_format", "kernels",
    "phase", "attention", "batch", "context", "status", "steps", "time_s", "time_p10_s", "time_p90_s",
    "predicted_ideal_s", "predicted_max_batch", "copy_bandwidth", "read_bandwidth",
    "matmul_flops_fp32", "matmul_flops_bf16", "matmul_flops_fp16", "ceiling_drift", "timestamp",
)
KEY = ("model", "config_hash", "n_kv_heads", "dtype", "kv_dtype", "weight_format", "phase", "batch", "context")
OK, DOES_NOT_FIT = "ok", "does-not-fit"


def device_slug_of(device: str, name: str) -> str:
    """A file-name-safe id: 'cuda-nvidia-h100-80gb-hbm3', 'cpu-amd-epyc-2-threads'."""
    name = name.replace(f"{device} ", "", 1) if name.lower().startswith(device) else name
    return re.sub(r"[^a-z0-9]+", "-", f"{device} {name}".lower()).strip("-")


def row_precision(row) -> Precision:
    """What the library should count for a row: its weight format, activation dtype and cache dtype.
    Byte widths as the harness stores them: a quantized cache keeps a float32 scale per (position, KV
    head), 4 bytes per head_dim values, which the library's 2-byte group scale counts as a group of
    head_dim / 2; int4 weights keep a scale and a zero per group (4 bytes): a library group of g / 2."""
    dtype = str(row["dtype"])
    kv = str(row.get("kv_dtype") or dtype)
    weights = str(row.get("weight_format") or dtype)
    kv_group = int(row["head_dim"]) // 2 if kv in ("int8", "fp8") else None
    if weights.startswith("int4-g"):
        return Precision(weights="int4", activations=dtype, kv=kv, kv_group_size=kv_group,
                         weight_group_size=int(weights.removeprefix("int4-g")) // 2)
    return Precision(weights=weights, activations=dtype, kv=kv, kv_group_size=kv_group)


def point_key(row: dict) -> tuple:
    return tuple(str(row[k]) for k in KEY)


def _parse(text: str, path: Path, appending: bool) -> tuple[list[dict], int]:
    """Rows of the file and the byte length of its valid part. A file from an earlier version (a
    subset of today's columns) reads with the new columns empty, but is not appended to."""
    lines = text.splitlines(keepends=True)
    if not lines:
        return [], 0
    header = tuple(next(csv.reader([lines[0]])))
    if header != COLUMNS and (appending or set(header) - set(COLUMNS)):
        raise ValueError(f"measurements {str(path)!r}: header does not match this version's columns; "
                         f"start a new file (--out) instead of resuming")
    rows, valid = [], len(lines[0].encode())
    for number, line in enumerate(lines[1:], start=2):
        fields = next(csv.reader([line]), [])
        broken = not line.endswith("\n") or len(fields) != len(header)
        if broken and number == len(lines):
            warnings.warn(f"measurements {str(path)!r}: dropped a corrupt trailing line {number} "
                          f"(an interrupted write): {line[:60]!r}", stacklevel=3)
            break
        if broken:
            raise ValueError(f"measurements {str(path)!r}: line {number} is corrupt ({len(fields)} fields, "
                             f"expected {len(header)})")
        rows.append({**dict.fromkeys(COLUMNS, ""), **dict(zip(header, fields))})
        valid += len(line.encode())
    return rows, valid


def read_rows(path: Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        return []
    return _parse(path.read_text(), path, appending=False)[0]


def repair(path: Path) -> list[dict]:
    """Read the rows back and cut a corrupt trailing line off the file, so appends start clean."""
    path = Path(path)
    if not path.is_file():
        return []
    rows, valid = _parse(path.read_text(), path, appending=True)
    if valid < path.stat().st_size:
        with open(path, "r+b") as handle:
            handle.truncate(valid)
    return rows


def append_row(path: Path, row: dict) -> None:
    """Write one row (and the header first if the file is new), flushed to disk before returning."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    missing = set(COLUMNS) - set(row)
    if missing:
        raise ValueError(f"measurement row lacks {sorted(missing)}")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n", extrasaction="ignore")
    new = not path.is_file() or path.stat().st_size == 0
    if new:
        writer.writeheader()
    writer.writerow(row)
    with open(path, "a", newline="") as handle:
        handle.write(buffer.getvalue())
        handle.flush()
        os.fsync(handle.fileno())


def load_frame(paths) -> pd.DataFrame:
    """Every row of the given files as a DataFrame with numbers parsed (empty cells become NaN)."""
    rows = [row for path in paths for row in read_rows(Path(path))]
    if not rows:
        raise ValueError(f"measurements: no rows in {', '.join(str(p) for p in paths)}")
    frame = pd.DataFrame(rows, columns=COLUMNS)
    # files from before these columns: the cache and the weights were in the row's dtype, eager kernels
    frame["kv_dtype"] = frame["kv_dtype"].where(frame["kv_dtype"] != "", frame["dtype"])
    frame["weight_format"] = frame["weight_format"].where(frame["weight_format"] != "", frame["dtype"])
    frame["kernels"] = frame["kernels"].where(frame["kernels"] != "", "torch")
    text = {"device", "device_name", "torch_version", "cuda_version", "timing_method", "matmul_kernel", "model",
            "config_hash", "attention", "dtype", "kv_dtype", "weight_format", "kernels", "phase", "status",
            "timestamp"}
    for column in set(COLUMNS) - text:
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame
