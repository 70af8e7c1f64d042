"""Calibration: the roofs a device actually reaches (fitted efficiencies, overheads, corner sharpness),
and its loader from files (data/calibration/*.yaml).

A file holds fractions of the datasheet roofs of the bundled hardware it names (`hardware:`), as
fitted by `roofline fit`; other keys (achieved roofs, measured ceilings, fit quality) document it.
"default" is for devices never measured: the median of the committed fits marked transferable
(fractions of a real datasheet, capped at 1), with no overheads, which are specific to a device
and its software stack. A fit against the `cpu` entry (measured ceilings, not a datasheet) is not transferable.
With no transferable fit committed, "default" is the ideal bound, and its name says so.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from .hardware import DATA_DIR
from .userfile import parse_yaml

CALIBRATION_DIR = DATA_DIR / "calibration"
DEFAULT = "default"


@dataclass(frozen=True)
class Calibration:
    """Roofs actually reached: fractions of datasheet peak and bandwidth, plus fixed overheads.

    The default is the ideal bound (every efficiency 1, no overhead).
    """
    name: str = "ideal"
    bandwidth_efficiency: float = 1.0
    flops_efficiency: dict = field(default_factory=dict)  # dtype -> fraction; missing = 1
    step_overhead_s: float = 0.0  # per step (launch, scheduling)
    layer_overhead_s: float = 0.0  # per layer per step
    corner: float = math.inf  # sharpness p of the roofline corner: an op takes (c^p + m^p)^(1/p)
    # Attention kernels (scores and values against the KV cache) reach these fractions of the device's
    # roofs, each its own: many small per-head products stream and compute unlike one large matrix, and
    # on the H100 a flash decode kernel streams the cache faster than cuBLAS's GEMVs stream weights
    # (3.0 against 2.4-2.6 TB/s), so a fraction of the weights' rate would have to exceed 1.
    # None: what the weight GEMMs reach (bandwidth_efficiency; the slowest dtype's flops_efficiency).
    attention_bandwidth_efficiency: float | None = None
    attention_flops_efficiency: float | None = None
    attention_corner: float | None = None  # the attention kernels' own corner sharpness; None: `corner`
    # The routed experts' GEMVs, when their weights are in a format of their own (Precision.experts): an
    # engine's quantized_efficiency for that format. None: bandwidth_efficiency.
    expert_bandwidth_efficiency: float | None = None
    # Times softmax attention reads the K/V it needs: 1 + r (N/K - 1) for an engine whose kernels re-read a
    # GQA group's cache per query head (Engine.gqa_rereads); constant-state scans are not re-read.
    attention_kv_reads: float = 1.0

    def __post_init__(self):
        if self.attention_bandwidth_efficiency is None:
            object.__setattr__(self, "attention_bandwidth_efficiency", self.bandwidth_efficiency)
        if self.expert_bandwidth_efficiency is None:
            object.__setattr__(self, "expert_bandwidth_efficiency", self.bandwidth_efficiency)
        if self.attention_flops_efficiency is None:
            object.__setattr__(self, "attention_flops_efficiency", min(self.flops_efficiency.values(), default=1.0))
        values = {"bandwidth_efficiency": self.bandwidth_efficiency,
                  "attention_bandwidth_efficiency": self.attention_bandwidth_efficiency,
                  "attention_flops_efficiency": self.attention_flops_efficiency,
                  "expert_bandwidth_efficiency": self.expert_bandwidth_efficiency,
                  **{f"flops_efficiency.{dtype}": v for dtype, v in self.flops_efficiency.items()}}
        for name, value in values.items():
            if not 0 < value <= 1:  # a kernel that beats the measured roof means the roof was measured wrong
                raise ValueError(f"calibration {self.name!r}: {name} must be in (0, 1], got {value!r}")
        if not self.attention_kv_reads >= 1:
            raise ValueError(f"calibration {self.name!r}: attention_kv_reads must be >= 1 (reads of the cache a "
                             f"step needs), got {self.attention_kv_reads!r}")
        for name in ("step_overhead_s", "layer_overhead_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"calibration {self.name!r}: {name} must be >= 0")
        for name in ("corner", "attention_corner"):  # p = 1: compute and memory never overlap; inf: sharp
            value = getattr(self, name)
            if value is None and name == "attention_corner":
                continue  # the weight GEMMs' corner
            if value is None or not value >= 1:
                raise ValueError(f"calibration {self.name!r}: {name} must be >= 1 (inf for the sharp roofline), "
                                 f"got {value!r}")


IDEAL = Calibration()


def _number(raw: dict, key: str, where: str, default=None) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"calibration {where}: field {key!r} must be a number, got {value!r}")
    return float(value)


def calibration_from_dict(raw, where: str) -> Calibration:
    if not isinstance(raw, dict):
        raise ValueError(f"calibration {where}: expected a mapping of fields, got {type(raw).__name__}")
    flops = raw.get("flops_efficiency", {})
    if not isinstance(flops, dict):
        raise ValueError(f"calibration {where}: field 'flops_efficiency' must map dtype -> fraction, got {flops!r}")
    bandwidth = _number(raw, "bandwidth_efficiency", where)
    flops_efficiency = {str(d): _number(flops, d, f"{where} flops_efficiency") for d in flops}
    return Calibration(
        name=str(raw.get("name") or where),
        bandwidth_efficiency=bandwidth,
        flops_efficiency=flops_efficiency,
        step_overhead_s=_number(raw, "step_overhead_s", where, 0.0),
        layer_overhead_s=_number(raw, "layer_overhead_s", where, 0.0),
        corner=_number(raw, "corner", where, math.inf),
        # absent: the attention kernels reach what the weight GEMMs reach (Calibration's None)
        attention_bandwidth_efficiency=_number(raw, "attention_bandwidth_efficiency", where, bandwidth),
        attention_flops_efficiency=_number(raw, "attention_flops_efficiency", where,
                                           min(flops_efficiency.values(), default=1.0)),
        attention_corner=None if raw.get("attention_corner") is None else _number(raw, "attention_corner", where),
    )


def read_calibration_file(path: Path) -> dict:
    try:
        content = Path(path).read_bytes()
    except OSError as err:
        raise ValueError(f"calibration file {str(path)!r}: cannot read it ({err.strerror}); fix: pass a readable "
                         f"file written by `roofline fit`") from None
    raw = parse_yaml(content, f"calibration file {str(path)!r}", "pass a file written by `roofline fit`")
    if not isinstance(raw, dict):
        raise ValueError(f"calibration file {str(path)!r}: expected a mapping of fields")
    return raw


def committed_calibrations() -> dict[str, dict]:
    return {p.stem: read_calibration_file(p) for p in sorted(CALIBRATION_DIR.glob("*.yaml"))}


def default_calibration() -> Calibration:
    """Efficiencies transferred from the committed, transferable fits (median, capped at 1)."""
    fits = {name: raw for name, raw in committed_calibrations().items() if raw.get("transferable") is True}
    if not fits:
        return Calibration(name="default (no transferable fits committed: ideal bound)")
    bandwidth = statistics.median(min(1.0, _number(raw, "bandwidth_efficiency", name)) for name, raw in fits.items())
    attention = {key: statistics.median(min(1.0, _number(raw, key, name, 1.0)) for name, raw in fits.items())
                 for key in ("attention_bandwidth_efficiency", "attention_flops_efficiency")}
    by_dtype: dict = {}
    for name, raw in fits.items():
        for dtype in raw.get("flops_efficiency") or {}:
            by_dtype.setdefault(dtype, []).append(min(1.0, _number(raw["flops_efficiency"], dtype, name)))
    return Calibration(name=f"default (transferred from {', '.join(fits)})", bandwidth_efficiency=bandwidth,
                       flops_efficiency={d: statistics.median(v) for d, v in by_dtype.items()},
                       **attention)


def transfer_calibration(device_name: str, measurements_file: str) -> Calibration | None:
    """A committed fit of the same device, as fractions of its measured ceilings, that did not see
    this file: what predicts the file out of sample (None where there is none)."""
    for name, raw in committed_calibrations().items():
        fit = raw.get("fit") or {}
        if (raw.get("hardware") == "measured" and fit.get("device_name") == device_name
                and measurements_file not in (fit.get("sources") or [])):
            return calibration_from_dict(raw, name)
    return None


def load_calibration(name_or_path: str | Calibration | None) -> Calibration:
    """'ideal', 'default', a committed name (a file stem in data/calibration) or a YAML path."""
    if isinstance(name_or_path, Calibration):
        return name_or_path
    text = "ideal" if name_or_path is None else str(name_or_path)
    if text == "ideal":
        return IDEAL
    if text == DEFAULT:
        return default_calibration()
    path = Path(text)
    if not path.is_file():
        path = CALIBRATION_DIR / f"{text}.yaml"
        if not path.is_file():
            known = ", ".join(sorted(committed_calibrations()) + ["default", "ideal"])
            raise ValueError(f"calibration: unknown calibration {text!r}; committed: {known}, or pass a YAML path")
    try:
        return calibration_from_dict(read_calibration_file(path), path.stem)
    except ValueError as err:
        message = str(err)
        raise ValueError(message if str(path) in message else f"calibration file {str(path)!r}: {message}") from None
