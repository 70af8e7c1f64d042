"""Fit a device's physical parameters to its measurements, and score them on held-out points.

Parameters: achievable bandwidth, achievable matmul FLOP/s per dtype, the fractions of those two
roofs the attention kernels reach, fixed overhead per step and per layer, and the sharpness p of
the roofline corner (each op takes (c^p + m^p)^(1/p)), one for the weight GEMMs and one for
attention. Starting roofs are the ceilings measured with each point (the read stream, GEMM
FLOP/s); the fit finds the Calibration (fractions of those roofs, plus overheads and corners) that
minimises the log-space error of the library's own step time against the measured one
(Levenberg-Marquardt, numpy only, from a few starting points). With a single layer count in the
data, per-step and per-layer overheads cannot be told apart: the overhead is then fitted once and
reported per layer (launches and Python work scale with L). Held-out error: leave-one-context-out;
each context is predicted by a fit that never saw it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from roofline import Hardware, ModelConfig, Options, Precision
from roofline.calibration import Calibration
from roofline.config import measured_config
from roofline.deployment import Ceilings, Deployment
from roofline.evaluate import evaluate
from roofline.least_squares import levenberg_marquardt
from roofline.model import DECODE, decode_context

from . import records

DTYPES = ("fp32", "bf16", "fp16")
MAX_EFFICIENCY = 1.0  # Calibration's own bound: no kernel beats the measured roof
PRIOR_WEIGHT = 0.01  # weak pull of unidentified roofs (e.g. FLOP/s when nothing is compute bound) to 1


@dataclass(frozen=True)
class Group:
    """Measured points sharing a model, phase, dtype and KV dtype, with the library's per-op counts stacked."""
    phase: str
    deployment: Deployment  # on the measured ceilings of each point (read stream, GEMM FLOP/s)
    counts: np.ndarray  # (n_ops, n_components, n_points)
    tokens: np.ndarray  # (n_points,) B·T rows of each step
    measured_s: np.ndarray  # (n_points,)
    index: np.ndarray  # the points' row numbers in the frame

    @property
    def precision(self) -> Precision:
        return self.deployment.precision


def row_config(row) -> ModelConfig:
    return measured_config(str(row["model"]), dict(row))


def row_options(row) -> Options:
    """Count what the harness ran: its attention kernel is recorded with every row."""
    return Options(attention=str(row["attention"]))


def roof_bandwidth(rows) -> np.ndarray:
    """The bandwidth roof of each row: its measured read stream (a decode step reads weights and cache
    and writes next to nothing), or, where a file has none, its copy bandwidth (read + written)."""
    read, copy = rows["read_bandwidth"].to_numpy(float), rows["copy_bandwidth"].to_numpy(float)
    return np.where(np.isfinite(read) & (read > 0), read, copy)


def measured_hardware(frame: pd.DataFrame) -> Hardware:
    """The measured ceilings (median over the file's runs) as a Hardware: the roofs the fit starts from."""
    peaks = {d: float(frame[f"matmul_flops_{d}"].median()) for d in DTYPES if frame[f"matmul_flops_{d}"].notna().any()}
    return Hardware(id="measured", name=str(frame["device_name"].iloc[0]), memory_bytes=1.0,
                    memory_bandwidth=float(np.median(roof_bandwidth(frame))), peak_flops=peaks)


def row_deployment(row, hardware: Hardware, calibration: Calibration | None = None, ceilings=None) -> Deployment:
    """What the harness ran: the row's weight format, activation dtype and KV dtype (records.row_precision)."""
    return Deployment(row_config(row), hardware, records.row_precision(row), row_options(row),
                      calibration or Calibration(), ceilings=ceilings)


def groups_of(frame: pd.DataFrame) -> list[Group]:
    out = []
    keys = ["config_hash", "phase", "dtype", "kv_dtype", "weight_format", "attention"]
    for (_config_hash, phase, dtype, *_), rows in frame.groupby(keys):
        ceilings = Ceilings(roof_bandwidth(rows), {dtype: rows[f"matmul_flops_{dtype}"].to_numpy(float)})
        d = row_deployment(rows.iloc[0], measured_hardware(rows), ceilings=ceilings)
        batch, context = rows["batch"].to_numpy(float), rows["context"].to_numpy(float)
        compiled = d.phase(phase)
        # decode attends the cached context plus the new token (the library's TPOT at prompt = context)
        keys = decode_context(context) if phase == DECODE else context
        counts = compiled(batch, keys, d.precision.byte_widths)
        out.append(Group(phase, d, counts, batch * (1.0 if phase == DECODE else context),
                         rows["time_s"].to_numpy(float), rows.index.to_numpy()))
    return out


