"""The study of one model on one or more devices, as data: every table a DataFrame of numbers.

`build_study` runs the library (analyze, sweep, crossovers, derivations, speculation, tensor
parallelism) and returns a `Study`: tables of numbers, the derivation as sympy, the figures as PNG
bytes. `report_render` turns it into Markdown, HTML, CSV rows and JSON; `cli_report` writes the
files. The lecture's napkin (weights + KV at the prompt length, read once per step) comes from the
library's metrics and is shown next to the roofline numbers, labelled as such.
"""
from __future__ import annotations

import math
import platform
import re
from dataclasses import dataclass, field, replace
from importlib import metadata

import numpy as np
import pandas as pd
import sympy as sp

from .. import __version__, derivations
from ..serving import constant_state
from ..serving import crossovers
from ..api import Analysis, analyze, sweep
from ..deployment import Deployment
from ..engine import IDEAL, Engine, load_engine
from ..fitting.engine_fit import accuracy
from ..fitting.published import rows_for
from ..models.config import MEASURED_DIMS, MEASURED_OPTIONAL_DIMS, ModelConfig, load_model, measured_config
from .report_whatifs import sensitivities, whatifs
from ..hardware import Hardware, load_hardware
from ..precision import Precision

DEFAULTS = {"model": "llama-2-13b", "hardware": ("h100-sxm",), "batch": (1, 64, 256), "prompt": 1024, "gen": 128}
CURVE_BATCHES = 2 ** np.arange(0, 13)  # latency-throughput: 1 .. 4096, plus the memory wall
REGIME_BATCHES = np.unique(np.round(np.geomspace(1, 4096, 25)))
REGIME_CONTEXTS = np.unique(np.round(np.geomspace(128, 131072, 21)))
STATE_SCANS = ("ssd_scan", "selective_scan", "delta_rule", "lightning_attention")  # roofline.state_ops
STATE_CONTEXTS = 2 ** np.arange(10, 21)  # 1k .. 1M tokens: the cache of one sequence against its context
SCAN_LIMIT = 8192  # crossovers are searched over every whole batch / prompt up to this


@dataclass(frozen=True)
class ValidationInput:
    """A harness fit's engine profile (fractions of `reference`'s roofs, plus overheads) and/or measured step times.

    fit: what the fit reported (held-out error per phase, sources), shown as given.
    measurements: rows of the validation CSVs (model dims, dtype, phase, batch, context, time_s).
    """
    engine: Engine | None
    reference: Hardware
    fit: dict
    measurements: pd.DataFrame | None
    source: str


@dataclass(frozen=True)
class Validation:
    given: ValidationInput
    comparison: pd.DataFrame | None  # per measurement: measured_s, ideal_s, calibrated_s, error


@dataclass(frozen=True)
class DeviceStudy:
    hardware: Hardware
    analysis: Analysis
    prefill: pd.DataFrame
    decode: pd.DataFrame
    memory: pd.DataFrame
    curve: pd.DataFrame  # decode over many batches at the prompt length (latency-throughput)
    regime: pd.DataFrame  # decode over batch x context
    crossovers: pd.DataFrame
    sensitivities: pd.DataFrame
    whatifs: pd.DataFrame
    validation: Validation | None
    achievable: pd.DataFrame | None = None  # with an engine: its estimate beside the ideal, the decode gap by term


@dataclass(frozen=True)
class Study:
    inputs: dict
    config: ModelConfig
    precision: Precision
    software: dict
    derivation: list  # (title, sympy expression, what it tends to / its value)
    terms: pd.DataFrame  # model_terms: one layer's MLP and attention in B and S
    devices: tuple
    figures: dict = field(default_factory=dict, repr=False)  # file name -> PNG bytes
    plan: object = None  # report_plan.PlanSection when latency targets are given
    # Models with constant-state layers: one sequence's cache against the context (KV, state, the
    # all-attention twin's) and the model against its twin on the first device (constant_state).
    state_cache: pd.DataFrame | None = None
    state_walls: pd.DataFrame | None = None
    # With an engine fitted to published rows: engine_fit.accuracy (per family, and each row's point).
    engine_accuracy: dict | None = None


