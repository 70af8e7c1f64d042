"""The study as text: Markdown, single-file HTML, and every number as CSV rows and JSON.

A `Study` from `roofline.study.report` becomes a list of blocks (heading, paragraph, list, table, math,
image), rendered to Markdown or HTML; tables show numbers formatted by `roofline.views.fmt` and can be
compared cell by cell with the library through `format_cell`. Nothing is written here.
"""
from __future__ import annotations

import base64
import html as html_lib
import json
import math
import re
from dataclasses import asdict

import numpy as np
import pandas as pd
import sympy as sp

from ..api import METRIC_DEFINITIONS
from .fmt import fmt_bytes, fmt_count, fmt_flops, fmt_rate, fmt_seconds, plain
from ..study.report import NAPKIN_SHOWN, Study, figure_name, napkin_columns
from ..study.report_whatifs import ACCEPTANCE
from ..study.report_plan import plan_blocks, plan_json

EXTRA_DEFINITIONS = {
    "napkin_fits": "whether the lecture's napkin memory fits in the device's memory",
    "napkin_tokens_per_s": "replicas · batch / napkin_tpot_s",
    "per_gpu_memory_bytes": "memory_bytes on each GPU under tensor parallelism (the whole model on one GPU: equal)",
    "comm_s": "all-reduce time inside one decode step under tensor parallelism (ring, two per layer), included in tpot_s",
    "elasticity": "d ln(output) / d ln(input) from a +10% change: -1 means inversely proportional",
}


# ---- formatting: the strings shown in the tables (units convert in roofline.views.fmt) ----

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
    "state_bytes_per_sequence": ("state/sequence", fmt_bytes),
    "gpus": ("GPUs", lambda v: str(int(v))), "per_gpu_memory_bytes": ("memory per GPU", fmt_bytes),
    "comm_s": ("all-reduce per step", fmt_seconds),
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
                 ("qk_rope_dim", "R"), ("qk_nope_dim", "Hn"), ("v_head_dim", "Hv"), ("chunk", "Wc"))


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
    if p.experts is not None:
        widths.insert(1, ("routed experts", p.experts, f"{p.expert_bytes:g}"))
    blocks += [("h", 3, "Precision, workload, software"),
               ("table", pd.DataFrame(widths, columns=["tensor", "dtype", "bytes per element (scales included)"])),
               ("p", (f"Batches {', '.join(map(str, inputs['batch']))}; prompt P = {inputs['prompt']} tokens; "
                      f"G = {inputs['gen']} generated tokens. Options: {asdict(study.devices[0].analysis.options)}. "
                      "Roofs: datasheet peaks (ideal bound; a harness fit, if given, is used only in section 7).")),
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
    layers = ", ".join(dict.fromkeys(terms["layer"]))
    blocks += [("p", (f"For this model, one layer ({layers}) with {study.precision.weights} weights "
                      f"and {study.precision.kv} KV: prefill has T = S query tokens, decode T = 1 against S keys.")),
               ("table", pd.DataFrame({"part": terms["part"], "phase": terms["phase"], "layer": terms["layer"],
                                       **{header: terms[column].map(expr_text) for header, column in
                                          (("FLOPs", "flops"), ("bytes", "bytes"), ("FLOP/byte", "intensity"))}}))]
    return blocks + _state_blocks(study)


def _state_blocks(study: Study) -> list:
    """Constant-state layers: one sequence's cache flat in the context next to attention's growing KV."""
    if study.state_cache is None:
        return []
    frame = study.state_cache.rename(columns={"kv_bytes": "attention KV", "state_bytes": "constant state",
                                              "cache_bytes": "this model", "twin_cache_bytes": "all-attention twin"})
    walls = study.state_walls.copy()
    for column in ("cache_bytes_per_sequence", "state_bytes_per_sequence"):
        walls[column] = walls[column].map(fmt_bytes)
    walls["kv_equals_weights_context"] = walls["kv_equals_weights_context"].map(
        lambda v: "never (no KV grows)" if math.isnan(v) else f"{v:,.0f}")
    walls = walls.rename(columns={"cache_bytes_per_sequence": "cache / sequence at P + G",
                                  "state_bytes_per_sequence": "of which state",
                                  "kv_equals_weights_context": "context where cache read = weights"})
    return [("h", 3, "Constant-state layers: the cache against the context"),
            ("p", (f"{study.config.name} keeps, per sequence, a constant state in its SSM / linear-attention layers "
                   "(conv and recurrent state, read and written every decode step) and a KV cache only in its "
                   "attention layers. The all-attention twin is the same model with every such layer made "
                   "attention: its cache grows with every layer. Bytes per sequence "
                   f"({study.precision.kv} KV and conv state, fp32 recurrent state):")),
            ("table", format_table(frame.assign(**{c: frame[c].map(fmt_bytes) for c in frame.columns[1:]}))),
            ("p", f"Against its twin on {study.devices[0].hardware.name} (prompt {study.inputs['prompt']}, "
                  f"gen {study.inputs['gen']}):"),
            ("table", format_table(walls))]


def _tables_blocks(study: Study) -> list:
    inputs = study.inputs
    blocks = [("h", 2, "3. Prefill and decode across batch"),
              ("p", (f"Prefill: the whole prompt (P = {inputs['prompt']}) for the batch; its time is TTFT. "
                     "Decode: one step of the batch with P tokens cached; its time is TPOT. 'Roofline' is the "
                     "calculator's bound (each op max(compute, memory), summed); 'lecture napkin' is the lecture's "
                     "estimate: all weights plus the KV cache at S = P read once per step at full bandwidth, and "
                     "memory = weights + KV at S = P. 'Memory (roofline)' also holds the KV of the G generated "
                     "tokens and the activation workspace of one chunked-prefill step (8192 prompt tokens at a "
                     "time, as serving engines schedule it: min(B, 8192 // P) prompts, or one chunk of a longer "
                     "prompt)."))]
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
                "regime": "Regime map: what binds decode at each batch and context",
                "cache-vs-context": "Cache per sequence against context: constant state flat, attention KV growing"}
    blocks = [("h", 2, "4. Plots")]
    if not study.figures:
        return blocks + [("p", "Plots were not drawn for this report.")]
    for kind in ("roofline", "latency-throughput", "memory", "regime", "cache-vs-context"):
        for name in [n for n in study.figures if re.fullmatch(rf"{kind}(-.*)?\.png", n)]:
            blocks += [("p", captions[kind] + (f" ({name[len(kind) + 1:-4]})" if name != f"{kind}.png" else "")),
                       ("img", name, captions[kind])]
    return blocks


