"""The study of one model on one or more devices, as data, and its Markdown and single-file HTML text.

`build_study` runs the library (analyze, sweep, derivations) and returns a `Study`: every table a
DataFrame of numbers, the derivation as sympy, the figures as PNG bytes. `markdown` and `html`
render it; `results_frame` and `results_json` hold every number. Nothing is printed or written
here: `cli_report` owns the files. The lecture's napkin (weights + KV at the prompt length, read
once per step) is shown next to the roofline numbers, labelled as such.
"""
from __future__ import annotations

import base64
import html as html_lib
import json
import math
import platform
import re
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata

import numpy as np
import pandas as pd
import sympy as sp

from . import __version__, crossovers, derivations
from .api import METRIC_DEFINITIONS, Analysis, analyze, sweep
from .bounds import IDEAL, Calibration
from .config import ModelConfig, load_model
from .fmt import fmt_bytes, fmt_count, fmt_flops, fmt_rate, fmt_seconds
from .hardware import Hardware, load_hardware
from .precision import Precision

DEFAULTS = {"model": "llama-2-13b", "hardware": ("h100-sxm",), "batch": (1, 64, 256), "prompt": 1024, "gen": 128}
CURVE_BATCHES = 2 ** np.arange(0, 13)  # latency-throughput: 1 .. 4096, plus the memory wall
REGIME_BATCHES = np.unique(np.round(np.geomspace(1, 4096, 25)))
REGIME_CONTEXTS = np.unique(np.round(np.geomspace(128, 131072, 21)))
SCAN_LIMIT = 8192  # crossovers are searched over every whole batch / prompt up to this
EXTRA_DEFINITIONS = {
    "napkin_memory_bytes": "the lecture's napkin memory: weight bytes + KV bytes per token x batch x prompt_len",
    "memory_bytes": "weights + KV cache at prompt_len + gen_len tokens + the largest prefill op's activations",
    "elasticity": "d ln(output) / d ln(input) from a +10% change: -1 means inversely proportional",
}


@dataclass(frozen=True)
class ValidationInput:
    """A calibration (fractions of `reference`'s roofs, plus overheads) and/or measured step times.

    fit: what the fit reported (held-out error per phase, sources), shown as given.
    measurements: rows of the validation CSVs (model dims, dtype, phase, batch, context, time_s).
    """
    calibration: Calibration | None
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


def build_study(model: str | ModelConfig = DEFAULTS["model"], hardware=DEFAULTS["hardware"],
                batch=DEFAULTS["batch"], prompt: int = DEFAULTS["prompt"], gen: int = DEFAULTS["gen"],
                weights: str = "bf16", kv: str = "bf16", validation: dict | None = None, plots: bool = True,
                progress=None) -> Study:
    """The whole study; validation maps a hardware id to the ValidationInput shown in its section 7.

    progress(done, total, label) is called between steps (the CLI draws a bar with it).
    """
    config = load_model(model)
    devices = [load_hardware(h) for h in ([hardware] if isinstance(hardware, (str, Hardware)) else hardware)]
    if not devices:
        raise ValueError("hardware: give at least one hardware id")
    if len({d.id for d in devices}) != len(devices):
        raise ValueError(f"hardware: repeated id in {[d.id for d in devices]}")
    precision = Precision(weights=weights, kv=kv)
    values = np.atleast_1d(np.asarray(batch, dtype=float))
    if values.size == 0 or np.any(values <= 0) or np.any(values != np.round(values)):
        raise ValueError(f"batch: must be positive whole numbers, got {batch!r}")
    batches = sorted({int(b) for b in values})
    inputs = {"model": config.name, "hardware": [d.id for d in devices], "batch": batches, "prompt": int(prompt),
              "gen": int(gen), "weights": precision.weights, "kv": precision.kv, "activations": precision.activations}
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
        results.append(_device(config, hw, precision, analysis, inputs, (validation or {}).get(hw.id)))
    starting("derivation")
    derivation = _derivation(config, devices, precision)
    study = Study(inputs, config, precision, _software(), derivation, model_terms(config, precision), tuple(results))
    if plots:
        starting("plots")
        study = replace(study, figures=_figures(study))
    if progress:
        progress(total, total, "done")
    return study


def _device(config, hw, precision, analysis, inputs, validation) -> DeviceStudy:
    m = analysis.metrics
    napkin = napkin_columns(m, hw)
    prefill = m[["batch", "prefill_flops", "prefill_bytes", "prefill_intensity", "ttft_s", "prefill_bound"]]
    decode = pd.concat([m[["batch", "decode_flops", "decode_bytes", "decode_intensity", "tpot_s", "tokens_per_s"]],
                        napkin[["napkin_tpot_s", "napkin_tokens_per_s"]], m[["decode_bound"]]], axis=1)
    memory = pd.concat([m[["batch", "weight_bytes"]], napkin[["napkin_kv_bytes", "napkin_memory_bytes",
                        "napkin_fits"]], m[["kv_bytes", "workspace_bytes", "memory_bytes", "fits", "max_batch"]]],
                       axis=1)
    common = _sweep_args(inputs, precision)
    wall = int(m["max_batch"].iloc[0])
    curve = sweep(config, hw, batch=np.union1d(CURVE_BATCHES, [wall] if wall > 0 else []),
                  context=inputs["prompt"], **common)
    regime = sweep(config, hw, batch=REGIME_BATCHES, context=REGIME_CONTEXTS, **common)
    return DeviceStudy(hw, analysis, prefill.reset_index(drop=True), decode, memory, curve, regime,
                       _crossovers(config, hw, precision, analysis, inputs),
                       _sensitivities(config, hw, precision, inputs),
                       _whatifs(config, hw, precision, analysis, inputs),
                       _validation(validation) if validation else None)


