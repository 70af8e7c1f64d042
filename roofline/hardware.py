"""Hardware: the roofs (peak FLOP/s per dtype, memory bandwidth, capacity, interconnect), SI units.

Values come from `data/hardware.json`, where each number carries its source; a user's own file
in the same shape works too (plain numbers are accepted in place of {value, source}).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .userfile import parse_json
from .precision import normalize_dtype

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
HARDWARE_FILE = DATA_DIR / "hardware.json"

# When a device has no units for a dtype, the matmul runs at the next wider dtype it has
# (an A100 has no fp8 tensor cores: fp8 weights are dequantized and multiplied in bf16). Never for nvfp4: a W4A4
# matmul's inputs are 4-bit on FP4 tensor cores, and a device without them runs a different kernel (the weights
# dequantized against bf16 or fp8 inputs), which its Precision must say; peak_dtype refuses it (FP4_FIX).
FALLBACK = {"int4": "int8", "int8": "bf16", "fp8": "bf16", "bf16": "fp16", "fp16": "fp32", "fp32": None,
            "mxfp4": "fp8", "nvfp4": None}
FP4_FIX = ("fix: activations bf16 (weight-only W4A16, as engines run NVFP4 checkpoints on Hopper) or fp8 (W4A8), or "
           "a device with FP4 tensor cores (b200, b300, gb200, gb300: peak_flops.nvfp4)")


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
    # What the runtime sees (CUDA's total): more than the datasheet's decimal GB; None: not sourced, the datasheet's
    usable_memory_bytes: float | None = None
    # Between nodes (disaggregated pools past one node): the scale-out NIC's bytes/s per direction, per GPU
    network_bandwidth: float | None = None
    network_latency: float | None = None  # s; None: not sourced
    gpus_per_node: int | None = None  # GPUs sharing the interconnect (one NVSwitch domain)

    def __post_init__(self):
        for name in ("memory_bytes", "memory_bandwidth"):
            if not _positive(getattr(self, name)):
                raise ValueError(f"hardware {self.id!r}: {name} must be a positive number, got {getattr(self, name)!r}")
        if not isinstance(self.peak_flops, dict):
            raise ValueError(f"hardware {self.id!r}: peak_flops must map dtypes to FLOP/s, got {self.peak_flops!r}")
        for dtype, value in self.peak_flops.items():
            if dtype != "tf32":  # tf32 is listed for reference; no Precision computes in it
                normalize_dtype(dtype, f"hardware {self.id!r} peak_flops")
            if not _positive(value):
                raise ValueError(f"hardware {self.id!r}: peak_flops[{dtype!r}] must be positive, got {value!r}")
        if self.usable_memory_bytes is not None and not _positive(self.usable_memory_bytes):
            raise ValueError(f"hardware {self.id!r}: usable_memory_bytes must be a positive number of bytes, got "
                             f"{self.usable_memory_bytes!r}")
        for name in ("interconnect_bandwidth", "interconnect_latency", "network_bandwidth", "network_latency"):
            value = getattr(self, name)
            if value is not None and not (_positive(value) or (name.endswith("latency") and value == 0)):
                raise ValueError(f"hardware {self.id!r}: {name} must be a positive number, got {value!r}")
        if self.gpus_per_node is not None and not (isinstance(self.gpus_per_node, int)
                                                   and not isinstance(self.gpus_per_node, bool) and self.gpus_per_node >= 1):
            raise ValueError(f"hardware {self.id!r}: gpus_per_node must be a whole number >= 1, got {self.gpus_per_node!r}")

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for a matmul in `dtype`, falling back to the next wider unit (never a narrower
        one: an fp8-only file would price bf16 matmuls 2x optimistic)."""
        return self.peak_flops[self.peak_dtype(dtype)]

    def peak_dtype(self, dtype: str) -> str:
        """The dtype whose units run a `dtype` matmul here: itself, or the next wider one the device has."""
        seen = dtype
        while dtype is not None:
            if dtype in self.peak_flops:
                return dtype
            dtype = FALLBACK[dtype]
        if seen == "fp16" and "bf16" in self.peak_flops:  # same tensor-core rate on every listed part
            return "bf16"
        listed = ", ".join(sorted(self.peak_flops)) or "none"
        if seen == "nvfp4":
            raise ValueError(f"hardware {self.id!r}: no FP4 tensor cores for W4A4 NVFP4 matmuls (activations nvfp4; "
                             f"peak_flops lists: {listed}); {FP4_FIX}")
        # unknown peaks stay missing (data/HARDWARE.md): never guessed
        raise ValueError(f"hardware {self.id!r}: no sourced peak FLOP/s for {seen} matmuls, nor a wider unit's "
                         f"(peak_flops lists: {listed}; a narrower unit's peak would be optimistic); fix: add "
                         f"peak_flops.{seen} (dense FLOP/s) to the hardware file, or measure it (roofline validate)")

    @property
    def capacity_bytes(self) -> float:
        """Bytes the runtime can use: what CUDA reports where sourced, else the datasheet's."""
        return self.memory_bytes if self.usable_memory_bytes is None else self.usable_memory_bytes