def build_study(model: str | ModelConfig = DEFAULTS["model"], hardware=DEFAULTS["hardware"],
                batch=DEFAULTS["batch"], prompt: int = DEFAULTS["prompt"], gen: int = DEFAULTS["gen"],
                weights: str = "bf16", kv: str = "bf16", validation: dict | None = None, plots: bool = True,
                progress=None, engine: str | None = None, slo: dict | None = None, experts: str | None = None) -> Study:
    """The whole study; validation maps a hardware id to the ValidationInput shown in its section 7;
    engine (data/engines name or YAML) adds section 8, its achievable times beside the ideal bound;
    slo (rate, ttft_s, tpot_s and optionally e2e_s) adds the plan section (roofline.study.report_plan).

    progress(done, total, label) is called between steps (the CLI draws a bar with it).
    """
    config = load_model(model)
    devices = [load_hardware(h) for h in ([hardware] if isinstance(hardware, (str, Hardware)) else hardware)]
    if not devices:
        raise ValueError("hardware: give at least one hardware id")
    if len({d.id for d in devices}) != len(devices):
        raise ValueError(f"hardware: repeated id in {[d.id for d in devices]}")
    precision = Precision(weights=weights, kv=kv, experts=experts)
    values = np.atleast_1d(np.asarray(batch, dtype=float))
    if values.size == 0 or np.any(values <= 0) or np.any(values != np.round(values)):
        raise ValueError(f"batch: must be positive whole numbers, got {batch!r}")
    batches = sorted({int(b) for b in values})
    inputs = {"model": config.name, "hardware": [d.id for d in devices], "batch": batches, "prompt": int(prompt),
              "gen": int(gen), "weights": precision.weights, "experts": precision.expert_format, "kv": precision.kv,
              "activations": precision.activations,
              "engine": engine or "ideal"}
    total, done = len(devices) + 1 + int(plots), 0

    def starting(label):  # progress(steps done, steps in all, what runs now)
        nonlocal done
        if progress:
            progress(done, total, label)
        done += 1

    results = []
    for hw in devices:
        starting(f"{hw.id}: tables, sweeps, crossovers, what-ifs")
        analysis = analyze(config, hw, batch=batches, prompt=prompt, gen=gen, precision=precision)
        device = _device(config, hw, precision, analysis, inputs, (validation or {}).get(hw.id))
        if engine is not None:
            device = replace(device, achievable=achievable(config, hw, precision, batches, prompt, gen, engine))
        results.append(device)
    starting("derivation")
    derivation = _derivation(config, devices, precision)
    study = Study(inputs, config, precision, _software(), derivation, model_terms(config, precision), tuple(results))
    if slo:
        from .report_plan import plan_section
        study = replace(study, plan=plan_section(config, devices, precision, inputs, **slo))
    if engine is not None:
        study = replace(study, engine_accuracy=engine_accuracy(engine))
    if config.has_state:
        study = replace(study, state_cache=constant_state.cache_against_context(config, STATE_CONTEXTS, precision),
                        state_walls=constant_state.hybrid_walls(config, devices[0], precision, prompt, gen))
    if plots:
        starting("plots")
        study = replace(study, figures=_figures(study))
    if progress:
        progress(total, total, "done")
    return study


