"""Hardware: the roofs (peak FLOP/s per dtype, memory bandwidth, capacity, interconnect), SI units.

Values come from `data/hardware.json`, where each number carries its source; a user's own file
in the same shape works too (plain numbers are accepted in place of {value, source}).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .precision import BITS, normalize_dtype

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
HARDWARE_FILE = DATA_DIR / "hardware.json"

# When a device has no units for a dtype, the matmul runs at the next wider dtype it has
# (an A100 has no fp8 tensor cores: fp8 weights are dequantized and multiplied in bf16).
FALLBACK = {"int4": "int8", "int8": "bf16", "fp8": "bf16", "bf16": "fp16", "fp16": "fp32", "fp32": None}


@dataclass(frozen=True)
class Hardware:
    id: str
    name: str
    memory_bytes: float
    memory_bandwidth: float  # bytes/s
    peak_flops: dict = field(default_factory=dict)  # dtype -> FLOP/s (dense)
    interconnect_bandwidth: float | None = None  # bytes/s per direction, per GPU
    interconnect_latency: float | None = None  # s per collective hop
    sources: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        for name in ("memory_bytes", "memory_bandwidth"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"hardware {self.id!r}: {name} must be a positive number, got {value!r}")
        for dtype, value in self.peak_flops.items():
            if dtype != "tf32":  # tf32 is listed for reference; no Precision computes in it
                normalize_dtype(dtype, f"hardware {self.id!r} peak_flops")
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"hardware {self.id!r}: peak_flops[{dtype!r}] must be positive, got {value!r}")

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for a matmul in `dtype`, falling back to the next wider unit."""
        seen = dtype
        while dtype is not None:
            if dtype in self.peak_flops:
                return self.peak_flops[dtype]
            dtype = FALLBACK[dtype]
        if seen == "fp16" and "bf16" in self.peak_flops:  # same tensor-core rate on every listed part
            return self.peak_flops["bf16"]
        widest = max((d for d in self.peak_flops if d in BITS), key=lambda d: BITS[d], default=None)
        if widest is None:  # unknown peaks stay missing (data/HARDWARE.md): never guessed
            raise ValueError(f"hardware {self.id!r}: no sourced peak FLOP/s for {seen}; pass a hardware file "
                             f"with peak_flops.{seen} (or measure it: roofline validate)")
        return self.peak_flops[widest]

    @property
    def ridge_intensity(self) -> float:
        """FLOPs per byte at the roofline corner for bf16 matmuls (H100: 989e12 / 3.35e12 = 295)."""
        return self.peak("bf16") / self.memory_bandwidth


def _value(entry, where: str):
    if isinstance(entry, dict):
        if "value" not in entry:
            raise ValueError(f"{where}: expected a number or {{value, source}}, got keys {sorted(entry)}")
        return entry["value"], entry.get("source", "")
    return entry, ""


def hardware_from_dict(hw_id: str, raw: dict) -> Hardware:
    if not isinstance(raw, dict):
        raise ValueError(f"hardware {hw_id!r}: entry must be an object, got {type(raw).__name__}")
    sources = {}
    values = {}
    for key in ("memory_bytes", "memory_bandwidth_bytes_per_s"):
        if key not in raw:
            raise ValueError(f"hardware {hw_id!r}: missing field {key!r}")
        values[key], sources[key] = _value(raw[key], f"hardware {hw_id!r} {key}")
    peaks = {}
    for dtype, entry in (raw.get("peak_flops") or {}).items():
        peaks[dtype], sources[f"peak_flops.{dtype}"] = _value(entry, f"hardware {hw_id!r} peak_flops.{dtype}")
    link = raw.get("interconnect") or {}
    link_bw, sources["interconnect"] = _value(link.get("bytes_per_s"), "interconnect") if link.get("bytes_per_s") else (None, "")
    link_lat, _ = _value(link.get("latency_s"), "interconnect") if link.get("latency_s") else (None, "")
    return Hardware(
        id=hw_id,
        name=raw.get("name", hw_id),
        memory_bytes=values["memory_bytes"],
        memory_bandwidth=values["memory_bandwidth_bytes_per_s"],
        peak_flops=peaks,
        interconnect_bandwidth=link_bw,
        interconnect_latency=link_lat,
        sources=sources,
    )


def read_hardware_file(path: Path) -> dict[str, Hardware]:
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"hardware file {str(path)!r}: cannot read JSON ({err})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"hardware file {str(path)!r}: top level must be an object keyed by hardware id")
    return {hw_id: hardware_from_dict(hw_id, entry) for hw_id, entry in raw.items()}


@lru_cache(maxsize=1)
def _bundled() -> dict[str, Hardware]:
    return read_hardware_file(HARDWARE_FILE)


def bundled_hardware() -> dict[str, Hardware]:
    return dict(_bundled())


def load_hardware(name_or_path: str | Hardware) -> Hardware:
    """A bundled id (e.g. 'h100-sxm') or a path to a JSON file holding exactly one entry."""
    if isinstance(name_or_path, Hardware):
        return name_or_path
    text = str(name_or_path)
    if text.endswith(".json") or Path(text).is_file():
        entries = read_hardware_file(Path(text))
        if len(entries) != 1:
            raise ValueError(f"hardware file {text!r}: holds {len(entries)} entries; pass a file with one")
        return next(iter(entries.values()))
    table = _bundled()
    key = text.lower()
    if key not in table:
        raise ValueError(f"hardware: unknown id {text!r}; bundled ids are {', '.join(sorted(table))}, or pass a JSON path")
    return table[key]
