"""The simulator against the measured server: each logged run (validation/serve_bench.py) predicted from
its own workload and measured ceilings, and the p50 / p90 TTFT and TPOT compared.

A step is priced by the Deployment on the run's ceilings with an engine profile (fractions of measured
ceilings: data/engines/harness-cpu.yaml), through the simulator's StepCost. The server's host term, when
one is fitted, is seconds a step spends outside the pricer's model ops (the scheduler's Python, the
per-sequence attention loop, building positions and segments): fitted on the steps of runs given apart
from the scored ones, never on the scored runs, it becomes the engine's step_overhead_s and
sequence_overhead_s, which the pricer prices as rows of the step like any engine's (HostCost.on).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import brentq, lsq_linear

from roofline import Hardware, ModelConfig
from roofline.deployment import Deployment
from roofline.engine import PARAMETERS, Engine
from roofline.model import Options
from roofline.precision import Precision
from roofline.serving.batching import Result, StepCost, simulate_continuous
from roofline.serving.first_wave import first_wave
from roofline.serving.load import LoadModel, Policy

from .decoder import attention_kernel
from .serve_bench import DTYPE, ServeSpec, read_csv, runs_path, steps_path, workload
from .sweep import config_hash

# Physical bounds of the host term: a step's fixed Python (scheduling, sampling, segment building) is
# well under 10 ms; one sequence's share (its attention call and cache writes in each layer, a few
# microseconds an op) within the engine's bound on sequence_overhead_s (1 ms).
STEP_S_BOUND, SEQUENCE_S_BOUND = 1e-2, PARAMETERS["sequence_overhead_s"][2]
PREFILL_HEAVY_TOKENS = 64  # a step with more prefill tokens than this: its GEMMs are compute-bound (fp32, 1 thread)


@dataclass(frozen=True)
class HostCost:
    """The server's host term as fitted (fit_host), before it joins the engine (`on`)."""
    step_s: float = 0.0  # s per step, whatever it carries
    sequence_s: float = 0.0  # s per sequence in the step (decoders and prefill chunks)
    source: str = "none"

    def on(self, engine: Engine) -> Engine:
        """`engine` with this term added to its own per-step and per-sequence host costs: the pricer's rows."""
        return replace(engine, step_overhead_s=engine.step_overhead_s + self.step_s,
                       sequence_overhead_s=engine.sequence_overhead_s + self.sequence_s)


class ServerStepCost(StepCost):
    """The simulator's step price on `cpu_share` of a core: the pricer prices a step that has the core to itself;
    time-sliced with another tenant, a step's work takes 1 / share as long."""

    def __init__(self, deployment: Deployment, cpu_share: float = 1.0):
        super().__init__(deployment)
        self.cpu_share = cpu_share

    def iteration(self, decode_contexts, prefills=()) -> float:
        return super().iteration(decode_contexts, prefills) / self.cpu_share


@dataclass
class Run:
    spec: ServeSpec
    rows: list  # its request rows
    read_bandwidth: float  # bytes/s: the roofs it is priced on (machine_roofs)
    matmul_flops: float  # FLOP/s, fp32
    cpu_share: float  # CPU seconds the server got per wall second of its steps (1: a core of its own)

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


def machine_roofs(path: Path) -> tuple[float, float]:
    """The read bandwidth and fp32 GEMM FLOP/s of the machine's usual state while the file's runs were taken:
    the median of every probe before and after a run. One run's own probe can land in another tenant's
    burst (a GEMM probe at 142 against the usual ~250 GFLOP/s): priced on it, the whole run would be."""
    rows = read_csv(runs_path(path))
    if not rows:
        raise ValueError(f"{runs_path(path)}: no runs logged (serve-bench writes it beside {path.name})")
    read = [float(r[f"read_bandwidth_{w}"]) for r in rows for w in ("before", "after")]
    flops = [float(r[f"matmul_flops_fp32_{w}"]) for r in rows for w in ("before", "after")]
    return float(np.median(read)), float(np.median(flops))