def achievable(config, hw, precision, batches, prompt, gen, engine) -> pd.DataFrame:
    """Per batch: the engine's TTFT and TPOT beside the ideal bound's, and its decode gap by named term (ms)."""
    analysis = analyze(config, hw, batch=batches, prompt=prompt, gen=gen, precision=precision, engine=engine,
                       allow_beyond_window=True)
    rows = []
    for m in analysis.records():
        gap = analysis.engine_gap(int(m["batch"]), int(prompt))
        rows.append({"batch": m["batch"], "ideal TTFT (ms)": m["ideal_ttft_s"] * 1e3, "TTFT (ms)": m["ttft_s"] * 1e3,
                     "ideal TPOT (ms)": m["ideal_tpot_s"] * 1e3, "TPOT (ms)": m["tpot_s"] * 1e3,
                     **{f"+{term} (ms)": seconds * 1e3 for term, seconds in gap.items()}})
    return pd.DataFrame(rows)


def engine_accuracy(engine: str) -> dict | None:
    """How close the engine is to the published rows it was fitted to (leave-one-out); None without rows."""
    profile = load_engine(engine)
    rows = rows_for(profile.framework)
    return accuracy(profile, rows) if rows else None


def _device(config, hw, precision, analysis, inputs, validation) -> DeviceStudy:
    m = pd.concat([analysis.metrics, napkin_columns(analysis.metrics, hw)[list(NAPKIN_SHOWN)]], axis=1)
    prefill = m[["batch", "prefill_flops", "prefill_bytes", "prefill_intensity", "ttft_s", "prefill_bound"]]
    decode = m[["batch", "decode_flops", "decode_bytes", "decode_intensity", "tpot_s", "tokens_per_s",
                "napkin_tpot_s", "napkin_tokens_per_s", "decode_bound"]]
    memory = m[["batch", "weight_bytes", "napkin_kv_bytes", "napkin_memory_bytes", "napkin_fits", "kv_bytes",
                "workspace_bytes", "memory_bytes", "fits", "max_batch"]]
    common = _sweep_args(inputs, precision)
    wall = int(m["max_batch"].iloc[0])
    curve = sweep(config, hw, batch=np.union1d(CURVE_BATCHES, [wall] if wall > 0 else []),
                  context=inputs["prompt"], **common)
    regime = sweep(config, hw, batch=REGIME_BATCHES, context=REGIME_CONTEXTS, **common)
    return DeviceStudy(hw, analysis, prefill.reset_index(drop=True), decode, memory, curve, regime,
                       _crossovers(config, hw, precision, analysis, inputs),
                       sensitivities(config, hw, precision, inputs),
                       whatifs(config, hw, precision, analysis, inputs),
                       _validation(validation) if validation else None)


def _sweep_args(inputs: dict, precision: Precision) -> dict:
    return {"gen": inputs["gen"], "weights": precision.weights, "kv": precision.kv, "experts": precision.experts,
            "e2e": False}


NAPKIN_SHOWN = ("napkin_fits",)  # the napkin column the library does not give


def napkin_columns(metrics: pd.DataFrame, hw: Hardware) -> pd.DataFrame:
    """The lecture's estimate per row: the library's napkin KV, memory, TPOT and tokens/s (KV at prompt_len
    only, no activations, bytes / bandwidth, every replica counted), and whether that memory fits."""
    napkin = metrics[["napkin_kv_bytes", "napkin_memory_bytes", "napkin_tpot_s", "napkin_tokens_per_s"]]
    return napkin.assign(napkin_fits=napkin["napkin_memory_bytes"] <= hw.memory_bytes)


def _first(frame: pd.DataFrame, column: str, mask) -> float:
    hits = frame.loc[mask, column]
    return float(hits.min()) if len(hits) else math.nan


def _solved(quantity: str, solve, how: str) -> tuple:
    """A row from a roofline.serving.crossovers solution: its value and the expression it came from."""
    try:
        found = solve()
    except ValueError as err:  # no sourced peak, or a model the closed form does not cover
        return quantity, math.nan, "", f"unknown: {err}"
    expression = found.expression
    text = f"{expression.lhs} = {expression.rhs}" if isinstance(expression, sp.Eq) else str(expression)
    return quantity, found.value, text, how + (f"; {found.note}" if found.note else "")


