"""The simulator against the measured server: each logged run (validation/serve_bench.py) predicted from
its own workload and measured ceilings, and the p50 / p90 TTFT and TPOT compared.

A step is priced by the Deployment on the run's ceilings with an engine profile (fractions of measured
ceilings: data/engines/harness-cpu.yaml), through the simulator's StepCost, plus the server's host
term when one is fitted: seconds a step spends outside the pricer's ops (the scheduler's Python, the
per-sequence attention loop, building positions and segments). That term is fitted on the steps of
runs given apart from the scored ones, never on the scored runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import lsq_linear

from roofline import Hardware, ModelConfig
from roofline.deployment import Deployment
from roofline.engine import Engine
from roofline.model import Options
from roofline.precision import Precision
from roofline.serving.batching import Result, StepCost, simulate_continuous

from .decoder import attention_kernel
from .serve_bench import DTYPE, ServeSpec, read_csv, steps_path, workload
from .sweep import config_hash

# Physical bounds of the host term: a step's fixed Python (scheduling, sampling, segment building) is
# well under 10 ms; one sequence's share (its attention call and cache writes in each layer, a few
# microseconds an op) under 1 ms.
STEP_S_BOUND, SEQUENCE_S_BOUND = 1e-2, 1e-3


@dataclass(frozen=True)
class HostCost:
    step_s: float = 0.0  # s per step, whatever it carries
    sequence_s: float = 0.0  # s per sequence in the step (decoders and prefill chunks)
    source: str = "none"


class ServerStepCost(StepCost):
    """The simulator's step price plus the server's host term."""

    def __init__(self, deployment: Deployment, host: HostCost):
        super().__init__(deployment)
        self.host = host

    def iteration(self, decode_contexts, prefills=()) -> float:
        sequences = len(decode_contexts) + len(prefills)
        return super().iteration(decode_contexts, prefills) + self.host.step_s + self.host.sequence_s * sequences


@dataclass
class Run:
    spec: ServeSpec
    rows: list  # its request rows

    @property
    def first(self) -> dict:
        return self.rows[0]

    def measured(self, name: str) -> np.ndarray:
        values = np.array([float(r[f"{name}_s"]) for r in self.rows])
        return values[np.isfinite(values)]


def deployment(config: ModelConfig, read_bandwidth: float, matmul_flops: float, engine: Engine) -> Deployment:
    """The server's model on a run's measured ceilings, under an engine whose fractions are of them."""
    hardware = Hardware(id="measured", name="measured", memory_bytes=1.0, memory_bandwidth=read_bandwidth,
                        peak_flops={DTYPE: matmul_flops})
    options = Options(attention=attention_kernel(config, "cpu", "decode", DTYPE))
    return Deployment(config, hardware, Precision(weights=DTYPE, activations=DTYPE, kv=DTYPE), options, engine)


def load_runs(paths, presets: dict) -> list[Run]:
    """Completed runs of the CSVs, each with the spec that reproduces its workload."""
    runs: dict = {}
    for path in paths:
        for row in read_csv(Path(path)):
            runs.setdefault((str(path), row["run_id"]), []).append(row)
    out = []
    for (path, run_id), rows in runs.items():
        r = rows[0]
        config = presets.get(r["model"])
        if config is None or config_hash(config) != r["config_hash"]:
            raise ValueError(f"{path}: run {run_id}: model {r['model']!r} is not a preset of this version "
                             "(its config hash differs); fix: score it with the version that measured it")
        spec = ServeSpec(config, float(r["rate"]), int(r["prompt_tokens"]), int(r["output_tokens"]), int(r["requests"]),
                         int(r["token_budget"]), int(r["max_batch"]), int(r["seed"]))
        if len(rows) == spec.requests:
            out.append(Run(spec, rows))
    return out


def run_deployment(run: Run, engine: Engine) -> Deployment:
    return deployment(run.spec.model, float(run.first["read_bandwidth"]), float(run.first["matmul_flops_fp32"]), engine)


def fit_host(runs: list[Run], paths, engine: Engine) -> HostCost:
    """Step seconds measured minus the pricer's, as step_s + sequence_s x sequences: the median residual at
    each sequence count, a bounded least-squares line through them weighted by their step counts."""
    by_run = {run.spec.run_id: run for run in runs}
    residuals: dict = {}
    for path in paths:
        for row in read_csv(steps_path(Path(path))):
            run = by_run.get(row["run_id"])
            if run is None:
                continue
            cost = StepCost(run_deployment(run, engine))
            decoders = int(row["decoders"])
            chunks = [tuple(int(v) for v in c.split(":")) for c in row["chunks"].split(";") if c]
            priced = cost.iteration([float(row["decode_context_mean"])] * decoders, chunks)
            residuals.setdefault(decoders + len(chunks), []).append(float(row["seconds"]) - priced)
    if not residuals:
        raise ValueError("--host-fit: no steps of completed runs found (a <file>.steps.csv beside each CSV)")
    sequences = np.array(sorted(residuals), dtype=float)
    medians = np.array([np.median(residuals[s]) for s in sorted(residuals)])
    weights = np.sqrt([len(residuals[s]) for s in sorted(residuals)])
    design = np.column_stack([np.ones_like(sequences), sequences]) * weights[:, None]
    fit = lsq_linear(design, medians * weights, bounds=([0.0, 0.0], [STEP_S_BOUND, SEQUENCE_S_BOUND]))
    steps = sum(len(v) for v in residuals.values())
    return HostCost(float(fit.x[0]), float(fit.x[1]), f"{steps} steps of {len(runs)} runs")


def predict(run: Run, engine: Engine, host: HostCost = HostCost()) -> Result:
    """The simulator on the run's workload and policy (no KV limit: each request has a cache slot)."""
    work, _ = workload(run.spec)
    cost = ServerStepCost(run_deployment(run, engine), host)
    return simulate_continuous(work, cost, run.spec.max_batch, chunk_tokens=run.spec.token_budget)


def score(run: Run, engine: Engine, host: HostCost = HostCost()) -> dict:
    """Measured and predicted p50 / p90 TTFT and TPOT of one run, and the relative errors."""
    predicted = predict(run, engine, host)
    out = {"run_id": run.spec.run_id, "rate": run.spec.rate, "prompt_tokens": run.spec.prompt_tokens,
           "load_average": float(run.first["load_average"])}
    for name, simulated in (("ttft", predicted.ttft_s), ("tpot", predicted.tpot_s)):
        measured = run.measured(name)
        for q in (50, 90):
            m, p = float(np.percentile(measured, q)), float(np.percentile(simulated[np.isfinite(simulated)], q))
            out[f"{name}_p{q}_measured_s"], out[f"{name}_p{q}_predicted_s"] = m, p
            out[f"{name}_p{q}_error"] = p / m - 1
    return out
