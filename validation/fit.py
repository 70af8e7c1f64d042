"""Fit a device's physical parameters to its measurements, and score them on held-out points.

Parameters (an engine profile's: roofline/engine.py): the fractions of the measured bandwidth and GEMM
FLOP/s the weight GEMVs and GEMMs reach, the fractions of those two roofs the attention kernels reach,
fixed overhead per step and per layer, and the sharpness p of the roofline corner (each op takes
(c^p + m^p)^(1/p)), one for the weight GEMMs and one for attention. Starting roofs are the ceilings
measured with each point (the read stream, GEMM FLOP/s); the fit is the one every profile's is
(roofline.fitting.least_squares: scipy's least squares in each parameter's physical range, a robust loss), of the
log error of the library's own step time against the measured one, from a few starting points. With a
single layer count in the data, per-step and per-layer overheads cannot be told apart: the overhead is
then fitted per layer alone (launches and Python work scale with L). Held-out error: leave-one-context-out;
each context is predicted by a fit that never saw it. The result is written as an engine profile
(data/engines/harness*.yaml), restated as fractions of a datasheet where the device has one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from roofline import Hardware, ModelConfig, Options, Precision
from roofline.models.config import measured_config
from roofline.deployment import Ceilings, Deployment
from roofline.engine import IDEAL, MEASURED, PARAMETERS, Engine
from roofline.evaluate import evaluate
from roofline.fitting.least_squares import fit as fit_parameters
from roofline.model import DECODE, decode_context
from roofline.views.fmt import plain

from . import records

DTYPES = ("fp32", "bf16", "fp16")
MAX_EFFICIENCY = 1.0  # an efficiency's own bound: no kernel beats the measured roof
PRIOR_WEIGHT = 1e-3  # a faint pull to the prior (half the roofs, 10 us a layer, p = 4): tens of points pin each
# parameter here, so only what no point pins (FLOP/s when nothing is compute bound) stays near it
EFFICIENCIES = ("bandwidth_efficiency", "flops_efficiency", "attention_bandwidth_efficiency",
                "attention_flops_efficiency")


@dataclass(frozen=True)
class Group:
    """Measured points sharing a model, phase, dtype and KV dtype, with the library's per-op counts stacked."""
    phase: str
    deployment: Deployment  # on the measured ceilings of each point (read stream, GEMM FLOP/s)
    counts: np.ndarray  # (n_ops, n_components, n_points)
    tokens: np.ndarray  # (n_points,) B·T rows of each step
    sequences: np.ndarray  # (n_points,) B sequences of each step
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
    """The bandwidth roof of each row (Ceilings.measured: the read stream, else the copy)."""
    return np.atleast_1d(Ceilings.measured(rows["read_bandwidth"], rows["copy_bandwidth"], {}).bandwidth)


def measured_hardware(frame: pd.DataFrame) -> Hardware:
    """The measured ceilings (median over the file's runs) as a Hardware: the roofs the fit starts from."""
    peaks = {d: float(frame[f"matmul_flops_{d}"].median()) for d in DTYPES if frame[f"matmul_flops_{d}"].notna().any()}
    return Hardware(id="measured", name=str(frame["device_name"].iloc[0]), memory_bytes=1.0,
                    memory_bandwidth=float(np.median(roof_bandwidth(frame))), peak_flops=peaks)


def row_deployment(row, hardware: Hardware, engine: Engine = IDEAL, ceilings=None) -> Deployment:
    """What the harness ran: the row's weight format, activation dtype and KV dtype (records.row_precision)."""
    return Deployment(row_config(row), hardware, records.row_precision(row), row_options(row), engine,
                      ceilings=ceilings)


def groups_of(frame: pd.DataFrame) -> list[Group]:
    out = []
    keys = ["config_hash", "phase", "dtype", "kv_dtype", "weight_format", "attention"]
    for (_config_hash, phase, dtype, *_), rows in frame.groupby(keys):
        ceilings = Ceilings.measured(rows["read_bandwidth"], rows["copy_bandwidth"],
                                     {dtype: rows[f"matmul_flops_{dtype}"].to_numpy(float)})
        d = row_deployment(rows.iloc[0], measured_hardware(rows), ceilings=ceilings)
        batch, context = rows["batch"].to_numpy(float), rows["context"].to_numpy(float)
        compiled = d.phase(phase)
        # decode attends the cached context plus the new token (the library's TPOT at prompt = context)
        keys = decode_context(context) if phase == DECODE else context
        counts = compiled(batch, keys, d.precision.byte_widths)
        out.append(Group(phase, d, counts, batch * (1.0 if phase == DECODE else context), batch,
                         rows["time_s"].to_numpy(float), rows.index.to_numpy()))
    return out