MAX_QUANTITY = 1e18  # bytes, bytes/s or FLOP/s in a file: beyond an exa-unit a device number is a typo


def _positive(value, ceiling: float = math.inf) -> bool:
    """A finite positive number; a file's numbers also stay under MAX_QUANTITY (what-ifs in code may not)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 0 < value <= ceiling)


ENTRY_SHAPE = ('{"my-gpu": {"name": "...", "memory_bytes": 8e10, "memory_bandwidth_bytes_per_s": 3.35e12, '
               '"peak_flops": {"bf16": 9.89e14}, "interconnect": {"bytes_per_s": 4.5e11, "latency_s": 1e-5}}}')


def _value(entry, where: str):
    """A number or {value, source}: (value, source); anything else names the field and the shape it needs."""
    if isinstance(entry, dict):
        if "value" not in entry:
            raise ValueError(f"{where}: expected a number or {{value, source}}, got keys {sorted(entry)}; "
                             f"fix: give a number (SI units) or {{\"value\": number, \"source\": \"...\"}}")
        entry, source = entry["value"], entry.get("source", "")
    else:
        source = ""
    if not _positive(entry, MAX_QUANTITY) and not (where.endswith("latency_s") and entry == 0
                                                   and not isinstance(entry, bool)):
        raise ValueError(f"{where}: expected a positive number (SI units, up to {MAX_QUANTITY:g}), got {entry!r}; "
                         f"fix: give a number "
                         f"such as 3.35e12, or {{\"value\": number, \"source\": \"...\"}}")
    return entry, str(source)


def _object(raw, where: str, shape: str) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object {shape}, got {raw!r}; fix: write it as {shape}")
    return raw


def _link(raw: dict, hw_id: str, key: str, sources: dict, shape: str) -> tuple:
    """A link's (bytes_per_s, latency_s), each None when absent; its bandwidth's source goes into `sources[key]`."""
    link = _object(raw.get(key), f"hardware {hw_id!r} {key}", shape)
    bandwidth, latency = None, None
    if link.get("bytes_per_s") is not None:
        bandwidth, sources[key] = _value(link["bytes_per_s"], f"hardware {hw_id!r} {key}.bytes_per_s")
    if link.get("latency_s") is not None:
        latency, _ = _value(link["latency_s"], f"hardware {hw_id!r} {key}.latency_s")
    return bandwidth, latency


def hardware_from_dict(hw_id: str, raw: dict) -> Hardware:
    if not isinstance(raw, dict):
        raise ValueError(f"hardware {hw_id!r}: entry must be an object of fields, got {raw!r}; fix: key the file by a "
                         f"hardware id, e.g. {ENTRY_SHAPE}")
    sources = {}
    values = {}
    for key in ("memory_bytes", "memory_bandwidth_bytes_per_s"):
        if key not in raw:
            raise ValueError(f"hardware {hw_id!r}: missing field {key!r}; fix: add it in SI units, e.g. {ENTRY_SHAPE}")
        values[key], sources[key] = _value(raw[key], f"hardware {hw_id!r} {key}")
    peaks = {}
    for dtype, entry in _object(raw.get("peak_flops"), f"hardware {hw_id!r} peak_flops",
                                '{"bf16": 9.89e14, "fp8": 1.979e15} (dense FLOP/s per dtype)').items():
        peaks[dtype], sources[f"peak_flops.{dtype}"] = _value(entry, f"hardware {hw_id!r} peak_flops.{dtype}")
    link_bw, link_lat = _link(raw, hw_id, "interconnect", sources, '{"bytes_per_s": 4.5e11, "latency_s": 1e-5} '
                              '(per GPU, per direction)')
    net_bw, net_lat = _link(raw, hw_id, "network", sources, '{"bytes_per_s": 5e10, "latency_s": 5e-6} '
                            '(per GPU, per direction, between nodes)')
    per_node = None
    if raw.get("gpus_per_node") is not None:
        per_node, sources["gpus_per_node"] = _value(raw["gpus_per_node"], f"hardware {hw_id!r} gpus_per_node")
        if not float(per_node).is_integer():
            raise ValueError(f"hardware {hw_id!r} gpus_per_node: expected a whole number of GPUs, got {per_node!r}; "
                             "fix: e.g. 8")
        per_node = int(per_node)
    usable = None
    if raw.get("usable_memory_bytes") is not None:
        usable, sources["usable_memory_bytes"] = _value(raw["usable_memory_bytes"],
                                                        f"hardware {hw_id!r} usable_memory_bytes")
    name = raw.get("name", hw_id)
    return Hardware(
        id=hw_id,
        name=name if isinstance(name, str) else str(hw_id),
        memory_bytes=values["memory_bytes"],
        memory_bandwidth=values["memory_bandwidth_bytes_per_s"],
        peak_flops=peaks,
        interconnect_bandwidth=link_bw,
        interconnect_latency=link_lat,
        sources=sources,
        usable_memory_bytes=usable,
        network_bandwidth=net_bw,
        network_latency=net_lat,
        gpus_per_node=per_node,
    )


def read_hardware_file(path: Path) -> dict[str, Hardware]:
    where = f"hardware file {str(path)!r}"
    try:
        content = Path(path).read_bytes()
    except OSError as err:
        raise ValueError(f"{where}: cannot read it ({err.strerror}); fix: pass a readable file written as "
                         f"{ENTRY_SHAPE}") from None
    raw = parse_json(content, where, f"write it as {ENTRY_SHAPE}")
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: top level must be an object keyed by hardware id; fix: write it as {ENTRY_SHAPE}")
    if "memory_bytes" in raw or "memory_bandwidth_bytes_per_s" in raw:
        raise ValueError(f"{where}: the fields sit at the top level, not under a hardware id; fix: wrap them in "
                         f"an id, e.g. {ENTRY_SHAPE}")
    entries = {}
    for hw_id, entry in raw.items():
        try:
            entries[hw_id] = hardware_from_dict(hw_id, entry)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
    return entries


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


# A GPU's name as torch reports it or a paper states it -> its entry in data/hardware.json: every part of a
# pattern must appear (case-insensitive), first match wins. An A100 comes in 40 and 80 GB: its name must say
# which (torch's always does), a bare "A100" matches none rather than a guess.
GPU_NAMES = ((("A100", "80GB"), "a100-80gb"), (("A100", "40GB"), "a100-40gb"), (("H100", "PCIe"), "h100-pcie"),
             (("H100",), "h100-sxm"), (("H200",), "h200"), (("L40S",), "l40s"), (("A10G",), "a10g"), (("L4",), "l4"),
             (("4090",), "rtx-4090"), (("MI300X",), "mi300x"), (("GB300",), "gb300"), (("GB200",), "gb200"),
             (("B300",), "b300"), (("B200",), "b200"))  # GB before B: "GB200" holds "B200"


def hardware_id_for_gpu(name: str) -> str | None:
    """The bundled hardware id a GPU's name denotes (GPU_NAMES), or None."""
    text = name.lower().replace(" ", "").replace("-", "")
    for parts, hw_id in GPU_NAMES:
        if all(part.lower().replace(" ", "") in text for part in parts):
            return hw_id
    return None