def _sweep_args(inputs: dict, precision: Precision) -> dict:
    return {"gen": inputs["gen"], "weights": precision.weights, "kv": precision.kv, "e2e": False}


def napkin_columns(metrics: pd.DataFrame, hw: Hardware) -> pd.DataFrame:
    """The lecture's estimate per row: KV at prompt_len only, no activations, TPOT = bytes / bandwidth."""
    kv = metrics["kv_bytes_per_token"] * metrics["batch"] * metrics["prompt_len"]
    total = metrics["weight_bytes"] + kv
    return pd.DataFrame({"napkin_kv_bytes": kv, "napkin_memory_bytes": total,
                         "napkin_fits": total <= hw.memory_bytes, "napkin_tpot_s": metrics["napkin_tpot_s"],
                         "napkin_tokens_per_s": metrics["batch"] / metrics["napkin_tpot_s"]})


def _first(frame: pd.DataFrame, column: str, mask) -> float:
    hits = frame.loc[mask, column]
    return float(hits.min()) if len(hits) else math.nan


def _solved(quantity: str, solve, how: str) -> tuple:
    """A row from a roofline.crossovers solution: its value and the expression it came from."""
    try:
        found = solve()
    except ValueError as err:  # no sourced peak, or a model the closed form does not cover
        return quantity, math.nan, "", f"unknown: {err}"
    expression = found.expression
    text = f"{expression.lhs} = {expression.rhs}" if isinstance(expression, sp.Eq) else str(expression)
    return quantity, found.value, text, how + (f"; {found.note}" if found.note else "")


def _crossovers(config, hw, precision, analysis, inputs) -> pd.DataFrame:
    """Closed forms from roofline.crossovers, and the first batch / prompt where a sweep changes regime."""
    prompt, gen, common = inputs["prompt"], inputs["gen"], _sweep_args(inputs, precision)
    by_batch = sweep(config, hw, batch=np.arange(1, SCAN_LIMIT + 1), context=prompt, **common)
    by_prompt = sweep(config, hw, batch=1, context=np.arange(1, SCAN_LIMIT + 1), **common)
    bound, scan = by_batch["decode_bound"], f"first in a sweep over 1..{SCAN_LIMIT}"
    rows = [
        _solved("critical batch: decode weight matmuls turn compute-bound",
                lambda: crossovers.critical_batch(hw, precision), "2B / b_w = peak / bandwidth"),
        (f"batch where the whole decode step turns compute-bound (S={prompt})",
         _first(by_batch, "batch", bound == "compute"), "", scan),
        (f"batch where KV reads overtake weight reads in decode (S={prompt})",
         _first(by_batch, "batch", bound == "kv-bandwidth"), "", scan),
        _solved(f"batch reaching 90% of the largest decode tokens/s (S={prompt})",
                lambda: crossovers.saturation_batch(config, hw, precision, prompt), "B / t(B) = 0.9 / g"),
        _solved(f"batch past which doubling it adds < 10% tokens/s (S={prompt})",
                lambda: crossovers.diminishing_batch(config, hw, precision, prompt), "t(B) = a + bB"),
        _solved("context where one sequence's KV cache equals the weights read",
                lambda: crossovers.kv_equals_weights_context(config, precision), "KV bytes read = weight bytes read"),
        ("prompt length where prefill turns compute-bound (B=1)",
         _first(by_prompt, "prompt_len", by_prompt["prefill_bound"] == "compute"), "", scan),
        _solved(f"memory wall: largest batch that fits (S={prompt}+{gen})",
                lambda: crossovers.max_batch(config, hw, precision, prompt, gen), "weights + B x per sequence <= M"),
    ]
    return pd.DataFrame(rows, columns=["quantity", "value", "expression", "how"])