def _crossovers(config, hw, precision, analysis, inputs) -> pd.DataFrame:
    """Closed forms from roofline.serving.crossovers, and the first batch / prompt where a sweep changes regime."""
    prompt, gen, common = inputs["prompt"], inputs["gen"], _sweep_args(inputs, precision)
    by_batch = sweep(config, hw, batch=np.arange(1, SCAN_LIMIT + 1), context=prompt, **common)
    by_prompt = sweep(config, hw, batch=1, context=np.arange(1, SCAN_LIMIT + 1), **common)
    bound, scan = by_batch["decode_bound"], f"first in a sweep over 1..{SCAN_LIMIT}"
    d = Deployment(config, hw, precision)  # the report's crossovers are the ideal bound's
    rows = [
        _solved("critical batch: decode weight matmuls turn compute-bound",
                lambda: crossovers.critical_batch(d), "2B / b_w = peak / bandwidth"),
        *([_solved("expert critical batch: routed-expert matmuls turn compute-bound",
                   lambda: crossovers.expert_critical_batch(d),
                   "B·k / E(1 − (1 − k/E)^B) = critical batch")] if config.n_experts else []),
        (f"batch where the whole decode step turns compute-bound (S={prompt})",
         _first(by_batch, "batch", bound == "compute"), "", scan),
        (f"batch where KV reads overtake weight reads in decode (S={prompt})",
         _first(by_batch, "batch", bound == "kv-bandwidth"), "", scan),
        _solved(f"batch reaching 90% of the largest decode tokens/s (S={prompt})",
                lambda: crossovers.saturation_batch(d, prompt), "B / t(B) = 0.9 / g"),
        _solved(f"batch past which doubling it adds < 10% tokens/s (S={prompt})",
                lambda: crossovers.diminishing_batch(d, prompt), "t(B) = a + bB"),
        _solved("context where one sequence's KV cache equals the weights read",
                lambda: crossovers.kv_equals_weights_context(d), "KV bytes read = weight bytes read"),
        ("prompt length where prefill turns compute-bound (B=1)",
         _first(by_prompt, "prompt_len", by_prompt["prefill_bound"] == "compute"), "", scan),
        _solved(f"memory wall: largest batch that fits (S={prompt}+{gen})",
                lambda: crossovers.max_batch(d, prompt, gen), "weights + B x per sequence <= M"),
    ]
    return pd.DataFrame(rows, columns=["quantity", "value", "expression", "how"])


def _validation(given: ValidationInput) -> Validation:
    """Each measured step time against the library's prediction for the measured model (ideal, calibrated)."""
    rows = given.measurements
    if rows is None or not len(rows):
        return Validation(given, None)
    parts = []
    dims = (*MEASURED_DIMS, *MEASURED_OPTIONAL_DIMS)
    for key, group in rows.groupby(["model", *dims, "dtype", "phase", "context"], sort=True):
        name, values, (dtype, phase, context) = key[0], key[1:-3], key[-3:]
        config = measured_config(str(name), dict(zip(dims, values)))
        # The cache in the dtype the harness ran it in: a `kv` column where recorded, else the dtype.
        kv = group["kv"].iloc[0] if "kv" in group and isinstance(group["kv"].iloc[0], str) else dtype
        precision, metric = Precision(dtype, dtype, kv), "tpot_s" if phase == "decode" else "ttft_s"
        run = {"batch": group["batch"].to_numpy(), "prompt": int(context), "gen": 1, "precision": precision}
        ideal = analyze(config, given.reference, **run).metrics[metric].to_numpy()
        fitted = analyze(config, given.reference, engine=given.engine or IDEAL, **run).metrics[metric]
        parts.append(group[["model", "dtype", "phase", "batch", "context"]].assign(
            measured_s=group["time_s"].to_numpy(), ideal_s=ideal, calibrated_s=fitted.to_numpy()))
    comparison = pd.concat(parts).sort_values(["model", "dtype", "phase", "context", "batch"], kind="stable")
    comparison = comparison.reset_index(drop=True)
    predicted = comparison["calibrated_s"] if given.engine else comparison["ideal_s"]
    comparison["error"] = predicted / comparison["measured_s"] - 1
    return Validation(given, comparison)


