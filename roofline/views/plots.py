"""Figures of an analysis: roofline, latency-throughput, memory, regime map, TPOT waterfall, validation.

Pure: each function takes library outputs (op tables, metrics or sweep DataFrames, a Hardware,
crossover values) and returns a matplotlib Figure on an Agg canvas (no pyplot state, nothing
written). `png_bytes` renders one with fixed metadata, so the same figure gives the same bytes;
`fast=True` trades constrained layout for fixed margins (the app renders on every rerun).
"""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import BoundaryNorm, ListedColormap, to_rgb
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogFormatterSciNotation, LogLocator, NullLocator

from ..bounds import BOUNDS
from ..derivations import accelerator_intensity
from .fmt import fmt_bytes, fmt_rate
from ..hardware import Hardware, bundled_hardware

OUT_OF_MEMORY = "out-of-memory"
REGIMES = BOUNDS + (OUT_OF_MEMORY,)
REGIME_COLORS = {"compute": "#d62728", "weight-bandwidth": "#1f77b4", "kv-bandwidth": "#ff7f0e",
                 "activation-bandwidth": "#2ca02c", "communication": "#9467bd", OUT_OF_MEMORY: "#c7c7c7"}
ROOF_DTYPES = ("int4", "int8", "fp8", "bf16", "fp16", "tf32", "fp32")  # drawn top to bottom
# Op kinds on the roofline: a marker each, largest drawn first, so ops at the same point (every decode op
# of a dense model sits near intensity 1 at B = 1) show as concentric shapes, not one dot.
OP_KINDS = {"attention": ("o", 150), "MLP and experts": ("s", 85), "projections": ("D", 40), "LM head": ("^", 18)}
MEMORY_PARTS = (("weight_bytes", "weights", "#1f77b4"), ("kv_bytes", "KV cache", "#ff7f0e"),
                ("workspace_bytes", "activations", "#2ca02c"))
GB = 1e9
FAST_AXES_BOX = (0.11, 0.12, 0.86, 0.8)  # left, bottom, width, height of the axes under fast layout
WIDE_LABELS_BOX = (0.16, 0.12, 0.81, 0.8)  # the same for y tick labels as long as "100.00 MB"
# One colour per device in every figure (and the app's Plan chart), so a device is recognised across views:
# the bundled devices in their table's order; a device not in the table (custom numbers) is grey.
DEVICE_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
                  "#17becf", "#393b79", "#637939", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354")
UNKNOWN_DEVICE_COLOR = "#7f7f7f"
ROOF_LABEL_ROOM = 30  # the x axis runs this far past the highest intensity: roof labels sit right of every op


def device_colors() -> dict[str, str]:
    """Each bundled device's colour, by id and by name (figures are labelled with either)."""
    colors = {}
    for (device_id, hardware), color in zip(bundled_hardware().items(), DEVICE_PALETTE * 4):
        colors[device_id] = colors[hardware.name] = color
    return colors


def device_color(device: str) -> str:
    """The colour of a device id or name in every figure."""
    return device_colors().get(device, UNKNOWN_DEVICE_COLOR)


def _figure(width: float = 7.0, height: float = 4.5, box: tuple | None = None):
    """A figure with constrained layout, or with its axes at `box` (figure fractions) when given."""
    fig = Figure(figsize=(width, height), layout=None if box else "constrained")
    FigureCanvasAgg(fig)
    return fig, (fig.add_axes(box) if box else fig.add_subplot())


