"""Engine profiles: what a serving engine reaches on a device, as named physical parameters.

An engine turns the ideal roofline into its own estimate through terms a reader can check:
- the fraction of the device's bandwidth its weight GEMVs stream at, and of its peak its GEMMs reach;
- how much slower its dequantizing GEMVs stream each quantized weight format (int8, int4, q4_0, ...);
- the fraction of bandwidth its decode attention reads the cache at, and how often its attention kernels
  read a GQA group's shared K/V again (once per group, or once per query head);
- its fixed cost per layer (kernels a layer x the latency of a launch), per step (the host) and per
  request (tokenizing, scheduling: paid once, in TTFT);
- the latency of one of its all-reduces (tensor parallelism: two a layer).

Each parameter has a unit, a physical bound and a note of the rows that pin it (`data/engines/*.yaml`).

On other devices. Efficiencies are fractions of the device's own datasheet roofs, so a profile fitted
on A100 rows prices an H100 at the same fractions: the same kernels, recompiled, reach similar
fractions of a newer part's roofs (the project's H100 harness streams at 0.69-0.81 of its datasheet,
gpt-fast's A100 rows at 0.83). Latencies (launch, host, request, all-reduce) transfer as seconds. Both
are assumptions, checked only where published rows exist: today the A100 alone.
An engine prices through the one step pricer: it is a field of `Deployment`, which takes its roofs
(`calibration`), its fixed costs and its all-reduce latency from it; nothing here computes a step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from .calibration import Calibration
from .precision import BITS
from .hardware import DATA_DIR
from .kv_memory import IDEAL_MEMORY, KvMemory, memory_from_document

ENGINES_DIR = DATA_DIR / "engines"

# name -> (unit, lower bound, upper bound, what it is)
PARAMETERS = {
    "bandwidth_efficiency": ("fraction", 0.0, 1.0, "of the datasheet bandwidth its 16-bit weight GEMVs stream at"),
    "flops_efficiency": ("fraction", 0.0, 1.0, "of the datasheet peak its large GEMMs reach"),
    "attention_bandwidth_efficiency": ("fraction", 0.0, 1.0, "of the datasheet bandwidth decode attention reads at"),
    "attention_flops_efficiency": ("fraction", 0.0, 1.0, "of the datasheet peak prefill attention reaches"),
    "layer_overhead_s": ("s", 0.0, math.inf, "per layer per step: kernels a layer x launch latency, not overlapped"),
    "step_overhead_s": ("s", 0.0, math.inf, "per step: host work (sampling, scheduling, Python)"),
    "request_overhead_s": ("s", 0.0, math.inf, "per request, once, in TTFT"),
    "allreduce_latency_s": ("s", 0.0, math.inf, "one all-reduce's fixed latency (two a layer under tp)"),
    # A kernel with one thread block per query head (TensorRT-LLM's masked MHA before XQA) reads a GQA
    # group's K/V once per query head, unless L2 catches the repeats; flash-decoding and XQA read it once.
    # Near the ridge a kernel neither streams at the bandwidth roof nor computes at the FLOP/s roof:
    # an op takes (c^p + m^p)^(1/p) (p = 1: compute and memory never overlap; inf: the sharp roofline).
    "corner": ("p", 1.0, math.inf, "sharpness of the roofline corner: an op takes (compute^p + memory^p)^(1/p)"),
    "gqa_rereads": ("share", 0.0, 1.0, "of a GQA group's other query heads whose attention reads the group's K/V "
                    "again (0: once per group; 1: once per query head)"),
}
# Absent from a file: the hardware's link latency; the sharp roofline; no re-reads.
OPTIONAL = ("allreduce_latency_s", "corner", "gqa_rereads")
QUANTIZED = "quantized_efficiency"  # weight format -> fraction of bandwidth_efficiency its GEMV reaches


@dataclass(frozen=True)
class Engine:
    name: str = "ideal"
    bandwidth_efficiency: float = 1.0
    flops_efficiency: float = 1.0
    attention_bandwidth_efficiency: float = 1.0
    attention_flops_efficiency: float = 1.0
    layer_overhead_s: float = 0.0
    step_overhead_s: float = 0.0
    request_overhead_s: float = 0.0
    allreduce_latency_s: float | None = None  # None: the hardware file's (or the assumed default)
    corner: float = math.inf
    gqa_rereads: float = 0.0
    quantized_efficiency: dict = field(default_factory=dict)  # e.g. {"int4": 0.6}; missing formats: 1
    pinned_by: dict = field(default_factory=dict)  # parameter -> the rows or measurement that pin it
    framework: str = ""  # the published rows' `framework` prefix this engine is fitted to
    fit: tuple = ()  # the parameters `roofline fit-engine` fits; the others keep their values
    priors: dict = field(default_factory=dict)  # fitted parameter -> its value before any row was seen
    prior_sources: dict = field(default_factory=dict)  # fitted parameter -> where its prior comes from
    memory: KvMemory = IDEAL_MEMORY  # how it sizes its KV pool (roofline.kv_memory); not fitted

    def __post_init__(self):
        for name, (unit, low, high, what) in PARAMETERS.items():
            value = getattr(self, name)
            if value is None and name == "allreduce_latency_s":
                continue
            check(self.name, name, value, low, high, unit, what)
        for fmt, value in self.quantized_efficiency.items():
            check(self.name, f"{QUANTIZED}.{fmt}", value, 0.0, 1.0, "fraction",
                  f"of bandwidth_efficiency a {fmt} GEMV streams at")

    @property
    def is_ideal(self) -> bool:
        return all(getattr(self, n) == getattr(IDEAL, n) for n in PARAMETERS) and not self.quantized_efficiency

    def prior(self) -> Engine:
        """This engine as it was before fitting: every fitted parameter back at its prior (for leave-one-out)."""
        from .engine_fit import with_values  # the fit's own setter, which knows the quantized names
        return with_values(self, list(self.priors), list(self.priors.values()))

    def calibration(self, weights: str, group: int = 1, experts: str | None = None) -> Calibration:
        """The engine's roofs for one weight format, as the step pricer's Calibration (fractions of the datasheet).

        experts: the routed experts' format (Precision.expert_format), whose GEMVs stream at its own
        quantized_efficiency; None: the same as `weights`.

        group: query heads sharing one K/V head (N/K). Reading the cache 1 + r (group - 1) times over is
        priced as softmax attention streaming the cache that many times slower (Calibration.attention_kv_reads):
        the bytes a step needs stay the model's, the engine's kernels move more of them. Constant-state scans
        keep the attention kernels' efficiency without the re-reads.
        """
        bandwidth = self.bandwidth_efficiency * self.quantized_efficiency.get(weights, 1.0)
        experts_bandwidth = bandwidth if experts is None else (
            self.bandwidth_efficiency * self.quantized_efficiency.get(experts, 1.0))
        reads = 1 + self.gqa_rereads * (group - 1)
        return Calibration(name=f"engine {self.name}", bandwidth_efficiency=bandwidth,
                           expert_bandwidth_efficiency=experts_bandwidth,
                           flops_efficiency={d: self.flops_efficiency for d in BITS},  # every matmul dtype
                           step_overhead_s=self.step_overhead_s, layer_overhead_s=self.layer_overhead_s,
                           corner=self.corner,
                           attention_bandwidth_efficiency=self.attention_bandwidth_efficiency,
                           attention_kv_reads=reads,
                           attention_flops_efficiency=self.attention_flops_efficiency)

    def as_document(self) -> dict:
        document = {"name": self.name, "framework": self.framework, "fit": list(self.fit)}
        if self.priors:
            document["priors"] = dict(self.priors)
        if self.prior_sources:
            document["prior_sources"] = dict(self.prior_sources)
        for name, (unit, low, high, what) in PARAMETERS.items():
            document[name] = {"value": getattr(self, name), "unit": unit, "bounds": [low, high], "what": what,
                              "pinned_by": self.pinned_by.get(name, "the ideal bound" if getattr(self, name) ==
                                                              getattr(IDEAL, name) else "a prior: nothing fitted")}
        document[QUANTIZED] = {fmt: {"value": v, "unit": "fraction", "bounds": [0.0, 1.0],
                                     "pinned_by": self.pinned_by.get(f"{QUANTIZED}.{fmt}", "")}
                               for fmt, v in self.quantized_efficiency.items()}
        if self.memory != IDEAL_MEMORY:
            document["memory"] = self.memory.as_document()
        return document


def check(engine: str, name: str, value, low: float, high: float, unit: str, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"engine {engine!r}: {name} must be a number ({unit}, {what}), got {value!r}")
    if not (low < value <= high if unit == "fraction" else low <= value <= high):
        bound = {"fraction": f"in ({low:g}, {high:g}]", "share": f"in [{low:g}, {high:g}]"}.get(unit, f">= {low:g}")
        raise ValueError(f"engine {engine!r}: {name} = {value!r} is out of its bounds: it must be {bound} ({what})")


IDEAL = Engine()


def known_engines() -> list[str]:
    return sorted(p.stem for p in ENGINES_DIR.glob("*.yaml"))


def engine_from_document(raw, where: str) -> Engine:
    if not isinstance(raw, dict):
        raise ValueError(f"engine {where}: expected a mapping of parameters, got {type(raw).__name__}")
    values, pinned = {}, {}
    for name in PARAMETERS:
        if name not in raw:
            if name in OPTIONAL:
                continue
            raise ValueError(f"engine {where}: parameter {name!r} is missing ({PARAMETERS[name][3]}); add it with "
                             f"its value, bounds {PARAMETERS[name][1:3]} and what pins it")
        entry = raw[name]
        values[name] = entry.get("value") if isinstance(entry, dict) else entry
        if isinstance(entry, dict) and entry.get("pinned_by"):
            pinned[name] = entry["pinned_by"]
    quantized = {}
    for fmt, entry in (raw.get(QUANTIZED) or {}).items():
        quantized[str(fmt)] = entry.get("value") if isinstance(entry, dict) else entry
        if isinstance(entry, dict) and entry.get("pinned_by"):
            pinned[f"{QUANTIZED}.{fmt}"] = entry["pinned_by"]
    fit = raw.get("fit") or []
    unknown = [n for n in fit if n not in PARAMETERS and not str(n).startswith(QUANTIZED + ".")]
    if unknown:
        raise ValueError(f"engine {where}: fit lists unknown parameters {unknown}; use {', '.join(PARAMETERS)} or "
                         f"{QUANTIZED}.FORMAT")
    priors = raw.get("priors") or {}
    if not isinstance(priors, dict) or set(priors) - set(fit):
        raise ValueError(f"engine {where}: priors must map fitted parameters (those in fit) to their values")
    sources = raw.get("prior_sources") or {}
    if not isinstance(sources, dict) or set(sources) - set(priors):
        raise ValueError(f"engine {where}: prior_sources must map parameters in priors to where each prior comes from")
    return Engine(name=str(raw.get("name") or where), quantized_efficiency=quantized, pinned_by=pinned,
                  framework=str(raw.get("framework") or ""), fit=tuple(fit), priors=dict(priors),
                  prior_sources={str(k): str(v) for k, v in sources.items()},
                  memory=memory_from_document(raw.get("memory"), where), **values)


def load_engine(name_or_path: str | Engine | None) -> Engine:
    """A bundled engine by name (data/engines/NAME.yaml), or a user's YAML path; None: ideal."""
    if name_or_path is None or isinstance(name_or_path, Engine):
        return name_or_path or IDEAL
    text = str(name_or_path)
    if text in known_engines() and not Path(text).is_file():
        return _bundled(text)
    return _load_path(text)


@lru_cache(maxsize=None)
def _bundled(name: str) -> Engine:
    """A bundled profile, parsed once: every sweep asks for its engine by name."""
    return _load_path(str(ENGINES_DIR / f"{name}.yaml"))


def _load_path(text: str) -> Engine:
    path = Path(text) if text.endswith((".yaml", ".yml")) or Path(text).is_file() else ENGINES_DIR / f"{text}.yaml"
    if not path.is_file():
        raise ValueError(f"engine {text!r}: unknown; use one of {', '.join(known_engines())} or a YAML file path")
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"engine file {str(path)!r}: cannot read YAML ({err})") from None
    return engine_from_document(raw, str(path))
