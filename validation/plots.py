"""Validation figures: measured vs predicted step time over batch per context, and the residuals."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd


MARKERS = "o^sDvP"


def _by_context(ax, points: pd.DataFrame, phase: str) -> None:
    """One line per model variant (marker: model and KV heads) and context (colour)."""
    frame = points[points["phase"] == phase]
    contexts = sorted(frame["context"].unique())
    colors = dict(zip(contexts, plt.cm.viridis([i / max(1, len(contexts) - 1) for i in range(len(contexts))])))
    variants = list(dict.fromkeys(zip(frame["model"], frame["n_kv_heads"])))
    for (model, kv, context), group in frame.groupby(["model", "n_kv_heads", "context"]):
        group, marker = group.sort_values("batch"), MARKERS[variants.index((model, kv)) % len(MARKERS)]
        ax.plot(group["batch"], group["time_s"] * 1e3, marker, color=colors[context], ms=4,
                label=f"S={context}" if (model, kv) == variants[0] else None)
        predicted = group["heldout_predicted_s"].fillna(group["predicted_s"])
        ax.plot(group["batch"], predicted * 1e3, "-", color=colors[context], alpha=0.7, lw=1)
    for i, (model, kv) in enumerate(variants):
        ax.plot([], [], MARKERS[i % len(MARKERS)], color="grey", label=f"{model}, K={kv}")
    ax.set(xscale="log", yscale="log", xlabel="batch", ylabel=f"{phase} time (ms)",
           title=f"{phase}: measured (markers) vs held-out prediction (lines)")
    ax.legend(fontsize=6, ncol=2)


def _residuals(ax, points: pd.DataFrame) -> None:
    for marker, (phase, group) in zip("os", points.groupby("phase")):
        ax.scatter(group["batch"] * (1.08 if phase == "prefill" else 1.0), group["heldout_error"] * 100,
                   c=group["context"], cmap="viridis", marker=marker, norm=matplotlib.colors.LogNorm(), label=phase, s=18)
    ax.axhline(0, color="k", lw=0.5)
    for bound in (-5, 5):
        ax.axhline(bound, color="grey", lw=0.5, ls="--")
    ax.set(xscale="log", xlabel="batch (colour: context)", ylabel="held-out predicted/measured - 1 (%)",
           title="residuals (leave-one-context-out)")
    ax.legend(fontsize=7)


def save_validation_plots(points: pd.DataFrame, path: Path, title: str) -> Path:
    phases = [p for p in ("decode", "prefill") if (points["phase"] == p).any()]
    fig, axes = plt.subplots(1, len(phases) + 1, figsize=(5 * (len(phases) + 1), 4))
    for ax, phase in zip(axes, phases):
        _by_context(ax, points, phase)
    _residuals(axes[-1], points)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return path