def png_bytes(fig: Figure, dpi: int = 110, fast: bool = False) -> bytes:
    """The figure as PNG bytes, without the software/date metadata that would make runs differ.

    fast: lay the figure out once at fixed margins (constrained layout draws it twice) and drop the
    unlabelled minor ticks of log axes spanning over a decade (half the drawing time): ~4x faster. It
    changes `fig` in place.
    """
    if fast:
        fast_layout(fig)
    fit_titles(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()


def fast_layout(fig: Figure) -> Figure:
    """`fig` with fixed margins instead of constrained layout and no default minor ticks on long log axes."""
    if isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        fig.set_layout_engine(None)  # none at all: "none" leaves a placeholder, and savefig then draws twice
        for ax in fig.axes:
            ax.set_position(FAST_AXES_BOX)
    for ax in fig.axes:
        for axis, (low, high) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            if axis.get_scale() != "log":
                continue
            if type(axis.get_major_formatter()) is LogFormatterSciNotation:  # mathtext: parsed anew per figure
                axis.set_major_formatter(FuncFormatter(_power_of_ten))
            default_minor = type(axis.get_minor_formatter()) is LogFormatterSciNotation  # not set by the figure
            if default_minor and max(low, high) > 10 * min(low, high):
                axis.set_minor_locator(NullLocator())
    return fig


def fit_titles(fig: Figure, smallest: float = 7.0) -> Figure:
    """Each axes' title in a smaller font until it fits inside the figure (a long model name ran off its edge)."""
    if fig.get_layout_engine() is not None:
        fig.draw_without_rendering()  # place the axes first: the title is centred over them
    renderer = fig.canvas.get_renderer()
    for title in (ax.title for ax in fig.axes if ax.get_title()):
        while title.get_fontsize() > smallest and _outside(title.get_window_extent(renderer), fig.bbox):
            title.set_fontsize(title.get_fontsize() - 0.5)
    return fig


def _outside(box, frame) -> bool:
    return box.x0 < frame.x0 or box.x1 > frame.x1


def _power_of_ten(value: float, _=None) -> str:
    """10 to the power as plain text (10¹⁵, 10⁻²), which draws without the mathtext parser."""
    exponent = round(np.log10(value)) if value > 0 else 0
    if value <= 0 or not np.isclose(value, 10.0 ** exponent):
        return f"{value:g}"
    return "10" + str(exponent).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))


def _roofs(hardware: Hardware) -> list[tuple[str, float]]:
    """(label, FLOP/s) per distinct peak, dtypes with the same peak sharing a label."""
    roofs: dict[float, list[str]] = {}
    for dtype in ROOF_DTYPES:
        if dtype in hardware.peak_flops:
            roofs.setdefault(hardware.peak_flops[dtype], []).append(dtype)
    return [("/".join(names), peak) for peak, names in sorted(roofs.items(), reverse=True)]


def op_kind(term: str) -> str:
    """The kind of an op table row from its `term` (a layer op's own name; others' full name), one of OP_KINDS."""
    name = term
    if name.startswith("attention"):
        return "attention"
    if name.startswith(("mlp", "experts", "shared_experts", "router")):
        return "MLP and experts"
    return "LM head" if "lm_head" in name else "projections"


def _lighter(color: str, amount: float = 0.6) -> tuple:
    return tuple(c + (1 - c) * amount for c in to_rgb(color))