def step_time(group: Group, calibration: Calibration) -> np.ndarray:
    d = dataclasses.replace(group.deployment, calibration=calibration)
    return d.price(d.phase(group.phase), group.counts, group.tokens).total_s


class Parameters:
    """The vector the optimiser moves, and the Calibration it stands for."""

    def __init__(self, dtypes: list[str], separate_overheads: bool):
        self.dtypes, self.separate = dtypes, separate_overheads
        self.n_overheads = 2 if separate_overheads else 1
        self.n_efficiencies = 3 + len(dtypes)  # bandwidth, FLOP/s per dtype, attention bandwidth and FLOP/s
        self.size = self.n_efficiencies + self.n_overheads + 2  # the last two: the corners' sharpness

    def starts(self) -> list[np.ndarray]:
        """Several starting points: the least squares has local minima (a large fixed overhead can stand
        in for a slow roof), so the fit keeps the best of a small grid over overhead and corner.
        Efficiencies as logit(e / MAX_EFFICIENCY) from e = 0.5; overheads as log seconds; corner p = 1 + exp(x)."""
        return [np.r_[np.zeros(self.n_efficiencies), np.full(self.n_overheads, np.log(overhead)), np.log(p - 1),
                      np.log(p - 1)]
                for overhead in (1e-6, 1e-4) for p in (1.5, 4.0, 30.0)]

    def calibration(self, x: np.ndarray, name: str, n_layers: int) -> Calibration:
        efficiency = MAX_EFFICIENCY / (1 + np.exp(-x[:self.n_efficiencies]))
        overheads = np.exp(np.clip(x[self.n_efficiencies:-2], -40, 5))
        step, layer = (overheads[0], overheads[1]) if self.separate else (0.0, overheads[0] / n_layers)
        corner, attention_corner = (1 + float(np.exp(np.clip(v, -20, 6))) for v in x[-2:])
        return Calibration(name, float(efficiency[0]), {d: float(e) for d, e in zip(self.dtypes, efficiency[1:-2])},
                           float(step), float(layer), corner, attention_bandwidth_efficiency=float(efficiency[-2]),
                           attention_flops_efficiency=float(efficiency[-1]), attention_corner=attention_corner)


def fit_groups(groups: list[Group], hardware: Hardware, name: str) -> Calibration:
    dtypes = sorted({g.precision.weight_matmul_dtype for g in groups})
    layer_counts = {g.deployment.config.n_layers for g in groups}
    params = Parameters(dtypes, separate_overheads=len(layer_counts) > 1)
    n_layers = min(layer_counts)
    measured = np.log(np.concatenate([g.measured_s for g in groups]))

    def residual(x):
        calibration = params.calibration(x, name, n_layers)
        predicted = np.log(np.concatenate([step_time(g, calibration) for g in groups]))
        return np.r_[predicted - measured, PRIOR_WEIGHT * x[:params.n_efficiencies]]

    fits = [levenberg_marquardt(residual, start) for start in params.starts()]
    best = min(fits, key=lambda x: float(residual(x) @ residual(x)))
    return params.calibration(best, name, n_layers)


def row_hardware(row, hardware: Hardware) -> Hardware:
    """The device as it was when the row was measured: its own recorded ceilings."""
    dtype = str(row["dtype"])
    return dataclasses.replace(hardware, memory_bandwidth=float(roof_bandwidth(pd.DataFrame([row]))[0]),
                               peak_flops={**hardware.peak_flops, dtype: float(row[f"matmul_flops_{dtype}"])})


def predict(frame: pd.DataFrame, hardware: Hardware, calibration: Calibration) -> np.ndarray:
    """Through the public path: evaluate's TPOT (decode) or TTFT (prefill) at each row."""
    out = []
    for _, row in frame.iterrows():
        metrics = evaluate(row_deployment(row, row_hardware(row, hardware), calibration),
                           row["batch"], row["context"], 1, e2e=False)
        out.append(float(metrics["tpot_s" if row["phase"] == "decode" else "ttft_s"]))
    return np.array(out)


