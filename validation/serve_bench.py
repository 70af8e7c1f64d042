"""Runs of the continuous-batching server (validation/server.py), logged as they go, and the simulator's
prediction of each.

Each run (a model, a Poisson rate or a closed loop of C clients, fixed prompt and output lengths, a token
budget, a seed) appends one
CSV row per request as it completes (TTFT, TPOT, inter-token times, with the device, versions, the
load average and the ceilings measured just before the run), then one row per step to `<file>.steps.csv`
and one for the run (the probes and load averages before and after it) to `<file>.runs.csv`.
A rerun skips the runs whose every request is in the file; a run cut short is dropped and run again
(its queue cannot be resumed half way). validation/serve_score.py predicts the runs.
"""
from __future__ import annotations

import csv
import datetime
import io
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from roofline import ModelConfig
from roofline.serving.batching import Workload, poisson_arrivals

from .ceilings import measure_ceilings
from .probe import SteadyProbe
from .decoder import build_decoder
from .server import Served, serve
from .sweep import config_hash, environment

DTYPE = "fp32"  # the CPU harness's dtype (data/engines/harness-cpu.yaml was fitted on fp32)
REQUEST_COLUMNS = ("run_id", "model", "config_hash", "rate", "clients", "prompt_tokens", "output_tokens", "requests",
                   "token_budget", "max_batch", "seed", "device", "device_name", "torch_version", "threads",
                   "load_average", "read_bandwidth", "matmul_flops_fp32", "request", "arrival_s", "ttft_s", "tpot_s",
                   "e2e_s", "inter_token_ms", "timestamp")
STEP_COLUMNS = ("run_id", "step", "decoders", "decode_context_mean", "chunks", "seconds", "cpu_seconds")
RUN_COLUMNS = ("run_id", "load_average_before", "load_average_after", "read_bandwidth_before", "read_bandwidth_after",
               "matmul_flops_fp32_before", "matmul_flops_fp32_after", "ceiling_drift", "wall_s", "cpu_share", "timestamp")


@dataclass(frozen=True)
class ServeSpec:
    model: ModelConfig
    rate: float  # requests/s, Poisson (ignored in a closed loop)
    prompt_tokens: int
    output_tokens: int
    requests: int
    token_budget: int  # tokens a step carries: decoders first, then prefill chunks
    max_batch: int = 16  # cache slots: sequences in flight
    seed: int = 0
    # closed loop: this many requests in flight from t = 0, a new one as one completes (a serving benchmark's
    # fixed concurrency); 0: open loop, Poisson arrivals at `rate`
    clients: int = 0

    @property
    def load(self) -> str:
        return f"clients{self.clients}" if self.clients else f"rate{self.rate:g}"

    @property
    def run_id(self) -> str:
        return (f"{self.model.name}-{config_hash(self.model)}-{self.load}-p{self.prompt_tokens}"
                f"-g{self.output_tokens}-n{self.requests}-budget{self.token_budget}-slots{self.max_batch}-seed{self.seed}")

    def check(self) -> None:
        if self.clients < 0 or int(self.clients) != self.clients:
            raise ValueError(f"--clients: must be a whole number of requests in flight (0: open loop), got "
                             f"{self.clients!r}")
        for flag, value, low in (("--rate", 1.0 if self.clients else self.rate, 0), ("--prompt", self.prompt_tokens, 0),
                                 ("--output", self.output_tokens, 0), ("--requests", self.requests, 0),
                                 ("--max-batch", self.max_batch, 0)):
            if not (np.isfinite(value) and value > low):
                raise ValueError(f"{flag}: must be a finite number > 0, got {value!r}")
        if self.token_budget <= self.max_batch:
            raise ValueError(f"--token-budget: {self.token_budget} tokens cannot carry {self.max_batch} decoders and a "
                             f"prefill chunk; fix: a budget > --max-batch")


def workload(spec: ServeSpec) -> tuple[Workload, list[torch.Tensor]]:
    """Seeded Poisson arrivals (a closed loop's: set as requests complete, here 0), fixed lengths, and each prompt's
    random token ids."""
    rng = np.random.default_rng(spec.seed)
    arrivals = np.zeros(spec.requests) if spec.clients else poisson_arrivals(rng, spec.rate, spec.requests)
    work = Workload(arrivals, np.full(spec.requests, spec.prompt_tokens), np.full(spec.requests, spec.output_tokens))
    prompts = [torch.from_numpy(rng.integers(0, spec.model.vocab_size, spec.prompt_tokens)) for _ in arrivals]
    return work, prompts


def read_csv(path: Path) -> list[dict]:
    """The file's rows; a last line without its newline (torn by a kill mid-write) is left out."""
    if not path.is_file():
        return []
    text = path.read_text()
    return list(csv.DictReader(io.StringIO(text[:text.rfind("\n") + 1])))