def roofline_chart(hardware: Hardware, ops: pd.DataFrame, title: str = "") -> Figure:
    """Attained FLOP/s against intensity for each op, under the roof of every dtype the device has.

    ops: rows of `Analysis.op_table` (optionally with a `batch` column); ops without FLOPs
    (norms, activations, embeddings) have no place on the intensity axis and are left out. Marker:
    the op's kind (concentric where ops coincide); colour: the batch; filled: decode, hollow: prefill.
    """
    fig, ax = _figure()
    points = ops[ops["flops"] > 0]
    lo = max(min(points["intensity"].min(), 1.0) / 4, 1e-2) if len(points) else 0.1
    # The roof labels end at the right edge and span about a decade: the axis runs ROOF_LABEL_ROOM past the
    # highest op, so no marker sits under a label.
    hi = max(points["intensity"].max() * ROOF_LABEL_ROOM, 4 * accelerator_intensity(hardware)) if len(points) else 1e4
    x = np.geomspace(lo, hi, 200)
    for i, (label, peak) in enumerate(_roofs(hardware)):
        y = np.minimum(peak, x * hardware.memory_bandwidth)
        ax.plot(x, y, color="black", lw=1.6 - 0.25 * min(i, 4), alpha=1.0 - 0.15 * min(i, 4))
        ax.annotate(f"{label} {fmt_rate(peak, 'FLOP/s')}", (hi, peak), xytext=(-4, 3), textcoords="offset points",
                    ha="right", fontsize=8, zorder=10)
    batch = points["batch"] if "batch" in points else pd.Series("", index=points.index)
    colors = dict(zip(sorted(batch.unique()), ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b") * 4))
    color, decode, kinds = batch.map(colors), (points["phase"] == "decode").to_numpy(), points["term"].map(op_kind)
    for z, (kind, (marker, size)) in enumerate(OP_KINDS.items()):  # one collection a kind: few artists, fast
        of = (kinds == kind).to_numpy()
        if of.any():  # decode: alternate dark and light fills by kind, so nested shapes stand apart
            fill = [(c if z % 2 == 0 else _lighter(c)) if d else "white" for c, d in zip(color[of], decode[of])]
            ax.scatter(points["intensity"][of], (points["flops"] / points["time_s"])[of], marker=marker, s=size,
                       zorder=3 + z, facecolor=fill, edgecolor=np.where(decode[of], "black", color[of]),
                       linewidth=np.where(decode[of], 0.6, 1.2))
    handles = [Patch(facecolor=c if phase == "decode" else "white", edgecolor=c, linewidth=1.2,
                     label=f"{phase}, B={b}" if b != "" else phase)
               for b, c in colors.items() for phase in ("prefill", "decode")
               if ((batch == b) & (points["phase"] == phase)).any()]
    handles += [Line2D([], [], ls="", marker=marker, ms=np.sqrt(size) * 0.8, color="#7f7f7f", markeredgecolor="black",
                       label=kind) for kind, (marker, size) in OP_KINDS.items() if (kinds == kind).any()]
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)", ylabel="attained FLOP/s",
           title=title or f"Roofline: {hardware.name}")
    if hardware.peak_flops:  # room above the highest roof for its label
        ax.set_ylim(top=max(hardware.peak_flops.values()) * 3)
    ax.grid(True, which="major", alpha=0.3)
    if handles:
        ax.legend(handles=handles, fontsize=8, loc="lower right")
    return fig