def _derivation(config, devices, precision) -> list:
    """(title, expression, limit or value) rows from roofline.derivations."""
    mlp, mlp_limit = derivations.mlp_intensity()
    attention = derivations.attention_limits()
    rows = [("Gated MLP intensity (bf16, B sequences of T tokens)", mlp,
             f"-> {mlp_limit} as D, F -> oo; decode (T = 1): B; prefill (T = S): B S"),
            ("Attention intensity (MHA, bf16, every query-key pair)", attention["general"],
             (f"prefill: {attention['prefill']}; decode: {attention['decode']} -> "
              f"{attention['decode_long_context']} (no B: batching does not help)"))]
    for hw in devices:
        try:
            expr, value = derivations.critical_batch(hw, precision)
            ridge = derivations.accelerator_intensity(hw, precision.weight_matmul_dtype)
            rows.append((f"Critical batch on {hw.name}", expr, f"I_hw = {ridge:.0f} FLOP/byte: B = {value:.0f}"))
        except ValueError as err:
            rows.append((f"Critical batch on {hw.name}", sp.nan, str(err)))
    expr, value = derivations.kv_equals_weights_context(config, precision)
    rows.append(("Context where one sequence's KV equals the weights", expr, f"S = {value:.0f}"))
    if config.has_state:
        rows += _state_derivation(config, precision)
    napkin = derivations.lecture_napkin(config, devices[0])
    rows.append(("Lecture napkin memory (bytes) for this model", napkin["memory"], "weights + KV at S, bf16"))
    return rows


def _state_derivation(config, precision) -> list:
    """The lecture's contrast: a constant-state layer's decode step against attention's, and where the KV wall moves."""
    state = derivations.state_decode_intensity()
    twin = constant_state.attention_twin(config)
    twin_expr, twin_wall = derivations.kv_equals_weights_context(twin, precision)
    even, even_value = constant_state.break_even_context(config, precision)
    return [("Constant-state decode intensity (Mamba-2 SSD step, T = 1, bf16 activations)", state["general"],
             f"no S, and B only through the per-head constants: -> {state['limit']} as D_i, N_s -> oo "
             f"({state['fp32_state']} FLOP/byte with an fp32 state)"),
            ("Context where the cache of the all-attention twin (every state mixer made attention) equals the "
             "weights", twin_expr, f"S = {twin_wall:.0f}"),
            ("Context past which this model's cache per sequence is smaller than its all-attention twin's", even,
             f"S = {even_value:.0f}")]


def model_terms(config: ModelConfig, precision: Precision) -> pd.DataFrame:
    """FLOPs, bytes and intensity of one layer's MLP and attention, in B and S, with this model's numbers."""
    from ..model import DECODE, PREFILL, Options, phase_ops
    from ..symbols import b_a, b_e, b_kv, b_w
    widths = {b_w: sp.nsimplify(precision.weight_bytes), b_a: sp.nsimplify(precision.activation_bytes),
              b_kv: sp.nsimplify(precision.kv_bytes), b_e: sp.nsimplify(precision.expert_bytes)}
    parts = (("MLP", lambda name: name.startswith(("mlp", "experts", "shared_experts", "router"))),
             ("attention", lambda name: name == "attention"),
             ("constant-state scan", lambda name: name in STATE_SCANS))
    rows = []
    for phase in (PREFILL, DECODE):
        placed = [p for p in phase_ops(config, Options(), phase) if p.op_name.in_layers]
        for part, pick in parts:
            # the first kind of layer that has this part (a hybrid's attention may sit in its second group)
            group = next((p.group for p in placed if pick(p.op.name)), None)
            if group is None:
                continue
            ops = [p.op for p in placed if p.group == group and pick(p.op.name)]
            flops = sp.expand(sum((op.cost.flops for op in ops), sp.Integer(0)).xreplace(widths))
            moved = sp.expand(sum((op.cost.bytes for op in ops), sp.Integer(0)).xreplace(widths))
            rows.append({"part": part, "phase": phase, "layer": group, "flops": flops, "bytes": moved,
                         "intensity": sp.simplify(flops / moved) if moved != 0 else sp.nan})
    return pd.DataFrame(rows)