@dataclass(frozen=True)
class FitResult:
    calibration: Calibration  # fractions of the measured ceilings
    hardware: Hardware  # the measured ceilings
    points: pd.DataFrame  # ok rows with predicted, heldout_predicted, errors, mbu, mfu
    summary: dict  # per phase: n, median and p90 of held-out |error|


def utilization(frame: pd.DataFrame, hardware: Hardware) -> pd.DataFrame:
    """MBU and MFU from the library's byte and FLOP counts over the measured time."""
    bytes_, flops = [], []
    for _, row in frame.iterrows():
        metrics = evaluate(row_deployment(row, hardware), row["batch"], row["context"], 1, e2e=False)
        bytes_.append(float(metrics[f"{row['phase']}_bytes"]))
        flops.append(float(metrics[f"{row['phase']}_flops"]))
    frame = frame.assign(model_bytes=bytes_, model_flops=flops)
    frame["achieved_bandwidth"] = frame["model_bytes"] / frame["time_s"]
    frame["achieved_flops"] = frame["model_flops"] / frame["time_s"]
    frame["mbu"] = frame["achieved_bandwidth"] / roof_bandwidth(frame)  # of the read stream: what decode does
    frame["mbu_copy"] = frame["achieved_bandwidth"] / frame["copy_bandwidth"]
    peak = np.array([row[f"matmul_flops_{row['dtype']}"] for _, row in frame.iterrows()], dtype=float)
    frame["mfu"] = frame["achieved_flops"] / peak
    return frame


def fit(frame: pd.DataFrame, name: str) -> FitResult:
    ok = frame[frame["status"] == records.OK].reset_index(drop=True)
    if ok.empty:
        raise ValueError("fit: no measured (status ok) rows")
    if ok["device_name"].nunique() > 1:
        raise ValueError(f"fit: one device at a time; the files hold {sorted(ok['device_name'].unique())}")
    hardware = measured_hardware(ok)
    calibration = fit_groups(groups_of(ok), hardware, name)
    ok = utilization(ok, hardware).assign(predicted_s=predict(ok, hardware, calibration))
    heldout = np.full(len(ok), np.nan)
    for context in sorted(ok["context"].unique()):
        held = (ok["context"] == context).to_numpy()
        if held.all():
            continue  # one context only: nothing to hold out against
        rest = fit_groups(groups_of(ok[~held]), hardware, name)
        heldout[held] = predict(ok[held], hardware, rest)
    ok["heldout_predicted_s"] = heldout
    ok["heldout_error"] = ok["heldout_predicted_s"] / ok["time_s"] - 1
    ok["insample_error"] = ok["predicted_s"] / ok["time_s"] - 1
    return FitResult(calibration, hardware, ok, summarize(ok))


def score(frame: pd.DataFrame, calibration: Calibration) -> FitResult:
    """A calibration fitted on other measurements (fractions of the measured ceilings), applied to
    each row's own ceilings: nothing is refitted, so every point is held out (a transfer test)."""
    ok = frame[frame["status"] == records.OK].reset_index(drop=True)
    if ok.empty:
        raise ValueError("fit: no measured (status ok) rows")
    hardware = measured_hardware(ok)
    ok = utilization(ok, hardware).assign(predicted_s=predict(ok, hardware, calibration))
    ok["heldout_predicted_s"] = ok["predicted_s"]
    ok["heldout_error"] = ok["insample_error"] = ok["predicted_s"] / ok["time_s"] - 1
    return FitResult(calibration, hardware, ok, summarize(ok))


def summarize(points: pd.DataFrame) -> dict:
    summary = {}
    for phase, group in points.groupby("phase"):
        errors = group["heldout_error"].abs().dropna()
        summary[phase] = {"n_points": len(group), "n_heldout": len(errors),
                          "heldout_median_abs_err": float(errors.median()) if len(errors) else float("nan"),
                          "heldout_p90_abs_err": float(errors.quantile(0.9)) if len(errors) else float("nan"),
                          "insample_median_abs_err": float(group["insample_error"].abs().median())}
    batch1 = points[(points["phase"] == "decode") & (points["batch"] == 1)]
    summary["mbu_batch1"] = float(batch1["mbu"].median()) if len(batch1) else float("nan")
    summary["mbu_copy_batch1"] = float(batch1["mbu_copy"].median()) if len(batch1) else float("nan")
    return summary