def step_time(group: Group, engine: Engine) -> np.ndarray:
    d = dataclasses.replace(group.deployment, engine=engine)
    return d.price(d.phase(group.phase), group.counts, group.tokens, group.sequences).total_s


def parameters(groups: list[Group]) -> list[str]:
    """What the points can pin: the overhead per layer, and per step too when the layer count varies."""
    overheads = ["step_overhead_s", "layer_overhead_s"] if len({g.deployment.config.n_layers for g in groups}) > 1 \
        else ["layer_overhead_s"]
    return [*EFFICIENCIES, *overheads, "corner", "attention_corner"]


def starts(groups: list[Group]) -> tuple[dict, ...]:
    """Several starting points: the least squares has local minima (a large fixed overhead can stand in for a
    slow roof), so the fit keeps the best of a small grid over the overhead (of the whole step) and the corner."""
    n_layers = min(g.deployment.config.n_layers for g in groups)
    return tuple({"layer_overhead_s": overhead / n_layers, "step_overhead_s": overhead,
                  "corner": p, "attention_corner": p} for overhead in (1e-6, 1e-4) for p in (1.5, 4.0, 30.0))


def fit_groups(groups: list[Group], name: str):
    """The engine profile (fractions of the measured ceilings) that fits the groups' step times, and its ranges."""
    dtypes = sorted({g.precision.weight_matmul_dtype for g in groups})
    if len(dtypes) > 1:
        raise ValueError(f"fit: one GEMM dtype at a time (an engine has one GEMM efficiency); the files hold {dtypes}")
    measured = np.log(np.concatenate([g.measured_s for g in groups]))
    prior = Engine(name, **{e: 0.5 for e in EFFICIENCIES}, corner=4.0, attention_corner=4.0, layer_overhead_s=1e-5)

    def log_errors(engine):
        return np.log(np.concatenate([step_time(g, engine) for g in groups])) - measured
    return fit_parameters(prior, parameters(groups), log_errors, starts=starts(groups), prior_weight=PRIOR_WEIGHT)


def row_hardware(row, hardware: Hardware) -> Hardware:
    """The device as it was when the row was measured: its own recorded ceilings."""
    dtype = str(row["dtype"])
    return dataclasses.replace(hardware, memory_bandwidth=float(roof_bandwidth(pd.DataFrame([row]))[0]),
                               peak_flops={**hardware.peak_flops, dtype: float(row[f"matmul_flops_{dtype}"])})


def predict(frame: pd.DataFrame, hardware: Hardware, engine: Engine) -> np.ndarray:
    """Through the public path: evaluate's TPOT (decode) or TTFT (prefill) at each row."""
    out = []
    for _, row in frame.iterrows():
        metrics = evaluate(row_deployment(row, row_hardware(row, hardware), engine),
                           row["batch"], row["context"], 1, e2e=False)
        out.append(float(metrics["tpot_s" if row["phase"] == "decode" else "ttft_s"]))
    return np.array(out)


@dataclass(frozen=True)
class FitResult:
    engine: Engine  # fractions of the measured ceilings
    ranges: dict  # fitted parameter -> its 68% range (roofline.fitting.least_squares.Pinning)
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
    fitted = fit_groups(groups_of(ok), name)
    ok = utilization(ok, hardware).assign(predicted_s=predict(ok, hardware, fitted.engine))
    heldout = np.full(len(ok), np.nan)
    for context in sorted(ok["context"].unique()):
        held = (ok["context"] == context).to_numpy()
        if held.all():
            continue  # one context only: nothing to hold out against
        rest = fit_groups(groups_of(ok[~held]), name).engine
        heldout[held] = predict(ok[held], hardware, rest)
    ok["heldout_predicted_s"] = heldout
    ok["heldout_error"] = ok["heldout_predicted_s"] / ok["time_s"] - 1
    ok["insample_error"] = ok["predicted_s"] / ok["time_s"] - 1
    return FitResult(fitted.engine, fitted.ranges, hardware, ok, summarize(ok))


