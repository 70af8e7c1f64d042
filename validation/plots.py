"""Validation figures: measured vs predicted step time over batch per context (the library's
validation_curves, a panel per phase), and the residuals."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from roofline.views.plots import validation_curves


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
        rows = points[points["phase"] == phase]
        validation_curves(pd.DataFrame({
            "batch": rows["batch"], "context": rows["context"], "measured_s": rows["time_s"],
            "predicted_s": rows["heldout_predicted_s"].fillna(rows["predicted_s"]),
            "label": rows["model"].astype(str) + ", K=" + rows["n_kv_heads"].astype(str)}),
            f"{phase}: measured vs held-out prediction", ax=ax)
    _residuals(axes[-1], points)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return path