def _sensitivities(config, hw, precision, inputs) -> pd.DataFrame:
    """Elasticities of TTFT and TPOT at each batch: reruns at +10% of an input, and sympy's d ln t / d ln x."""
    batch, prompt, gen = inputs["batch"], inputs["prompt"], inputs["gen"]
    base = analyze(config, hw, batch=batch, prompt=prompt, gen=gen, precision=precision).metrics
    longer = round(prompt * 1.1)
    cases = [("memory bandwidth", 1.1, replace(hw, memory_bandwidth=hw.memory_bandwidth * 1.1), prompt),
             ("peak FLOP/s (every dtype)", 1.1, replace(hw, peak_flops={k: v * 1.1 for k, v in hw.peak_flops.items()}),
              prompt),
             ("prompt length", longer / prompt, hw, longer)]
    rows = []
    for name, ratio, device, p in cases:
        out = analyze(config, device, batch=batch, prompt=p, gen=gen, precision=precision).metrics
        row = {"input": name, "how": "rerun at +10%"}
        for metric in ("ttft_s", "tpot_s"):
            for b, new, old in zip(batch, out[metric], base[metric]):
                row[f"{metric} B={b}"] = math.log(new / old) / math.log(ratio)
        rows.append(row)
    solved = {b: crossovers.elasticities(config, hw, precision, b, prompt) for b in batch}
    for key, name in (("kv_bits", "KV bytes per element"), ("batch", "batch size")):
        row = {"input": name, "how": "d ln TPOT / d ln x (roofline.crossovers)"}
        row.update({f"ttft_s B={b}": math.nan for b in batch})
        row.update({f"tpot_s B={b}": solved[b][key].value for b in batch})
        rows.append(row)
    return pd.DataFrame(rows)


WHATIFS = (  # name, what changes, overrides, precision changes
    ("GQA", "8 KV heads", {"n_kv_heads": 8}, {}),
    ("MQA", "1 KV head", {"n_kv_heads": 1}, {}),
    ("MLA", "latent KV cache", None, {}),
    ("int8 weights", "weights int8 (group 128)", {}, {"weights": "int8"}),
    ("int4 weights", "weights int4 (group 128)", {}, {"weights": "int4"}),
    ("fp8 KV", "KV cache fp8", {}, {"kv": "fp8"}),
    ("int8 KV", "KV cache int8", {}, {"kv": "int8"}),
    ("speculative decoding", "draft + verify", None, {}),
    ("tensor parallelism", "split over GPUs", None, {}),
)


def _whatif_note(config: ModelConfig, name: str, overrides) -> str:
    heads = (overrides or {}).get("n_kv_heads")
    if name in ("speculative decoding", "tensor parallelism"):
        return "not yet available in the library"
    if name == "MLA":
        return "baseline already uses MLA" if config.is_mla else "not applicable: the model does not use MLA"
    if heads and config.is_mla:
        return "not applicable: MLA caches a latent, not per-head K, V"
    if heads and config.n_kv_heads <= heads:
        return f"not applicable: baseline already has {config.n_kv_heads} KV heads"
    if heads and config.n_heads % heads:
        return f"not applicable: {config.n_heads} query heads are not divisible by {heads}"
    return ""


def _whatif_row(name, change, metrics, batches, note="") -> dict:
    row = {"scenario": name, "change": change}
    last = metrics.iloc[-1] if metrics is not None else None
    for i, b in enumerate(batches):
        row[f"tpot_s B={b}"] = metrics["tpot_s"].iloc[i] if metrics is not None else math.nan
    row.update({f"tokens_per_s B={batches[-1]}": last["tokens_per_s"] if last is not None else math.nan,
                f"memory_bytes B={batches[-1]}": last["memory_bytes"] if last is not None else math.nan,
                f"fits B={batches[-1]}": bool(last["fits"]) if last is not None else None,
                "kv_bytes_per_token": last["kv_bytes_per_token"] if last is not None else math.nan,
                "max_batch": last["max_batch"] if last is not None else math.nan, "note": note})
    return row


def _whatifs(config, hw, precision, analysis, inputs) -> pd.DataFrame:
    batches = inputs["batch"]
    rows = [_whatif_row("baseline", f"{precision.weights} weights, {precision.kv} KV", analysis.metrics, batches)]
    for name, change, overrides, changes in WHATIFS:
        note = _whatif_note(config, name, overrides)
        if note or overrides is None:
            rows.append(_whatif_row(name, change, None, batches, note))
            continue
        what = replace(precision, **changes)
        metrics = analyze(config, hw, batch=batches, prompt=inputs["prompt"], gen=inputs["gen"], precision=what,
                          **overrides).metrics
        rows.append(_whatif_row(name, change, metrics, batches))
    return pd.DataFrame(rows)


MEASURED_DIMS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size")


def _validation(given: ValidationInput) -> Validation:
    """Each measured step time against the library's prediction for the measured model (ideal, calibrated)."""
    rows = given.measurements
    if rows is None or not len(rows):
        return Validation(given, None)
    parts = []
    for key, group in rows.groupby(["model", *MEASURED_DIMS, "dtype", "phase", "context"], sort=True):
        name, dims, (dtype, phase, context) = key[0], key[1:-3], key[-3:]
        config = ModelConfig(name=str(name), family="llama", **{f: int(v) for f, v in zip(MEASURED_DIMS, dims)})
        precision, metric = Precision(dtype, dtype, dtype), "tpot_s" if phase == "decode" else "ttft_s"
        run = {"batch": group["batch"].to_numpy(), "prompt": int(context), "gen": 1, "precision": precision}
        ideal = analyze(config, given.reference, **run).metrics[metric].to_numpy()
        fitted = analyze(config, given.reference, calibration=given.calibration or IDEAL, **run).metrics[metric]
        parts.append(group[["model", "dtype", "phase", "batch", "context"]].assign(
            measured_s=group["time_s"].to_numpy(), ideal_s=ideal, calibrated_s=fitted.to_numpy()))
    comparison = pd.concat(parts).sort_values(["model", "dtype", "phase", "context", "batch"], kind="stable")
    comparison = comparison.reset_index(drop=True)
    predicted = comparison["calibrated_s"] if given.calibration else comparison["ideal_s"]
    comparison["error"] = predicted / comparison["measured_s"] - 1
    return Validation(given, comparison)