def latency_throughput(curves: dict[str, pd.DataFrame], marks=(), title: str = "", devices: dict | None = None) -> Figure:
    """TPOT against decode throughput as the batch grows, one curve per label.

    Each frame needs batch, tpot_s, tokens_per_s and fits (a `sweep` or `analyze` output). Past the
    memory wall (the last batch that fits, marked) the curve is dashed: those batches do not fit.
    marks: batch sizes to label on every curve. devices: label -> device id, for the device's colour
    (labels not in it are taken as device names or ids themselves).
    """
    fig, ax = _figure()
    for label, frame in curves.items():
        frame = frame.sort_values("batch")
        color = device_color((devices or {}).get(label, label))
        fits = frame[frame["fits"]]
        shown = label if len(fits) else f"{label}: does not fit at any batch"
        ax.plot(fits["tokens_per_s"], fits["tpot_s"] * 1e3, "-o", ms=3, color=color, label=shown)
        beyond = frame[frame["batch"] >= (fits["batch"].max() if len(fits) else 0)]
        ax.plot(beyond["tokens_per_s"], beyond["tpot_s"] * 1e3, "--", color=color, alpha=0.5)
        if len(fits):
            wall = fits.iloc[-1]
            ax.scatter([wall["tokens_per_s"]], [wall["tpot_s"] * 1e3], marker="X", s=90, color=color,
                       edgecolor="black", zorder=4, label=f"{label}: memory wall, B={int(wall['batch'])}")
        for batch in marks:
            row = frame[frame["batch"] == batch]
            if len(row):
                ax.annotate(f"B={batch}", (row["tokens_per_s"].iloc[0], row["tpot_s"].iloc[0] * 1e3),
                            xytext=(4, 5), textcoords="offset points", fontsize=8, color=color)
    ax.set(xscale="log", yscale="log", xlabel="decode throughput (tokens/s)", ylabel="TPOT (ms)",
           title=title or "Latency vs throughput over batch size (dashed: does not fit in memory)")
    # Matplotlib labels every minor tick when the axis holds one decade boundary (2, 3, 4 x 10^k overlap):
    # mark 2 and 5 only, in plain numbers.
    ax.xaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 1 else f"{value:g}"))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 1 else f"{value:g}"))
    ax.tick_params(axis="x", which="minor", labelsize=8)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def memory_breakdown(metrics: pd.DataFrame, capacity: dict[str, float], title: str = "",
                     napkin: pd.DataFrame | None = None) -> Figure:
    """Stacked weights, KV cache and activation workspace per batch size, against each capacity line.

    napkin: optional rows with napkin_memory_bytes (the lecture's weights + KV at the prompt length),
    drawn as a tick on each bar.
    """
    fig, ax = _figure()
    labels = [str(b) for b in metrics["batch"]]
    bottom = np.zeros(len(metrics))
    for column, name, color in MEMORY_PARTS:
        values = metrics[column].to_numpy(dtype=float) / GB
        ax.bar(labels, values, bottom=bottom, color=color, label=name)
        bottom += values
    for i, (name, value) in enumerate(capacity.items()):  # black: the bars' colours are weights, KV, activations
        ax.axhline(value / GB, color="black", ls=("-", "--", ":", "-.")[i % 4], lw=1.2,
                   label=f"{name}: {fmt_bytes(value)}")
    if napkin is not None:
        values = napkin["napkin_memory_bytes"].to_numpy(dtype=float) / GB
        x = np.arange(len(values))
        ax.hlines(values, x - 0.4, x + 0.4, color="black", lw=2, zorder=3, label="lecture napkin (weights + KV at S=P)")
        for i, value in enumerate(values):
            ax.annotate(f"napkin {fmt_bytes(value * GB)}", (i, value), xytext=(0, -11), textcoords="offset points",
                        ha="center", fontsize=8)
    for i, total in enumerate(bottom):
        ax.annotate(fmt_bytes(total * GB), (i, total), xytext=(0, 3), textcoords="offset points", ha="center",
                    fontsize=8)
    ax.set_ylim(0, max([*bottom, *(v / GB for v in capacity.values())]) * 1.15)  # the totals' labels above the lines
    ax.set(xlabel="batch size", ylabel="memory (GB)", title=title or "Memory: weights, KV cache, activations")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def cache_against_context(frame: pd.DataFrame, title: str = "") -> Figure:
    """One sequence's cache against its context (constant_state.cache_against_context): the constant
    state (flat), the attention layers' KV, their sum, and the all-attention twin's KV (growing)."""
    fig, ax = _figure(box=WIDE_LABELS_BOX)  # fixed under either layout: the byte labels need the room
    x = frame["context"].to_numpy(dtype=float)
    for column, label, style in (("state_bytes", "constant state (SSM / linear attention)", ":"),
                                 ("kv_bytes", "KV of the attention layers", "--"),
                                 ("cache_bytes", "this model: state + KV", "-"),
                                 ("twin_cache_bytes", "all-attention twin: KV", "-.")):
        values = frame[column].to_numpy(dtype=float)
        if np.any(values > 0):
            ax.plot(x, np.where(values > 0, values, np.nan), style, marker="o", ms=3, label=label)
    ax.set(xscale="log", yscale="log", xlabel="context S (tokens)", ylabel="bytes per sequence",
           title=title or "Cache per sequence against context")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_bytes(v)))
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    return fig


def _edges(values: np.ndarray) -> np.ndarray:
    """Cell edges on a log axis: geometric midpoints, extended half a step at each end."""
    logs = np.log(values.astype(float))
    if len(logs) == 1:
        return np.exp(np.array([logs[0] - 0.5, logs[0] + 0.5]))
    mids = (logs[1:] + logs[:-1]) / 2
    return np.exp(np.concatenate([[2 * logs[0] - mids[0]], mids, [2 * logs[-1] - mids[-1]]]))