def append(path: Path, columns: tuple, row: dict) -> None:
    """One row, handed to the OS before returning (a header first if the file is new); not fsynced, which
    would add milliseconds to the wall clock being measured. A file written before a column was added keeps its
    header; a row that needs the missing column is refused."""
    new = not path.is_file() or path.stat().st_size == 0
    if not new:
        with open(path, newline="") as handle:
            header = tuple(next(csv.reader(handle)))
        lost = [name for name in columns if name not in header and row.get(name) not in (None, "", 0)]
        if lost:
            raise ValueError(f"{path}: written before the column {', '.join(lost)} existed; fix: log this run to a "
                             "new --out file")
        columns = header
    with open(path, "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, lineterminator="\n")
        if new:
            writer.writeheader()
        writer.writerow(row)


def steps_path(path: Path) -> Path:
    return path.with_suffix(".steps.csv")


def runs_path(path: Path) -> Path:
    return path.with_suffix(".runs.csv")


def completed_runs(path: Path) -> set:
    """Run ids with every request logged; rows of runs cut short are removed from both files."""
    rows = read_csv(path)
    counts: dict = {}
    for row in rows:
        counts[row["run_id"]] = counts.get(row["run_id"], 0) + 1
    done = {run for run, count in counts.items() if count == int(next(r for r in rows if r["run_id"] == run)["requests"])}
    if len(done) < len(counts):
        for file, columns in ((path, REQUEST_COLUMNS), (steps_path(path), STEP_COLUMNS), (runs_path(path), RUN_COLUMNS)):
            kept = [r for r in read_csv(file) if r["run_id"] in done]
            file.unlink(missing_ok=True)
            for row in kept:
                append(file, columns, row)
    return done


def run(spec: ServeSpec, path: Path, warmup_requests: int = 2, probe_patience_s: float = 60.0) -> bool:
    """Serve one run and log it; False when the file already holds it. It starts when the ceilings probe back
    near their best (validation/probe.py: another tenant of a shared CPU halves them for tens of seconds);
    the probe after it goes, with both load averages, into `<file>.runs.csv`, so a run that drifted shows."""
    spec.check()
    path.parent.mkdir(parents=True, exist_ok=True)
    if spec.run_id in completed_runs(path):
        return False
    model = build_decoder(spec.model, DTYPE, "cpu", seed=spec.seed)
    work, prompts = workload(spec)
    warm = ServeSpec(spec.model, 1e6, spec.prompt_tokens, 2, warmup_requests, spec.token_budget, spec.max_batch)
    clients = spec.clients or None
    warm_work, warm_prompts = workload(warm)
    serve(model, warm_work, spec.token_budget, spec.max_batch, warm_prompts)  # first-call costs (allocation, packing)
    probe = SteadyProbe(lambda: measure_ceilings("cpu", (DTYPE,), "probe"), patience_s=probe_patience_s)
    for _ in range(2):  # the machine's usual state: the best of a few probes
        probe.probe()
    before = probe.steady()
    header = {"run_id": spec.run_id, "model": spec.model.name, "config_hash": config_hash(spec.model),
              "rate": "" if spec.clients else spec.rate, "clients": spec.clients or "",
              "prompt_tokens": spec.prompt_tokens, "output_tokens": spec.output_tokens,
              "requests": spec.requests, "token_budget": spec.token_budget, "max_batch": spec.max_batch,
              "seed": spec.seed, **{k: v for k, v in environment("cpu").items() if k in REQUEST_COLUMNS},
              "load_average": os.getloadavg()[0], "read_bandwidth": before.read_bandwidth,
              "matmul_flops_fp32": before.matmul_flops[DTYPE]}
    steps = []

    def log_request(s: Served) -> None:
        append(path, REQUEST_COLUMNS, header | {
            "request": s.request, "arrival_s": s.arrival_s, "ttft_s": s.ttft_s, "tpot_s": s.tpot_s,
            "e2e_s": s.token_s[-1] - s.arrival_s, "inter_token_ms": ";".join(f"{t * 1e3:.3f}" for t in s.inter_token_s),
            "timestamp": datetime.datetime.now().isoformat(timespec="seconds")})

    began = time.perf_counter()
    serve(model, work, spec.token_budget, spec.max_batch, prompts, on_finish=log_request, on_step=steps.append,
          clients=clients)
    wall_s = time.perf_counter() - began
    after = probe.probe()
    append(runs_path(path), RUN_COLUMNS, {
        "run_id": spec.run_id, "load_average_before": header["load_average"], "load_average_after": os.getloadavg()[0],
        "read_bandwidth_before": before.read_bandwidth, "read_bandwidth_after": after.read_bandwidth,
        "matmul_flops_fp32_before": before.matmul_flops[DTYPE], "matmul_flops_fp32_after": after.matmul_flops[DTYPE],
        "ceiling_drift": after.copy_bandwidth / before.copy_bandwidth - 1, "wall_s": wall_s,
        "cpu_share": sum(s.cpu_seconds for s in steps) / sum(s.seconds for s in steps),
        "timestamp": datetime.datetime.now().isoformat(timespec="seconds")})
    for i, step in enumerate(steps):  # after the run, off its clock; a run cut short is dropped anyway
        contexts = step.decode_contexts
        append(steps_path(path), STEP_COLUMNS, {
            "run_id": spec.run_id, "step": i, "decoders": len(contexts),
            "decode_context_mean": float(np.mean(contexts)) if contexts else 0.0,
            "chunks": ";".join(f"{take}:{end}" for take, end in step.chunks), "seconds": step.seconds,
            "cpu_seconds": step.cpu_seconds})
    return True