def _derivation(config, devices, precision) -> list:
    """(title, expression, limit or value) rows; the lead's `derivations.derivation` when it exists."""
    if hasattr(derivations, "derivation"):
        return list(derivations.derivation(config))
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
    napkin = derivations.lecture_napkin(config, devices[0])
    rows.append(("Lecture napkin memory (bytes) for this model", napkin["memory"], "weights + KV at S, bf16"))
    return rows


def model_terms(config: ModelConfig, precision: Precision) -> pd.DataFrame:
    """FLOPs, bytes and intensity of one layer's MLP and attention, in B and S, with this model's numbers."""
    from .model import DECODE, PREFILL, Options, phase_ops
    from .symbols import b_a, b_kv, b_w
    widths = {b_w: sp.nsimplify(precision.weight_bytes), b_a: sp.nsimplify(precision.activation_bytes),
              b_kv: sp.nsimplify(precision.kv_bytes)}
    parts = (("MLP", lambda name: name.startswith(("mlp", "experts", "shared_experts", "router"))),
             ("attention", lambda name: name == "attention"))
    rows = []
    for phase in (PREFILL, DECODE):
        placed = [p for p in phase_ops(config, Options(), phase) if p.group.startswith("layers")]
        layer = [p.op for p in placed if p.group == placed[0].group]  # the first kind of layer
        for part, pick in parts:
            ops = [op for op in layer if pick(op.name)]
            flops = sp.expand(sum((op.cost.flops for op in ops), sp.Integer(0)).xreplace(widths))
            moved = sp.expand(sum((op.cost.bytes for op in ops), sp.Integer(0)).xreplace(widths))
            rows.append({"part": part, "phase": phase, "layer": placed[0].group, "flops": flops, "bytes": moved,
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
    from . import plots
    figures, inputs = {}, study.inputs
    marks = [(b, inputs["prompt"]) for b in inputs["batch"]]
    for dev in study.devices:
        ops = pd.concat([dev.analysis.op_table(b, inputs["prompt"]).assign(batch=b)
                         for b in sorted({inputs["batch"][0], inputs["batch"][-1]})], ignore_index=True)
        figures[figure_name("roofline", dev.hardware.id)] = plots.roofline_chart(dev.hardware, ops)
        figures[figure_name("regime", dev.hardware.id)] = plots.regime_map(
            dev.regime, marks, f"Decode regime on {dev.hardware.name} ({study.config.name})")
        if dev.validation and dev.validation.comparison is not None:
            comparison = dev.validation.comparison
            which = "calibrated_s" if dev.validation.given.calibration else "ideal_s"
            figures[figure_name("measured-vs-predicted", dev.hardware.id)] = plots.measured_vs_predicted(
                comparison.assign(predicted_s=comparison[which], label=comparison["phase"]),
                f"Measured vs predicted ({which[:-2]})\n{dev.validation.given.reference.name}")
    figures[figure_name("latency-throughput")] = plots.latency_throughput(
        {d.hardware.name: d.curve for d in study.devices}, inputs["batch"],
        f"{study.config.name}: TPOT vs throughput, S={inputs['prompt']} (dashed: does not fit)")
    first = study.devices[0]
    figures[figure_name("memory")] = plots.memory_breakdown(
        first.analysis.metrics, {d.hardware.name: d.hardware.memory_bytes for d in study.devices},
        f"{study.config.name}: memory at S={inputs['prompt']}+{inputs['gen']} tokens", napkin=first.memory)
    return {name: plots.png_bytes(fig) for name, fig in sorted(figures.items())}


# ---- formatting: the strings shown in the tables (units convert in roofline.fmt) ----

FORMATS = {  # column (before any " B=") -> (header, formatter)
    "batch": ("batch", lambda v: str(int(v))), "hardware": ("hardware", str),
    "prefill_flops": ("FLOPs", fmt_flops), "decode_flops": ("FLOPs", fmt_flops),
    "prefill_bytes": ("bytes moved", fmt_bytes), "decode_bytes": ("bytes moved", fmt_bytes),
    "prefill_intensity": ("FLOP/byte", fmt_count), "decode_intensity": ("FLOP/byte", fmt_count),
    "ttft_s": ("TTFT", fmt_seconds), "prefill_bound": ("bound", str), "decode_bound": ("bound (roofline)", str),
    "tpot_s": ("TPOT (roofline)", fmt_seconds), "napkin_tpot_s": ("TPOT (lecture napkin)", fmt_seconds),
    "tokens_per_s": ("tokens/s (roofline)", fmt_count), "napkin_tokens_per_s": ("tokens/s (lecture napkin)", fmt_count),
    "weight_bytes": ("weights", fmt_bytes), "napkin_kv_bytes": ("KV at S=P (lecture)", fmt_bytes),
    "napkin_memory_bytes": ("memory (lecture napkin)", fmt_bytes), "napkin_fits": ("fits (lecture)", None),
    "kv_bytes": ("KV at S=P+G", fmt_bytes), "workspace_bytes": ("activations", fmt_bytes),
    "memory_bytes": ("memory (roofline)", fmt_bytes), "fits": ("fits", None),
    "max_batch": ("max batch", lambda v: str(int(v))), "kv_bytes_per_token": ("KV/token", fmt_bytes),
    "ttft_elasticity": ("TTFT elasticity", lambda v: f"{v:+.2f}"),
    "tpot_elasticity": ("TPOT elasticity", lambda v: f"{v:+.2f}"),
    "measured_s": ("measured", fmt_seconds), "ideal_s": ("predicted (ideal)", fmt_seconds),
    "calibrated_s": ("predicted (calibrated)", fmt_seconds), "error": ("error", lambda v: f"{v:+.1%}"),
    "prompt_len": ("prompt", lambda v: str(int(v))),
}


def format_cell(column: str, value) -> str:
    """The text a table shows for `value` in `column` (so tests can compare with the library's numbers)."""
    formatter = FORMATS.get(column.partition(" B=")[0], ("", None))[1]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    return formatter(value) if formatter else str(value)


def format_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Numbers to strings, headers to words: the table exactly as rendered."""
    headers = {}
    for column in frame.columns:
        base, _, at = column.partition(" B=")
        headers[column] = FORMATS.get(base, (base.replace("_", " "), None))[0] + (f", B={at}" if at else "")
    return pd.DataFrame({headers[c]: [format_cell(c, v) for v in frame[c]] for c in frame.columns})


def expr_text(expr) -> str:
    """A sympy expression as plain text that Markdown leaves alone: 2·B·S^2, not 2*B*S**2."""
    return str(expr).replace("**", "^").replace("*", "·")


def _crossover_table(frame: pd.DataFrame) -> pd.DataFrame:
    shown = []
    for value, how in zip(frame["value"], frame["how"]):
        if math.isnan(value):
            shown.append("unknown" if how.startswith("unknown") else "not reached")
        else:
            shown.append(fmt_count(value))
    return pd.DataFrame({"quantity": frame["quantity"], "value": shown,
                         "expression": frame["expression"].map(expr_text), "how it is found": frame["how"]})


# ---- the document: a list of blocks, rendered to Markdown or HTML ----

CONFIG_FIELDS = (("d_model", "D"), ("n_layers", "L"), ("n_heads", "N"), ("n_kv_heads", "K"), ("head_dim", "H"),
                 ("d_ff", "F"), ("vocab_size", "V"), ("window", "W"), ("n_experts", "E"), ("top_k", "k"),
                 ("d_expert", "Fe"), ("n_shared_experts", "Es"), ("kv_lora_rank", "C"), ("q_lora_rank", "Cq"),
                 ("qk_rope_dim", "R"), ("qk_nope_dim", "Hn"), ("v_head_dim", "Hv"))


def _provenance(study: Study) -> list:
    config, p, inputs = study.config, study.precision, study.inputs
    params = int(study.devices[0].analysis.metrics["params"].iloc[0])
    kinds = ", ".join(f"{n} x {a}/{m}" for (a, m), n in sorted(config.layer_kinds().items()))
    fields = [(name, letter, getattr(config, name)) for name, letter in CONFIG_FIELDS if getattr(config, name)]
    blocks = [("h", 2, "1. Configuration and provenance"),
              ("p", (f"Model {config.name} (family {config.family}), config content hash "
                     f"{config.source_hash or '—'} (sha256 of its config.json, first 12 hex digits); "
                     f"{params:,} parameters; layers: {kinds}.")),
              ("table", pd.DataFrame(fields, columns=["field", "letter", "value"]).astype(str))]
    for dev in study.devices:
        hw = dev.hardware
        rows = [("memory", fmt_bytes(hw.memory_bytes), hw.memory_bytes, hw.sources.get("memory_bytes", "")),
                ("memory bandwidth", fmt_rate(hw.memory_bandwidth, "B/s"), hw.memory_bandwidth,
                 hw.sources.get("memory_bandwidth_bytes_per_s", ""))]
        rows += [(f"peak {d}", fmt_rate(v, "FLOP/s"), v, hw.sources.get(f"peak_flops.{d}", ""))
                 for d, v in hw.peak_flops.items()]
        if hw.interconnect_bandwidth:
            rows.append(("interconnect", fmt_rate(hw.interconnect_bandwidth, "B/s"), hw.interconnect_bandwidth,
                         hw.sources.get("interconnect", "")))
        table = pd.DataFrame(rows, columns=["quantity", "value", "SI value", "source"]).astype({"SI value": str})
        blocks += [("h", 3, f"Hardware: {hw.name} ({hw.id})"), ("table", table)]
    widths = [(what, getattr(p, what), f"{b:g}") for what, b in
              (("weights", p.weight_bytes), ("activations", p.activation_bytes), ("kv", p.kv_bytes))]
    blocks += [("h", 3, "Precision, workload, software"),
               ("table", pd.DataFrame(widths, columns=["tensor", "dtype", "bytes per element (scales included)"])),
               ("p", (f"Batches {', '.join(map(str, inputs['batch']))}; prompt P = {inputs['prompt']} tokens; "
                      f"G = {inputs['gen']} generated tokens. Options: {asdict(study.devices[0].analysis.options)}. "
                      "Roofs: datasheet peaks (ideal bound; a calibration, if given, is used only in section 7).")),
               ("p", "Software: " + ", ".join(f"{k} {v}" for k, v in study.software.items()) + "."),
               ("h", 3, "Definitions"),
               ("list", [f"{k}: {v}" for k, v in {**METRIC_DEFINITIONS, **EXTRA_DEFINITIONS}.items()])]
    return blocks


def _derivation_blocks(study: Study) -> list:
    blocks = [("h", 2, "2. The derivation"),
              ("p", ("Symbolic FLOPs / bytes from the same op accounting the calculator evaluates "
                     "(roofline.derivations); bf16 unless stated."))]
    for title, expr, limit in study.derivation:
        blocks += [("p", title), ("math", expr)] + ([("p", str(limit))] if limit else [])
    terms = study.terms
    blocks += [("p", (f"For this model, one layer ({terms['layer'].iloc[0]}) with {study.precision.weights} weights "
                      f"and {study.precision.kv} KV: prefill has T = S query tokens, decode T = 1 against S keys.")),
               ("table", pd.DataFrame({"part": terms["part"], "phase": terms["phase"],
                                       **{header: terms[column].map(expr_text) for header, column in
                                          (("FLOPs", "flops"), ("bytes", "bytes"), ("FLOP/byte", "intensity"))}}))]
    return blocks


def _tables_blocks(study: Study) -> list:
    inputs = study.inputs
    blocks = [("h", 2, "3. Prefill and decode across batch"),
              ("p", (f"Prefill: the whole prompt (P = {inputs['prompt']}) for the batch; its time is TTFT. "
                     "Decode: one step of the batch with P tokens cached; its time is TPOT. 'Roofline' is the "
                     "calculator's bound (each op max(compute, memory), summed); 'lecture napkin' is the lecture's "
                     "estimate: all weights plus the KV cache at S = P read once per step at full bandwidth, and "
                     "memory = weights + KV at S = P. 'Memory (roofline)' also holds the KV of the G generated "
                     "tokens and the activation workspace."))]
    if len(study.devices) > 1:
        rows = [dev.analysis.metrics.assign(hardware=dev.hardware.id) for dev in study.devices]
        side = pd.concat(rows, ignore_index=True)[["hardware", "batch", "ttft_s", "tpot_s", "tokens_per_s",
                                                    "memory_bytes", "fits", "decode_bound"]]
        blocks += [("h", 3, "Side by side"), ("table", format_table(side))]
    for dev in study.devices:
        blocks += [("h", 3, f"{dev.hardware.name}"),
                   ("p", "Prefill"), ("table", format_table(dev.prefill)),
                   ("p", "Decode"), ("table", format_table(dev.decode)),
                   ("p", f"Memory (capacity {fmt_bytes(dev.hardware.memory_bytes)})"),
                   ("table", format_table(dev.memory))]
    return blocks


def _plot_blocks(study: Study) -> list:
    captions = {"roofline": "Roofline: every op of prefill and decode (ops without FLOPs left out) under the "
                            "roof of each dtype", "latency-throughput": "Latency-throughput over batch size; the "
                            "cross marks the memory wall (largest batch that fits)",
                "memory": "Memory breakdown against capacity (black ticks: the lecture's napkin at S = P)",
                "regime": "Regime map: what binds decode at each batch and context"}
    blocks = [("h", 2, "4. Plots")]
    if not study.figures:
        return blocks + [("p", "Plots were not drawn for this report.")]
    for kind in ("roofline", "latency-throughput", "memory", "regime"):
        for name in [n for n in study.figures if re.fullmatch(rf"{kind}(-.*)?\.png", n)]:
            blocks += [("p", captions[kind] + (f" ({name[len(kind) + 1:-4]})" if name != f"{kind}.png" else "")),
                       ("img", name, captions[kind])]
    return blocks


def _crossover_blocks(study: Study) -> list:
    blocks = [("h", 2, "5. Crossovers and sensitivities"),
              ("p", ("Crossovers come from roofline.crossovers (closed forms) and from sweeps of the calculator "
                     "over every whole batch or prompt length. Sensitivities are elasticities of TTFT and TPOT: "
                     "the relative change for a +10% change of the input, divided by 10%."))]
    for dev in study.devices:
        blocks += [("h", 3, dev.hardware.name), ("table", _crossover_table(dev.crossovers)),
                   ("table", format_table(dev.sensitivities.rename(columns=lambda c: c.replace(
                       "ttft_s", "ttft_elasticity").replace("tpot_s", "tpot_elasticity"))))]
    return blocks


def _whatif_blocks(study: Study) -> list:
    blocks = [("h", 2, "6. What-ifs against the baseline"),
              ("p", ("Each row changes one thing and reruns the calculator at the same batches, prompt and "
                     "generation length. Rows the library cannot compute say so instead of giving a number."))]
    for dev in study.devices:
        blocks += [("h", 3, dev.hardware.name), ("table", format_table(dev.whatifs))]
    return blocks


def _fit_tables(fit: dict) -> list:
    phases = {k: v for k, v in fit.items() if isinstance(v, dict) and "heldout_median_abs_err" in v}
    rest = {k: v for k, v in fit.items() if k not in phases}
    blocks = []
    if phases:
        keys = ("heldout_median_abs_err", "heldout_p90_abs_err", "insample_median_abs_err")
        rows = [(phase, v.get("n_points"), v.get("n_heldout"), *(_pct(v.get(k)) for k in keys))
                for phase, v in sorted(phases.items())]
        columns = ["phase", "points", "held out", "held-out median |error|", "held-out p90 |error|",
                   "in-sample median |error|"]
        blocks += [("p", "Held-out error (leave one context out) and in-sample error of the fit"),
                   ("table", pd.DataFrame(rows, columns=columns).astype(str))]
    if rest:
        blocks += [("p", "Reported by the fit"), ("table", pd.DataFrame(
            [(k, json.dumps(_plain(v), sort_keys=True)) for k, v in sorted(rest.items())], columns=["key", "value"]))]
    return blocks


def _pct(value) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.1%}"


def _validation_blocks(study: Study) -> list:
    blocks = [("h", 2, "7. Validation")]
    for dev in study.devices:
        blocks.append(("h", 3, dev.hardware.name))
        if dev.validation is None:
            blocks.append(("p", f"No measurements or calibration for this hardware ({dev.hardware.id})."))
            continue
        given, comparison = dev.validation.given, dev.validation.comparison
        blocks.append(("p", f"From {given.source}; roofs relative to {given.reference.name} ({given.reference.id})."))
        if given.calibration is not None:
            blocks += [("p", "Fitted parameters"), ("table", pd.DataFrame(
                [(k, json.dumps(v, sort_keys=True)) for k, v in asdict(given.calibration).items()],
                columns=["parameter", "value"]))]
        blocks += _fit_tables(given.fit)
        if comparison is None:
            blocks.append(("p", "No measurements to compare with."))
            continue
        which = "calibrated" if given.calibration else "ideal"
        error = comparison["error"].abs()
        blocks += [("p", (f"{len(error)} measurements (the measured model's own config); median |error| of the "
                          f"{which} prediction {error.median():.1%}, worst {error.max():.1%}.")),
                   ("table", format_table(comparison.rename(columns={"context": "prompt_len"})))]
        name = figure_name("measured-vs-predicted", dev.hardware.id)
        if name in study.figures:
            blocks.append(("img", name, "measured vs predicted"))
    return blocks


def document(study: Study, generated: str = "") -> list:
    names = ", ".join(d.hardware.name for d in study.devices)
    head = [("h", 1, f"Roofline study: {study.config.name} on {names}")]
    if generated:
        head.append(("p", f"Generated {generated}"))
    head.append(("p", (f"Inference cost of {study.config.name} at batches "
                       f"{', '.join(map(str, study.inputs['batch']))}, prompt {study.inputs['prompt']} tokens, "
                       f"{study.inputs['gen']} generated tokens, with {study.precision.weights} weights and "
                       f"{study.precision.kv} KV cache.")))
    return (head + _provenance(study) + _derivation_blocks(study) + _tables_blocks(study) + _plot_blocks(study)
            + _crossover_blocks(study) + _whatif_blocks(study) + _validation_blocks(study))


def _latex(expr) -> str:
    return expr if isinstance(expr, str) else sp.latex(expr)


def _numeric(cells) -> bool:
    return all(re.match(r"^([-+]?[\d.]|—$)", str(c)) for c in cells)


def _md_table(frame: pd.DataFrame) -> str:
    def row(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
    align = ["---"] + ["---:" if _numeric(frame[c]) else "---" for c in list(frame.columns)[1:]]
    lines = [row(frame.columns), "|" + "|".join(align) + "|"]
    return "\n".join(lines + [row(r) for r in frame.itertuples(index=False)])


def markdown(study: Study, generated: str = "") -> str:
    """The report as Markdown; figures referenced by their file names next to it."""
    out = []
    for block in document(study, generated):
        kind = block[0]
        if kind == "h":
            out.append("#" * block[1] + " " + block[2])
        elif kind == "p":
            out.append(block[1])
        elif kind == "list":
            out.append("\n".join(f"- {item}" for item in block[1]))
        elif kind == "table":
            out.append(_md_table(block[1]))
        elif kind == "math":
            out.append(f"$$\n{_latex(block[1])}\n$$")
        elif kind == "img":
            out.append(f"![{block[2]}]({block[1]})")
    return "\n\n".join(out) + "\n"


STYLE = ("body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;line-height:1.4}"
         "table{border-collapse:collapse;margin:.5rem 0 1rem;font-size:.85rem}"
         "th,td{border:1px solid #ccc;padding:.2rem .45rem;text-align:right}th{background:#f3f3f3}"
         "td:first-child,th:first-child,td.t{text-align:left}img{max-width:100%}pre{background:#f7f7f7;padding:.5rem}")


def _html_table(frame: pd.DataFrame) -> str:
    esc = html_lib.escape
    head = "".join(f"<th>{esc(str(c))}</th>" for c in frame.columns)
    left = [i > 0 and not _numeric(frame[c]) for i, c in enumerate(frame.columns)]
    body = "".join("<tr>" + "".join(f"<td class=\"t\">{esc(str(c))}</td>" if t else f"<td>{esc(str(c))}</td>"
                                    for c, t in zip(r, left)) + "</tr>" for r in frame.itertuples(index=False))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html(study: Study, generated: str = "") -> str:
    """The report as one HTML file: figures embedded as base64 PNG data URIs, no external references."""
    esc = html_lib.escape
    out = []
    for block in document(study, generated):
        kind = block[0]
        if kind == "h":
            out.append(f"<h{block[1]}>{esc(block[2])}</h{block[1]}>")
        elif kind == "p":
            out.append(f"<p>{esc(block[1])}</p>")
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{esc(item)}</li>" for item in block[1]) + "</ul>")
        elif kind == "table":
            out.append(_html_table(block[1]))
        elif kind == "math":
            text = block[1] if isinstance(block[1], str) else sp.pretty(block[1], use_unicode=True)
            out.append(f"<pre>{esc(text)}</pre>")
        elif kind == "img":
            data = base64.b64encode(study.figures[block[1]]).decode("ascii")
            out.append(f'<img src="data:image/png;base64,{data}" alt="{esc(block[2])}">')
    title = esc(f"Roofline study: {study.config.name}")
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n"
            f"<style>{STYLE}</style>\n</head>\n<body>\n" + "\n".join(out) + "\n</body>\n</html>\n")


# ---- every number, for results.csv and results.json ----

def results_frame(study: Study) -> pd.DataFrame:
    """One row per hardware and batch: every metric of `analyze` and the lecture's napkin columns."""
    frames = []
    for dev in study.devices:
        m = dev.analysis.metrics
        napkin = napkin_columns(m, dev.hardware).drop(columns="napkin_tpot_s")
        frames.append(pd.concat([m, napkin], axis=1).assign(model=study.config.name, hardware=dev.hardware.id,
                                                             weights=study.precision.weights, kv=study.precision.kv))
    frame = pd.concat(frames, ignore_index=True)
    first = ["model", "hardware", "weights", "kv", "batch"]
    return frame[first + [c for c in frame.columns if c not in first]]


def _plain(value):
    """JSON-safe: numpy scalars to Python, NaN and infinities to None, sympy to its string."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, pd.DataFrame):
        return _plain(value.to_dict(orient="records"))
    if isinstance(value, sp.Basic):
        return str(value)
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def results_json(study: Study) -> str:
    """Every number of the study as sorted-key JSON: inputs, provenance, tables, derivation, what-ifs."""
    devices = []
    for dev in study.devices:
        hw = dev.hardware
        ops = {str(b): dev.analysis.op_table(b, study.inputs["prompt"]) for b in study.inputs["batch"]}
        v = dev.validation
        devices.append({
            "hardware": {"id": hw.id, "name": hw.name, "memory_bytes": hw.memory_bytes,
                         "memory_bandwidth": hw.memory_bandwidth, "peak_flops": hw.peak_flops,
                         "interconnect_bandwidth": hw.interconnect_bandwidth, "sources": hw.sources},
            "metrics": dev.analysis.metrics, "napkin": napkin_columns(dev.analysis.metrics, hw), "op_tables": ops,
            "crossovers": dev.crossovers, "sensitivities": dev.sensitivities, "whatifs": dev.whatifs,
            "validation": None if v is None else {
                "calibration": asdict(v.given.calibration) if v.given.calibration else None, "fit": v.given.fit,
                "reference": v.given.reference.id, "source": v.given.source, "comparison": v.comparison},
        })
    data = {"inputs": study.inputs, "config": asdict(study.config), "precision": asdict(study.precision),
            "software": study.software, "definitions": {**METRIC_DEFINITIONS, **EXTRA_DEFINITIONS},
            "derivation": [{"title": t, "expression": str(e), "latex": _latex(e), "limit": str(lim)}
                           for t, e, lim in study.derivation],
            "model_terms": study.terms.map(str),
            "devices": devices, "figures": sorted(study.figures)}
    return json.dumps(_plain(data), sort_keys=True, indent=1, allow_nan=False) + "\n"