def regime_map(frame: pd.DataFrame, marks=(), title: str = "", critical_batch: float | None = None,
               kv_equals_weights_context: float | None = None) -> Figure:
    """What binds the decode step at each batch (x) and context (y): the resource, or out of memory.

    frame: a `sweep` output (batch, prompt_len, decode_bound, fits), one precision.
    marks: (batch, context) points to circle, e.g. the study's workloads.
    critical_batch, kv_equals_weights_context: the analytic boundaries (`roofline.serving.crossovers`), drawn
    where given and finite: a vertical line at the batch, and the curve B·S = that context (the KV read
    of B sequences grows as B·S under global attention; it equals the weight read at S when B = 1).
    """
    fig, ax = _figure()
    regime = np.where(frame["fits"], frame["decode_bound"].astype(str), OUT_OF_MEMORY)
    codes = pd.Series([REGIMES.index(r) for r in regime], index=frame.index)
    grid = pd.DataFrame({"batch": frame["batch"], "context": frame["prompt_len"], "code": codes})
    table = grid.pivot_table(index="context", columns="batch", values="code", aggfunc="first").sort_index()
    cmap = ListedColormap([REGIME_COLORS[r] for r in REGIMES])
    norm = BoundaryNorm(np.arange(len(REGIMES) + 1) - 0.5, len(REGIMES))
    ax.pcolormesh(_edges(table.columns.to_numpy()), _edges(table.index.to_numpy()), table.to_numpy(),
                  cmap=cmap, norm=norm)
    for batch, context in marks:
        ax.scatter([batch], [context], s=50, facecolor="none", edgecolor="black", linewidth=1.5, zorder=3)
        ax.annotate(f"B={batch}", (batch, context), xytext=(5, 4), textcoords="offset points", fontsize=8)
    _boundaries(ax, critical_batch, kv_equals_weights_context)
    present = [r for r in REGIMES if r in set(regime)]
    ax.legend(handles=[Patch(color=REGIME_COLORS[r], label=r) for r in present], fontsize=8, loc="upper right",
              title="decode bound", title_fontsize=8, framealpha=0.9)
    ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="context (tokens)",
           title=title or "Decode regime: what binds the step")
    return fig


def _boundaries(ax, critical_batch: float | None, kv_context: float | None) -> None:
    ax.set(xscale="log", yscale="log")
    ax.autoscale(False)  # the lines span the map, not the other way round
    if critical_batch is not None and np.isfinite(critical_batch):
        ax.axvline(critical_batch, color="black", ls="--", lw=1.3)
        ax.annotate(f"critical batch {critical_batch:,.0f}", (critical_batch, ax.get_ylim()[0]), xytext=(3, 4),
                    textcoords="offset points", fontsize=8)
    if kv_context is not None and np.isfinite(kv_context):
        batches = np.geomspace(*ax.get_xlim(), 64)
        ax.plot(batches, kv_context / batches, color="black", ls=":", lw=1.6)
        ax.annotate(f"KV = weights: B·S = {kv_context:,.0f}", (batches[8], kv_context / batches[8]), xytext=(4, 4),
                    textcoords="offset points", fontsize=8)


def measured_vs_predicted(frame: pd.DataFrame, title: str = "") -> Figure:
    """Measured against predicted step time, one point per measurement, with the y = x line.

    frame: columns predicted_s and measured_s, optionally `label` to colour groups.
    """
    fig, ax = _figure(5.5, 5.0)
    groups = frame.groupby("label", sort=True) if "label" in frame else [("measurements", frame)]
    for i, (label, rows) in enumerate(groups):
        ax.scatter(rows["predicted_s"] * 1e3, rows["measured_s"] * 1e3, s=24, color=f"C{i}", label=str(label))
    both = np.concatenate([frame["predicted_s"], frame["measured_s"]]) * 1e3
    lo, hi = both.min() / 1.3, both.max() * 1.3
    ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="measured = predicted")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="predicted (ms)",
           ylabel="measured (ms)", title=title or "Measured vs predicted")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def accuracy_scatter(frame: pd.DataFrame, title: str = "") -> Figure:
    """Published figures against their predictions, on log axes, with y = x and a ±10% band.

    frame: columns measured, predicted (each row in its own unit: tokens/s, or seconds for TTFT), label.
    """
    fig, ax = _figure(5.5, 5.0)
    for i, (label, rows) in enumerate(frame.groupby("label", sort=True)):
        ax.scatter(rows["predicted"], rows["measured"], s=26, color=f"C{i}", label=str(label))
    both = np.concatenate([frame["predicted"], frame["measured"]])
    lo, hi = both.min() / 1.5, both.max() * 1.5
    line = np.geomspace(lo, hi, 50)
    ax.fill_between(line, line / 1.1, line * 1.1, color="0.85", label="±10%")
    ax.plot(line, line, color="black", lw=1, label="measured = predicted")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), title=title or "Measured vs predicted",
           xlabel="predicted (tokens/s; TTFT in s)", ylabel="measured (same unit)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="upper left")
    return fig