def _crossover_blocks(study: Study) -> list:
    blocks = [("h", 2, "5. Crossovers and sensitivities"),
              ("p", ("Crossovers come from roofline.serving.crossovers (closed forms) and from sweeps of the calculator "
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
                     "generation length. Rows the library cannot compute say so instead of giving a number. "
                     "Tensor parallelism (roofline.deployment): each GPU holds 1/tp of the heads, MLP and "
                     "vocabulary, and TPOT includes two ring all-reduces a layer; memory, KV/token and max batch are per GPU, "
                     "tokens/s is the tp GPUs' together. Speculative decoding (roofline.serving.speculation): a draft "
                     f"proposes γ tokens, each accepted with probability α = {ACCEPTANCE} (an assumption), and the "
                     "target checks them in one pass; γ is the fastest at each batch (0: do not speculate), and "
                     "memory is left blank because the draft's weights and KV cache are not counted."))]
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
            [(k, json.dumps(plain(v), sort_keys=True)) for k, v in sorted(rest.items())], columns=["key", "value"]))]
    return blocks


def _pct(value) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.1%}"


def _validation_blocks(study: Study) -> list:
    blocks = [("h", 2, "7. Validation")]
    for dev in study.devices:
        blocks.append(("h", 3, dev.hardware.name))
        if dev.validation is None:
            blocks.append(("p", f"No measurements or harness fit for this hardware ({dev.hardware.id})."))
            continue
        given, comparison = dev.validation.given, dev.validation.comparison
        blocks.append(("p", f"From {given.source}; roofs relative to {given.reference.name} ({given.reference.id})."))
        if given.engine is not None:
            blocks += [("p", f"Fitted parameters ({given.engine.name})"), ("table", pd.DataFrame(
                [(k, json.dumps(v, sort_keys=True)) for k, v in given.engine.parameters().items()],
                columns=["parameter", "value"]))]
        blocks += _fit_tables(given.fit)
        if comparison is None:
            blocks.append(("p", "No measurements to compare with."))
            continue
        which = "calibrated" if given.engine else "ideal"
        error = comparison["error"].abs()
        blocks += [("p", (f"{len(error)} measurements (the measured model's own config); median |error| of the "
                          f"{which} prediction {error.median():.1%}, worst {error.max():.1%}.")),
                   ("table", format_table(comparison.rename(columns={"context": "prompt_len"})))]
        name = figure_name("measured-vs-predicted", dev.hardware.id)
        if name in study.figures:
            blocks.append(("img", name, "measured vs predicted"))
    return blocks