def calibration_document(result: FitResult, datasheet: Hardware | None, sources: list[str]) -> dict:
    """The YAML body: fractions of the datasheet's roofs (or of the measured ones when there is none)."""
    c, hw = result.calibration, result.hardware
    achieved_bw = c.bandwidth_efficiency * hw.memory_bandwidth
    achieved_flops = {d: e * hw.peak_flops[d] for d, e in c.flops_efficiency.items()}
    reference = datasheet or hw
    # attention's fractions are of the device's roofs too: restated against the reference's
    attention_dtype = min(achieved_flops, key=achieved_flops.get)
    attention_bandwidth = c.attention_bandwidth_efficiency * hw.memory_bandwidth / reference.memory_bandwidth
    attention_flops = c.attention_flops_efficiency * hw.peak_flops[attention_dtype] / reference.peak(attention_dtype)
    document = {
        "name": c.name,
        "hardware": datasheet.id if datasheet else "measured",
        "transferable": bool(datasheet) and datasheet.id != "cpu",  # the cpu entry is one machine's measurement
        "bandwidth_efficiency": achieved_bw / reference.memory_bandwidth,
        "flops_efficiency": {d: f / reference.peak(d) for d, f in achieved_flops.items()},
        "step_overhead_s": c.step_overhead_s,
        "layer_overhead_s": c.layer_overhead_s,
        "corner": c.corner,
        "attention_bandwidth_efficiency": attention_bandwidth,
        "attention_flops_efficiency": attention_flops,
        "attention_corner": c.attention_corner,
        "achieved": {"bandwidth_bytes_per_s": achieved_bw, "flops_per_s": achieved_flops},
        "measured_ceilings": {"copy_bandwidth_bytes_per_s": float(result.points["copy_bandwidth"].median()),
                              "read_bandwidth_bytes_per_s": hw.memory_bandwidth,
                              "matmul_flops_per_s": dict(hw.peak_flops)},
        "fit": {"device_name": hw.name, "sources": sources, "n_points": len(result.points),
                "torch_version": str(result.points["torch_version"].iloc[0]), **_plain(result.summary)},
    }
    too_high = [k for k, v in [("bandwidth_efficiency", document["bandwidth_efficiency"]),
                               ("attention_bandwidth_efficiency", attention_bandwidth),
                               ("attention_flops_efficiency", attention_flops),
                               *document["flops_efficiency"].items()] if v > MAX_EFFICIENCY]
    if too_high:
        raise ValueError(f"fit: {', '.join(too_high)} exceed {MAX_EFFICIENCY} of hardware {reference.id!r}'s "
                         f"datasheet; pass --hardware with a matching entry")
    return _plain(document)


def measured_fractions(document: dict, datasheet: Hardware | None) -> Calibration:
    """A committed calibration file back as the fit's own Calibration, fractions of the measured ceilings it was
    fitted on (the inverse of calibration_document): it scores its own measurements without a refit.

    datasheet: the Hardware the document's fractions are of (its `hardware` field); None for `measured`."""
    achieved, measured = document["achieved"], document["measured_ceilings"]
    read_bandwidth, measured_flops = measured["read_bandwidth_bytes_per_s"], measured["matmul_flops_per_s"]
    reference_bandwidth = datasheet.memory_bandwidth if datasheet else read_bandwidth
    attention_dtype = min(achieved["flops_per_s"], key=achieved["flops_per_s"].get)
    reference_flops = datasheet.peak(attention_dtype) if datasheet else measured_flops[attention_dtype]
    return Calibration(
        str(document["name"]), achieved["bandwidth_bytes_per_s"] / read_bandwidth,
        {d: f / measured_flops[d] for d, f in achieved["flops_per_s"].items()},
        float(document["step_overhead_s"]), float(document["layer_overhead_s"]), float(document["corner"]),
        attention_bandwidth_efficiency=document["attention_bandwidth_efficiency"] * reference_bandwidth / read_bandwidth,
        attention_flops_efficiency=document["attention_flops_efficiency"] * reference_flops
        / measured_flops[attention_dtype],
        attention_corner=document.get("attention_corner"))


def _plain(value):
    """numpy scalars and nested containers as plain Python, for YAML and JSON."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value