def term_changes(terms_a: pd.Series, terms_b: pd.Series) -> pd.Series:
    """B − A per term (seconds, either side's missing terms as 0), the changed ones, largest first."""
    index = terms_a.index.union(terms_b.index, sort=False)
    change = terms_b.reindex(index, fill_value=0.0) - terms_a.reindex(index, fill_value=0.0)
    return change[change != 0].sort_values(key=np.abs, ascending=False)


def tpot_waterfall(terms_a: pd.Series, terms_b: pd.Series, labels=("TPOT A", "TPOT B"), title: str = "") -> Figure:
    """TPOT of A, each term's change, TPOT of B, as floating bars (ms; rises red, falls green).

    terms_a, terms_b: seconds of one decode step per term, adding up to each side's TPOT.
    """
    fig, ax = _figure(8.0, 4.2, box=(0.08, 0.27, 0.9, 0.65))  # fixed: the rotated term names need the room
    changes = term_changes(terms_a, terms_b)
    names = [labels[0], *changes.index, labels[1]]
    level = terms_a.sum()
    ax.bar(0, level * 1e3, color="#7f7f7f")
    for i, change in enumerate(changes.to_numpy(), start=1):
        ax.bar(i, change * 1e3, bottom=level * 1e3, color="#d62728" if change > 0 else "#2ca02c")
        level += change
    ax.bar(len(names) - 1, terms_b.sum() * 1e3, color="#7f7f7f")
    ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
    ax.set(ylabel="TPOT (ms)", title=title or "Where TPOT changes, term by term")
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def engine_waterfall(ideal_s: float, gap: pd.Series, engine: str, title: str = "") -> Figure:
    """The ideal decode step, each named term an engine adds (roofline.serving.gap), and the engine's step (ms)."""
    ideal = pd.Series({"ideal step": ideal_s})
    return tpot_waterfall(ideal, pd.concat([ideal, gap]), ("ideal", engine),
                          title or f"Why {engine} decodes slower than the ideal bound")


MARKERS = "o^sDvP"  # one per model variant (validation_curves' `label`)


def validation_curves(frame: pd.DataFrame, title: str = "", ax=None) -> Figure:
    """Measured (points, solid) and predicted (dashed) step time over batch, a colour per context.

    frame: columns batch, context, measured_s, predicted_s (e.g. the held-out prediction) and
    optionally ideal_s (the uncalibrated roofline, dotted) and label (a model variant: a marker each,
    its own lines). Repeated runs: a point each, the lines through the median per batch. ax: draw on
    these axes (validation's figure of several panels) instead of a new figure.
    """
    # The legend stands right of the axes, off the curves.
    fig, ax = _figure(8.5, 4.5, box=(0.09, 0.12, 0.7, 0.8)) if ax is None else (ax.figure, ax)
    colors = {c: f"C{i % 10}" for i, c in enumerate(sorted(frame["context"].unique()))}
    variants = list(dict.fromkeys(frame["label"])) if "label" in frame else [None]
    for variant in variants:
        marker = MARKERS[variants.index(variant) % len(MARKERS)]
        own = frame if variant is None else frame[frame["label"] == variant]
        for context, rows in own.groupby("context", sort=True):
            color, median = colors[context], rows.groupby("batch", sort=True).median(numeric_only=True)
            ax.scatter(rows["batch"], rows["measured_s"] * 1e3, s=12, color=color, marker=marker, zorder=3)
            ax.plot(median.index, median["measured_s"] * 1e3, "-", color=color,
                    label=f"S={context}" if variant == variants[0] else None)
            ax.plot(median.index, median["predicted_s"] * 1e3, "--", color=color)
            if "ideal_s" in rows:
                ax.plot(median.index, median["ideal_s"] * 1e3, ":", lw=1, color=color)
    styles = [("-", "o", "measured"), ("--", "", "predicted")] + ([(":", "", "ideal roofline")] if "ideal_s" in frame else [])
    handles = ax.get_legend_handles_labels()[0] + [Line2D([], [], ls=ls, marker=m, color="black", label=label)
                                                   for ls, m, label in styles]
    handles += [Line2D([], [], ls="", marker=MARKERS[i % len(MARKERS)], color="grey", label=str(v))
                for i, v in enumerate(variants) if v is not None]
    ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="step time (ms)",
           title=title or "Measured vs predicted over batch, per context")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    return fig