def load_runs(paths, presets: dict) -> list[Run]:
    """Completed runs of the CSVs, each with the spec that reproduces its workload and its file's roofs."""
    out = []
    for path in map(Path, paths):
        runs: dict = {}
        for row in read_csv(path):
            runs.setdefault(row["run_id"], []).append(row)
        roofs = machine_roofs(path) if runs else (0.0, 0.0)
        shares = {r["run_id"]: float(r["cpu_share"]) for r in read_csv(runs_path(path))}
        for run_id, rows in runs.items():
            r = rows[0]
            config = presets.get(r["model"])
            if config is None or config_hash(config) != r["config_hash"]:
                raise ValueError(f"{path}: run {run_id}: model {r['model']!r} is not a preset of this version "
                                 "(its config hash differs); fix: score it with the version that measured it")
            clients = int(r.get("clients") or 0)  # files from before the closed loop have no such column
            spec = ServeSpec(config, 0.0 if clients else float(r["rate"]), int(r["prompt_tokens"]),
                             int(r["output_tokens"]), int(r["requests"]), int(r["token_budget"]), int(r["max_batch"]),
                             int(r["seed"]), clients)
            if len(rows) == spec.requests:
                out.append(Run(spec, rows, *roofs, shares[run_id]))
    return out


def run_deployment(run: Run, engine: Engine) -> Deployment:
    return deployment(run.spec.model, run.read_bandwidth, run.matmul_flops, engine)


def logged_steps(runs: list[Run], paths) -> list[tuple]:
    """(run, decode contexts, prefill chunks, CPU seconds) of every step of the given runs: the time each step
    had the core, so another tenant's share is left out."""
    by_run = {run.spec.run_id: run for run in runs}
    out = []
    for path in paths:
        for row in read_csv(steps_path(Path(path))):
            if row["run_id"] in by_run:
                chunks = [tuple(int(v) for v in c.split(":")) for c in row["chunks"].split(";") if c]
                contexts = [float(row["decode_context_mean"])] * int(row["decoders"])
                out.append((by_run[row["run_id"]], contexts, chunks, float(row["cpu_seconds"])))
    if not out:
        raise ValueError("--host-fit: no steps of completed runs found (a <file>.steps.csv beside each CSV)")
    return out


def fit_gemm_efficiency(steps: list[tuple], engine: Engine) -> Engine:
    """The engine with the flops_efficiency at which the prefill-heavy steps (a chunk of more than
    PREFILL_HEAVY_TOKENS: compute-bound GEMMs) take, at the median, what they are priced at. The profile's
    value was fitted on the 2-thread harness; the server runs 1 thread, whose GEMM ceiling is measured but
    whose fraction of it was not. Bounded to (0, 1]: at 1 the GEMMs run at the measured ceiling."""
    heavy = [s for s in steps if sum(take for take, _ in s[2]) > PREFILL_HEAVY_TOKENS]
    if not heavy:
        return engine

    def excess(efficiency: float) -> float:  # median measured / priced - 1 at this efficiency
        trial = replace(engine, flops_efficiency=efficiency)
        costs = {}
        ratios = [cpu / costs.setdefault(id(run), StepCost(run_deployment(run, trial))).iteration(contexts, chunks)
                  for run, contexts, chunks, cpu in heavy]
        return float(np.median(ratios)) - 1

    low, high = 0.05, 1.0
    if excess(high) < 0:  # faster than priced even at the measured ceiling: the bound binds
        return replace(engine, flops_efficiency=high)
    return replace(engine, flops_efficiency=float(brentq(excess, low, high, xtol=1e-4)))


def fit_host(steps: list[tuple], engine: Engine, runs: int) -> HostCost:
    """Step CPU seconds minus the pricer's, as step_s + sequence_s x sequences: the median residual at each
    sequence count, a bounded least-squares line through them weighted by their step counts."""
    residuals: dict = {}
    costs = {}
    for run, contexts, chunks, cpu in steps:
        cost = costs.setdefault(id(run), StepCost(run_deployment(run, engine)))
        residuals.setdefault(len(contexts) + len(chunks), []).append(cpu - cost.iteration(contexts, chunks))
    sequences = np.array(sorted(residuals), dtype=float)
    medians = np.array([np.median(residuals[s]) for s in sorted(residuals)])
    weights = np.sqrt([len(residuals[s]) for s in sorted(residuals)])
    design = np.column_stack([np.ones_like(sequences), sequences]) * weights[:, None]
    # the engine's own host costs stay; the fitted term adds to them within each one's bound
    room = (STEP_S_BOUND - engine.step_overhead_s, SEQUENCE_S_BOUND - engine.sequence_overhead_s)
    fit = lsq_linear(design, medians * weights, bounds=([0.0, 0.0], room))
    return HostCost(float(fit.x[0]), float(fit.x[1]), f"{len(steps)} steps of {runs} runs")


