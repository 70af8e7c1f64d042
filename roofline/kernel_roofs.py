"""Device kernel roofs: the fraction of a datasheet roof the device's own kernels reach, per dtype, as small curves.

data/kernel_roofs.json holds, per device, four kinds of curve, each a fraction in (0, 1] of the datasheet's roof
for that dtype with its source: GEMM efficiency against tokens M (of the dtype's peak FLOP/s), weight-GEMV
streaming per weight format (of the bandwidth; one number), decode attention against the K/V bytes a layer reads
(of the bandwidth) and prefill attention (of the attention dtype's peak). `measured` devices carry their curves
(validation/kernel_roofs_fit.py derives them from data/measurements, `roofline fit-roofs`); `priors` name the
measured device whose fractions stand in, and why. Between points a curve is linear in log x; past its ends it
stays at its end value (no extrapolation). An engine with `roofs: kernel` multiplies its own factors onto these
(bounds.Roofs.of); a device or dtype without a curve is refused, never priced at the datasheet.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .hardware import DATA_DIR, Hardware
from .userfile import parse_json

KERNEL_ROOFS_FILE = DATA_DIR / "kernel_roofs.json"
# curve kind -> (the x it is read against, or None for one number; what it is a fraction of)
KINDS = {"gemm": ("tokens", "the dtype's peak FLOP/s"), "weight_stream": (None, "the bandwidth"),
         "decode_attention": ("kv_bytes", "the bandwidth"), "prefill_attention": (None, "the dtype's peak FLOP/s")}
FIX = ("measure it (benchmarks/bench_gpu_kernels.py, then `roofline fit-roofs`) or add a prior to "
       "data/kernel_roofs.json ('priors': {{\"{device}\": {{\"from\": \"h100-sxm\", \"source\": \"why\"}}}}), or price "
       "with an engine whose profile says `roofs: datasheet`")


@dataclass(frozen=True)
class Curve:
    """A fraction against x (tokens, bytes), nondecreasing and in (0, 1]; one point: a constant."""
    xs: tuple
    fractions: tuple
    source: str

    def __call__(self, x=None):
        """The fraction at x (numbers or arrays); None: the curve's last point (large GEMMs, long reads)."""
        if x is None or len(self.xs) == 1:
            return self.fractions[-1]
        return np.interp(np.log(np.maximum(x, 1e-300)), np.log(self.xs), self.fractions)


def _curve(raw, where: str, x_name: str | None) -> Curve:
    if not isinstance(raw, dict) or "fraction" not in raw or not str(raw.get("source") or "").strip():
        raise ValueError(f"{where}: expected {{fraction, {x_name + ', ' if x_name else ''}source}}, got {raw!r}")
    fractions = raw["fraction"] if isinstance(raw["fraction"], list) else [raw["fraction"]]
    xs = raw.get(x_name, [1.0] * len(fractions)) if x_name else [1.0]
    numbers = [v for v in [*fractions, *xs] if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) != len(fractions) + len(xs) or not fractions or len(xs) != len(fractions):
        raise ValueError(f"{where}: fraction and {x_name} must be lists of numbers of one length")
    if not all(0 < f <= 1 for f in fractions) or any(b < a for a, b in zip(fractions, fractions[1:])):
        raise ValueError(f"{where}: fractions must lie in (0, 1] and not fall as {x_name} grows, got {fractions}")
    if x_name and (not all(x > 0 and math.isfinite(x) for x in xs) or any(b <= a for a, b in zip(xs, xs[1:]))):
        raise ValueError(f"{where}: {x_name} must be positive and increasing, got {xs}")
    return Curve(tuple(float(x) for x in xs), tuple(float(f) for f in fractions), str(raw["source"]))


def _device(raw, where: str) -> dict:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object of curve kinds ({', '.join(KINDS)})")
    out = {}
    for kind, (x_name, _) in KINDS.items():
        table = raw.get(kind) or {}
        if not isinstance(table, dict):
            raise ValueError(f"{where}.{kind}: expected an object of dtype -> curve")
        out[kind] = {dtype: _curve(entry, f"{where}.{kind}.{dtype}", x_name) for dtype, entry in table.items()}
    return out


@lru_cache(maxsize=1)
def _table() -> tuple[dict, dict]:
    """(device -> kind -> dtype -> Curve, device -> where its curves come from), priors resolved."""
    where = f"kernel roofs file {str(KERNEL_ROOFS_FILE)!r}"
    raw = parse_json(KERNEL_ROOFS_FILE.read_bytes(), where, "restore it with `roofline fit-roofs`")
    measured = {device: _device(entry, f"{where} measured.{device}") for device, entry in raw["measured"].items()}
    origin = {device: f"measured: {entry.get('measured', '')}" for device, entry in raw["measured"].items()}
    for device, prior in raw.get("priors", {}).items():
        if prior.get("from") not in measured:
            raise ValueError(f"{where} priors.{device}: 'from' must name a measured device ({', '.join(measured)})")
        measured[device] = measured[prior["from"]]
        origin[device] = f"prior from {prior['from']}: {prior.get('source', '')}"
    return measured, origin


def devices() -> list[str]:
    return sorted(_table()[0])


def origin(hw: Hardware) -> str:
    """Where a device's curves come from: measured (on what) or a prior (from which device, why)."""
    _, where = _table()
    return where.get(hw.id, "")


def curve(hw: Hardware, kind: str, dtype: str) -> Curve:
    """The device's `kind` curve for `dtype`, or one line naming the missing curve and how to supply it."""
    table, _ = _table()
    if hw.id not in table:
        raise ValueError(f"kernel roofs: device {hw.id!r} has none (data/kernel_roofs.json lists "
                         f"{', '.join(sorted(table))}); fix: " + FIX.format(device=hw.id))
    curves = table[hw.id][kind]
    if dtype not in curves:
        listed = ", ".join(sorted(curves)) or "none"
        raise ValueError(f"kernel roofs: device {hw.id!r} has no {kind} curve for {dtype} (it has: {listed}); fix: "
                         f"measure it (benchmarks/bench_gpu_kernels.py, then `roofline fit-roofs`) or state a prior for "
                         f"it in validation/kernel_roofs_fit.py (as fp16's is bf16's), or price with an engine whose "
                         f"profile says `roofs: datasheet`")
    return curves[dtype]


def all_curves(hw: Hardware) -> dict:
    """kind -> dtype -> Curve, for the `roofs` command (refused, like `curve`, for a device without any)."""
    table, _ = _table()
    if hw.id not in table:
        curve(hw, "gemm", "bf16")  # raises naming the device
    return table[hw.id]
