"""Figures of an analysis: roofline, latency-throughput, memory breakdown, regime map, measured vs predicted.

Pure: each function takes library outputs (op tables, metrics or sweep DataFrames, a Hardware) and
returns a matplotlib Figure on an Agg canvas (no pyplot state, nothing written). `png_bytes`
renders one with fixed metadata, so the same figure gives the same bytes.
"""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .bounds import BOUNDS
from .fmt import fmt_bytes, fmt_rate
from .hardware import Hardware

OUT_OF_MEMORY = "out-of-memory"
REGIMES = BOUNDS + (OUT_OF_MEMORY,)
REGIME_COLORS = {"compute": "#d62728", "weight-bandwidth": "#1f77b4", "kv-bandwidth": "#ff7f0e",
                 "activation-bandwidth": "#2ca02c", "communication": "#9467bd", OUT_OF_MEMORY: "#c7c7c7"}
ROOF_DTYPES = ("int4", "int8", "fp8", "bf16", "fp16", "tf32", "fp32")  # drawn top to bottom
PHASE_MARKERS = {"prefill": "o", "decode": "^"}
MEMORY_PARTS = (("weight_bytes", "weights", "#1f77b4"), ("kv_bytes", "KV cache", "#ff7f0e"),
                ("workspace_bytes", "activations", "#2ca02c"))
GB = 1e9


def _figure(width: float = 7.0, height: float = 4.5):
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def png_bytes(fig: Figure, dpi: int = 110) -> bytes:
    """The figure as PNG bytes, without the software/date metadata that would make runs differ."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()


def _roofs(hardware: Hardware) -> list[tuple[str, float]]:
    """(label, FLOP/s) per distinct peak, dtypes with the same peak sharing a label."""
    roofs: dict[float, list[str]] = {}
    for dtype in ROOF_DTYPES:
        if dtype in hardware.peak_flops:
            roofs.setdefault(hardware.peak_flops[dtype], []).append(dtype)
    return [("/".join(names), peak) for peak, names in sorted(roofs.items(), reverse=True)]


def roofline_chart(hardware: Hardware, ops: pd.DataFrame, title: str = "") -> Figure:
    """Attained FLOP/s against intensity for each op, under the roof of every dtype the device has.

    ops: rows of `Analysis.op_table` (optionally with a `batch` column); ops without FLOPs
    (norms, activations, embeddings) have no place on the intensity axis and are left out.
    """
    fig, ax = _figure()
    points = ops[ops["flops"] > 0]
    lo = max(min(points["intensity"].min(), 1.0) / 4, 1e-2) if len(points) else 0.1
    hi = max(points["intensity"].max() * 4, 4 * hardware.ridge_intensity) if len(points) else 1e4
    x = np.geomspace(lo, hi, 200)
    for i, (label, peak) in enumerate(_roofs(hardware)):
        y = np.minimum(peak, x * hardware.memory_bandwidth)
        ax.plot(x, y, color="black", lw=1.6 - 0.25 * min(i, 4), alpha=1.0 - 0.15 * min(i, 4))
        ax.annotate(f"{label} {fmt_rate(peak, 'FLOP/s')}", (hi, peak), xytext=(-4, 3), textcoords="offset points",
                    ha="right", fontsize=8)
    batches = sorted(points["batch"].unique()) if "batch" in points else [None]
    colors = dict(zip(batches, ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b") * 4))
    for batch in batches:
        for phase, marker in PHASE_MARKERS.items():
            rows = points[(points["phase"] == phase) & ((points["batch"] == batch) if batch is not None else True)]
            if len(rows):
                label = phase if batch is None else f"{phase}, B={batch}"
                ax.scatter(rows["intensity"], rows["flops"] / rows["time_s"], marker=marker, s=28,
                           color=colors[batch], edgecolor="black", linewidth=0.4, label=label, zorder=3)
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)", ylabel="attained FLOP/s",
           title=title or f"Roofline: {hardware.name}")
    ax.grid(True, which="major", alpha=0.3)
    if len(points):
        ax.legend(fontsize=8, loc="lower right")
    return fig


def latency_throughput(curves: dict[str, pd.DataFrame], marks=(), title: str = "") -> Figure:
    """TPOT against decode throughput as the batch grows, one curve per label.

    Each frame needs batch, tpot_s, tokens_per_s and fits (a `sweep` or `analyze` output). Past the
    memory wall (the last batch that fits, marked) the curve is dashed: those batches do not fit.
    marks: batch sizes to label on every curve.
    """
    fig, ax = _figure()
    for i, (label, frame) in enumerate(curves.items()):
        frame = frame.sort_values("batch")
        color = f"C{i}"
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
                            xytext=(4, -10), textcoords="offset points", fontsize=8, color=color)
    ax.set(xscale="log", yscale="log", xlabel="decode throughput (tokens/s)", ylabel="TPOT (ms)",
           title=title or "Latency vs throughput over batch size (dashed: does not fit in memory)")
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
    for i, (name, value) in enumerate(capacity.items()):
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
    ax.set(xlabel="batch size", ylabel="memory (GB)", title=title or "Memory: weights, KV cache, activations")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def _edges(values: np.ndarray) -> np.ndarray:
    """Cell edges on a log axis: geometric midpoints, extended half a step at each end."""
    logs = np.log(values.astype(float))
    if len(logs) == 1:
        return np.exp(np.array([logs[0] - 0.5, logs[0] + 0.5]))
    mids = (logs[1:] + logs[:-1]) / 2
    return np.exp(np.concatenate([[2 * logs[0] - mids[0]], mids, [2 * logs[-1] - mids[-1]]]))


def regime_map(frame: pd.DataFrame, marks=(), title: str = "") -> Figure:
    """What binds the decode step at each batch (x) and context (y): the resource, or out of memory.

    frame: a `sweep` output (batch, prompt_len, decode_bound, fits), one precision.
    marks: (batch, context) points to circle, e.g. the study's workloads.
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
    present = [r for r in REGIMES if r in set(regime)]
    ax.legend(handles=[Patch(color=REGIME_COLORS[r], label=r) for r in present], fontsize=8, loc="upper right",
              title="decode bound", title_fontsize=8, framealpha=0.9)
    ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="context (tokens)",
           title=title or "Decode regime: what binds the step")
    return fig


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