def _software() -> dict:
    versions = {"roofline": __version__, "python": platform.python_version()}
    for package in ("numpy", "sympy", "pandas", "matplotlib"):
        versions[package] = metadata.version(package)
    return versions


def figure_name(kind: str, hw_id: str | None = None) -> str:
    return f"{kind}-{re.sub(r'[^a-z0-9.]+', '-', hw_id.lower())}.png" if hw_id else f"{kind}.png"


def _figures(study: Study) -> dict[str, bytes]:
    from ..views import plots
    figures, inputs = {}, study.inputs
    marks = [(b, inputs["prompt"]) for b in inputs["batch"]]
    for dev in study.devices:
        ops = pd.concat([dev.analysis.op_table(b, inputs["prompt"]).assign(batch=b)
                         for b in sorted({inputs["batch"][0], inputs["batch"][-1]})], ignore_index=True)
        figures[figure_name("roofline", dev.hardware.id)] = plots.roofline_chart(dev.hardware, ops)
        figures[figure_name("regime", dev.hardware.id)] = plots.regime_map(
            dev.regime, marks, f"Decode regime on {dev.hardware.name} ({study.config.name})")
        if dev.achievable is not None:  # the first batch's decode gap, term by term
            row = dev.achievable.iloc[0]
            gap = pd.Series({c[1:-5]: row[c] / 1e3 for c in dev.achievable if c.startswith("+")})
            figures[figure_name("engine-gap", dev.hardware.id)] = plots.engine_waterfall(
                row["ideal TPOT (ms)"] / 1e3, gap, inputs["engine"],
                f"{study.config.name} on {dev.hardware.name}, B={int(row['batch'])}: ideal to {inputs['engine']}")
        if dev.validation and dev.validation.comparison is not None:
            comparison = dev.validation.comparison
            which = "calibrated_s" if dev.validation.given.engine else "ideal_s"
            figures[figure_name("measured-vs-predicted", dev.hardware.id)] = plots.measured_vs_predicted(
                comparison.assign(predicted_s=comparison[which], label=comparison["phase"]),
                f"Measured vs predicted ({which[:-2]})\n{dev.validation.given.reference.name}")
    if study.engine_accuracy is not None:
        figures[figure_name("engine-accuracy")] = plots.accuracy_scatter(
            study.engine_accuracy["points"], f"{inputs['engine']}: published figures vs leave-one-out predictions")
    figures[figure_name("latency-throughput")] = plots.latency_throughput(
        {d.hardware.name: d.curve for d in study.devices}, inputs["batch"],
        f"{study.config.name}: TPOT vs throughput, S={inputs['prompt']} (dashed: does not fit)")
    first = study.devices[0]
    figures[figure_name("memory")] = plots.memory_breakdown(
        first.analysis.metrics, {d.hardware.name: d.hardware.memory_bytes for d in study.devices},
        f"{study.config.name}: memory at S={inputs['prompt']}+{inputs['gen']} tokens", napkin=first.memory)
    if study.state_cache is not None:
        figures[figure_name("cache-vs-context")] = plots.cache_against_context(
            study.state_cache, f"{study.config.name}: cache per sequence against context ({study.precision.kv} KV)")
    return {name: plots.png_bytes(fig) for name, fig in sorted(figures.items())}