def score(frame: pd.DataFrame, engine: Engine) -> FitResult:
    """A harness profile fitted on other measurements (fractions of the measured ceilings), applied to
    each row's own ceilings: nothing is refitted, so every point is held out (a transfer test)."""
    ok = frame[frame["status"] == records.OK].reset_index(drop=True)
    if ok.empty:
        raise ValueError("fit: no measured (status ok) rows")
    hardware = measured_hardware(ok)
    ok = utilization(ok, hardware).assign(predicted_s=predict(ok, hardware, engine))
    ok["heldout_predicted_s"] = ok["predicted_s"]
    ok["heldout_error"] = ok["insample_error"] = ok["predicted_s"] / ok["time_s"] - 1
    return FitResult(engine, {}, hardware, ok, summarize(ok))


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


def engine_document(result: FitResult, datasheet: Hardware | None, sources: list[str]) -> dict:
    """The profile's YAML body: fractions of the datasheet's roofs (or of the measured ones when there is none),
    each fitted parameter with its range and what pinned it, and the fit's record (`harness_fit`)."""
    e, hw = result.engine, result.hardware
    dtype = str(result.points["dtype"].iloc[0])  # the one GEMM dtype fitted (fit_groups refuses several)
    reference = datasheet or hw
    bandwidth, flops = hw.memory_bandwidth / reference.memory_bandwidth, hw.peak_flops[dtype] / reference.peak(dtype)
    scale = {"bandwidth_efficiency": bandwidth, "attention_bandwidth_efficiency": bandwidth,
             "flops_efficiency": flops, "attention_flops_efficiency": flops}
    too_high = [n for n, f in scale.items() if getattr(e, n) * f > MAX_EFFICIENCY]
    if too_high:
        raise ValueError(f"fit: {', '.join(too_high)} exceed {MAX_EFFICIENCY} of hardware {reference.id!r}'s "
                         f"datasheet; pass --hardware with a matching entry")
    note = f"the harness fit of {', '.join(sources)} ({len(result.points)} points, {hw.name})"
    restated = Engine(**{**{n: getattr(e, n) for n in PARAMETERS}, **{n: getattr(e, n) * f for n, f in scale.items()}},
                      name=e.name, hardware=datasheet.id if datasheet else MEASURED,
                      pinned_by={n: note for n in result.ranges})
    document = restated.as_document()
    for name, pinned in result.ranges.items():
        f = scale.get(name, 1.0)
        document[name]["range_68"] = [pinned.low * f, pinned.high * f]
    document["harness_fit"] = plain({
        "device_name": hw.name, "sources": sources, "n_points": len(result.points),
        "torch_version": str(result.points["torch_version"].iloc[0]), **result.summary,
        "achieved": {"bandwidth_bytes_per_s": e.bandwidth_efficiency * hw.memory_bandwidth,
                     "flops_per_s": {dtype: e.flops_efficiency * hw.peak_flops[dtype]}},
        "measured_ceilings": {"copy_bandwidth_bytes_per_s": float(result.points["copy_bandwidth"].median()),
                              "read_bandwidth_bytes_per_s": hw.memory_bandwidth,
                              "matmul_flops_per_s": dict(hw.peak_flops)}})
    return plain(document)


def measured_fractions(engine: Engine, datasheet: Hardware | None) -> Engine:
    """A committed harness profile back as the fit's own Engine, fractions of the measured ceilings it was
    fitted on (the inverse of engine_document's scaling): it scores its own measurements without a refit.

    datasheet: the Hardware the profile's fractions are of (its `hardware` field); None for `measured`."""
    record = engine.harness_fit
    measured = record["measured_ceilings"]
    read_bandwidth, measured_flops = measured["read_bandwidth_bytes_per_s"], measured["matmul_flops_per_s"]
    dtype = next(iter(record["achieved"]["flops_per_s"]))  # the one GEMM dtype the fit saw
    bandwidth = (datasheet.memory_bandwidth if datasheet else read_bandwidth) / read_bandwidth
    flops = (datasheet.peak(dtype) if datasheet else measured_flops[dtype]) / measured_flops[dtype]
    return replace(engine, hardware=MEASURED, bandwidth_efficiency=engine.bandwidth_efficiency * bandwidth,
                   attention_bandwidth_efficiency=engine.attention_bandwidth_efficiency * bandwidth,
                   flops_efficiency=engine.flops_efficiency * flops,
                   attention_flops_efficiency=engine.attention_flops_efficiency * flops)