def _achievable_blocks(study: Study) -> list:
    engine = study.inputs.get("engine", "ideal")
    if engine == "ideal":
        return []
    blocks = [("h", 2, f"8. Achievable with {engine}"),
              ("p", (f"The engine profile data/engines/{engine}.yaml (each parameter with its bound and the rows "
                     "that pin it) priced through the same step as everything above. The decode gap over the ideal "
                     "bound is a sum of named terms: its kernels' efficiencies, its quantized GEMVs, its launches "
                     "per layer, its host work per step and its collectives' latency."))]
    for dev in study.devices:
        if dev.achievable is not None:
            blocks += [("h", 3, dev.hardware.name), ("table", dev.achievable.round(3))]
            name = figure_name("engine-gap", dev.hardware.id)
            if name in study.figures:
                blocks.append(("img", name, f"the decode gap of {engine} over the ideal bound, term by term"))
    if study.engine_accuracy is not None:
        scores = study.engine_accuracy
        table = pd.DataFrame([{"family": family, "rows": scores["ideal"][family]["n"],
                               **{f"{kind} median / p90": f"{scores[kind][family]['median']:.1%} / "
                                                          f"{scores[kind][family]['p90']:.1%}"
                                  for kind in ("ideal", "in_sample", "leave_one_out")}}
                              for family in scores["ideal"]])
        blocks += [("h", 3, f"How close {engine} is to published measurements"),
                   ("p", (f"The error |predicted / measured - 1| on the {scores['rows']} rows of data/published/ the profile "
                          "is fitted to: the ideal bound's, in-sample, and leave-one-out (each row predicted by a fit "
                          "that never saw it; `roofline accuracy` prints the same).")),
                   ("table", table)]
        if figure_name("engine-accuracy") in study.figures:
            blocks.append(("img", figure_name("engine-accuracy"), "measured against leave-one-out predicted, ±10%"))
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
            + _crossover_blocks(study) + _whatif_blocks(study) + _validation_blocks(study) + _achievable_blocks(study)
            + plan_blocks(study.plan, 9 if _achievable_blocks(study) else 8))


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
        napkin = napkin_columns(m, dev.hardware)[list(NAPKIN_SHOWN)]  # the rest are the library's metrics
        frames.append(pd.concat([m, napkin], axis=1).assign(model=study.config.name, hardware=dev.hardware.id,
                                                             weights=study.precision.weights,
                                                             experts=study.precision.expert_format,
                                                             kv=study.precision.kv))
    frame = pd.concat(frames, ignore_index=True)
    first = ["model", "hardware", "weights", "experts", "kv", "batch"]
    return frame[first + [c for c in frame.columns if c not in first]]


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
                "calibration": v.given.engine.parameters() if v.given.engine else None, "fit": v.given.fit,
                "reference": v.given.reference.id, "source": v.given.source, "comparison": v.comparison},
        })
    data = {"inputs": study.inputs, "config": asdict(study.config), "precision": asdict(study.precision),
            "software": study.software, "definitions": {**METRIC_DEFINITIONS, **EXTRA_DEFINITIONS},
            "derivation": [{"title": t, "expression": str(e), "latex": _latex(e), "limit": str(lim)}
                           for t, e, lim in study.derivation],
            "model_terms": study.terms.map(str),
            "devices": devices, "figures": sorted(study.figures),
            **({"plan": plan_json(study.plan)} if study.plan is not None else {})}
    return json.dumps(plain(data), sort_keys=True, indent=1, allow_nan=False) + "\n"