def fit_server(runs: list[Run], paths, engine: Engine) -> tuple[Engine, HostCost]:
    """The server's own terms, on runs apart from the scored ones: the GEMM efficiency at its thread count,
    then the host term on what that leaves."""
    steps = logged_steps(runs, paths)
    engine = fit_gemm_efficiency(steps, engine)
    return engine, fit_host(steps, engine, len(runs))


def predict(run: Run, engine: Engine, host: HostCost = HostCost(), shared: bool = True) -> Result:
    """The simulator on the run's workload and policy (no KV limit: each request has a cache slot); shared:
    on the share of the core the run measured it had, else on a core of its own."""
    work, _ = workload(run.spec)
    cost = ServerStepCost(run_deployment(run, host.on(engine)), run.cpu_share if shared else 1.0)
    return simulate_continuous(work, cost, run.spec.max_batch, chunk_tokens=run.spec.token_budget,
                               clients=run.spec.clients or None)


def score(run: Run, engine: Engine, host: HostCost = HostCost(), shared: bool = True) -> dict:
    """Measured and predicted p50 / p90 TTFT and TPOT of one run, and the relative errors."""
    predicted = predict(run, engine, host, shared)
    out = {"run_id": run.spec.run_id, "rate": run.spec.rate, "clients": run.spec.clients, "prompt_tokens": run.spec.prompt_tokens,
           "load_average": float(run.first["load_average"]), "cpu_share": run.cpu_share}
    for name, simulated in (("ttft", predicted.ttft_s), ("tpot", predicted.tpot_s)):
        measured = run.measured(name)
        for q in (50, 90):
            m, p = float(np.percentile(measured, q)), float(np.percentile(simulated[np.isfinite(simulated)], q))
            out[f"{name}_p{q}_measured_s"], out[f"{name}_p{q}_predicted_s"] = m, p
            out[f"{name}_p{q}_error"] = p / m - 1
    return out


def load_model(run: Run, engine: Engine, host: HostCost = HostCost()) -> LoadModel:
    """The steady-state load model of a run's server on the share of the core it had: the roofs and the host costs
    scaled by the CPU share, as ServerStepCost scales the simulator's steps."""
    share = run.cpu_share
    shared = replace(host.on(engine), step_overhead_s=(engine.step_overhead_s + host.step_s) / share,
                     sequence_overhead_s=(engine.sequence_overhead_s + host.sequence_s) / share)
    d = deployment(run.spec.model, run.read_bandwidth * share, run.matmul_flops * share, shared)
    return LoadModel(d, run.spec.prompt_tokens, run.spec.output_tokens,
                     Policy(run.spec.token_budget, run.spec.max_batch))


def closed_loop(run: Run, engine: Engine, host: HostCost = HostCost()) -> dict:
    """A closed-loop run's TTFT, seconds: its mean, p50, p90, first wave (the C requests sent at t = 0) and the
    rest, measured and simulated (clients = C); the load model's steady state and its run mean (first wave
    included, N = the run's requests)."""
    C, N = run.spec.clients, run.spec.requests
    order = np.argsort([int(r["request"]) for r in run.rows])
    out = {"run_id": run.spec.run_id, "clients": C, "prompt_tokens": run.spec.prompt_tokens, "requests": N,
           "cpu_share": run.cpu_share}
    for name, ttft in (("measured", run.measured("ttft")[order]), ("simulated", predict(run, engine, host).ttft_s)):
        out.update({f"{name}_mean_s": float(np.mean(ttft)), f"{name}_p50_s": float(np.percentile(ttft, 50)),
                    f"{name}_p90_s": float(np.percentile(ttft, 90)), f"{name}_first_wave_s": float(np.mean(ttft[:C])),
                    f"{name}_later_s": float(np.mean(ttft[C:]))})
    state = load_model(run, engine, host).at_concurrency([float(C)], [float(N)])
    out["model_steady_s"], out["model_run_mean_s"] = float(state["ttft_steady_s"][0]), float(state["ttft_s"][0])
    out["model_first_wave_s"] = float(np.mean(first_wave(load_model(run, engine, host), C)))
    return out
