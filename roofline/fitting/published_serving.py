"""The aggregated rows of serving-hopper.csv (../shared/published/README.md) as deployments under a closed-loop load.

A row is one serving benchmark: `concurrency` requests in flight (closed loop), `isl` in, `osl` out, on one
worker of an H100 SXM or H200 SXM node; measured mean TTFT and TPOT. How a row maps onto a bundled model, its
formats and its layout (tensor parallel, or attention data parallel with expert parallel), and the reasons a row
is left out (model, device, format, layout, launch): roofline.fitting.serving_rows; a measurement the file holds
more than once is priced once (roofline.fitting.copies). Each is priced twice with one engine
profile; fp8 rows run W8A8 (the GEMMs at the fp8 peak: vLLM, SGLang and TensorRT-LLM
quantize activations to fp8 for fp8 checkpoints), the KV cache 16-bit (the rows do not say):
  before: today's offline estimates: TPOT the decode step of a batch of `concurrency` at the prompt's
          context, TTFT one request's prefill (as `plan` reports it);
  after:  the closed loop at that concurrency (roofline.serving.load) under the engine's default scheduler
          (its profile's `scheduler:`; the token budget and memory fraction its launch script set, where public:
          roofline.fitting.launches): TTFT the mean over a run of N requests (the client's, roofline.fitting.clients,
          else RUN_REQUESTS_PER_CLIENT x C), whose first C are sent together at t = 0 (roofline.serving.first_wave),
          the rest at the steady state's;
          TPOT the steady state's, (E2E - TTFT) / (osl - 1), the benchmarks' per-request mean. A launch whose
          client drew lengths at random (launches: `--random-range-ratio` 0.8) has its requests arrive at random
          (LoadModel's lengths_vary, roofline.serving.steady_loop), identical ones stagger or keep a cohort.
Rows whose benchmark timed TTFT from one completion ahead (serving_rows.COMPLETION_INTERVAL_SOURCES) are compared
with the predicted TTFT plus E2E / C, E2E = TTFT + (osl − 1) TPOT as predicted: the row's convention, not the engine's.
"""
from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..models.config import load_model
from ..deployment import Deployment
from ..engine import IDEAL
from ..engine import Engine
from ..hardware import load_hardware
from ..model import DECODE, PREFILL, Options, decode_context
from ..precision import Precision, as_served
from ..serving.batching import StepCost, Workload, engine_terms, simulate_continuous
from ..serving.load import LoadModel, Policy, kv_sequences
from .clients import run_requests
from .copies import copies
from .launches import Launch
from .serving_rows import REASONS, REQUIRED, read_row

# Requests a run per client, N / C, where a row's client is not known (roofline.fitting.clients gives N where its digits
# do). Assumed 10: genai-perf's published sweeps set --request-count to 10 x the concurrency, vLLM's serving recipes
# num_prompts to 5-10 x. The first wave of C requests, sent together at t = 0, is then a tenth of the run
# (roofline.serving.first_wave; validation/README.md weighs it).
RUN_REQUESTS_PER_CLIENT = 10


@dataclass(frozen=True)
class ServingRow:
    id: str
    backend: str
    model: str
    hardware: str
    weights: str  # the format of every weight but the routed experts (formats.weights)
    tp: int
    concurrency: int  # requests in flight over the worker (all its attention data-parallel ranks)
    prompt: int
    gen: int
    ttft_s: float
    tpot_s: float
    ep: int = 1  # attention data-parallel ranks, each with 1/ep of the routed experts (Deployment.ep)
    expert_tp: int | None = None  # GPUs splitting each routed expert (Deployment.expert_tp); None: all tp
    formats: Precision | None = None  # weights, routed experts and KV formats; None: Precision(weights=weights)
    # the benchmark's TTFT counts one completion interval E2E / C of the closed loop (serving_rows' docstring)
    ttft_includes_completion_interval: bool = False
    experts_read: str = "routed"  # the routed experts its decode reads (Options.experts_read; serving_rows' docstring)
    launch: Launch | None = None  # the public launch script's memory fraction (launches); None: the profile's
    token_budget: int | None = None  # the launch script's token budget at this row; None: the profile's
    batch_wait: tuple[int, float] = (0, 0.0)  # the launch's batch wait at this row (steps, ratio; launches); 0: none
    requests: int | None = None  # the run's requests where its client is known (clients); None: RUN_REQUESTS_PER_CLIENT C

    @property
    def precision(self) -> Precision:
        return Precision(weights=self.weights) if self.formats is None else self.formats


@dataclass(frozen=True)
class ServingRead:
    """The rows read, and the aggregated rows left out by reason (serving_rows.REASONS)."""
    rows: list
    left_out: dict


def read_serving_table(path: Path, read: Callable[[dict], dict | str] = read_row) -> ServingRead:
    """Every aggregated row the project can price, and the others counted by why not (`read`: how a row reads,
    serving_rows.read_row's Hopper rows unless told; transfer.read_blackwell_row the held-out generation's)."""
    rows, left_out = [], Counter({reason: 0 for reason in REASONS})
    with Path(path).open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [name for name in REQUIRED if name not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{str(path)!r}: no column {', '.join(missing)}; fix: pass serving-hopper.csv "
                             "(../shared/published/README.md names its columns)")
        read_rows = []  # (raw row, its fields or the reason it is left out)
        for raw in reader:
            if raw["mode"] != "agg":
                continue
            try:
                fields = read(raw)
            except ValueError as err:
                raise ValueError(f"{str(path)!r}: row {raw['id']!r}: {err}; fix: correct the row or drop it") from None
            if isinstance(fields, dict) and not _priceable(fields):
                fields = "layout"
            read_rows.append((raw, fields))
    # a measurement held twice is priced once; a copy of one left out by its launch is left out with it
    repeated = copies([raw for raw, fields in read_rows if isinstance(fields, dict) or fields == "launch"])
    for raw, fields in read_rows:
        if raw["id"] in repeated:
            fields = "copy"
        if isinstance(fields, str):
            left_out[fields] += 1
            continue
        rows.append(ServingRow(raw["id"], raw["backend"], **fields, requests=run_requests(raw)))
    return ServingRead(rows, dict(left_out))


def read_serving_rows(path: Path) -> tuple[list[ServingRow], int]:
    """(the rows read, the aggregated rows left out: model not bundled, layout or format not modelled)."""
    read = read_serving_table(path)
    return read.rows, sum(read.left_out.values())


def _priceable(fields: dict) -> bool:
    """Whether the pricer takes the split (tp dividing the heads, ep the experts): it names what does not."""
    try:
        Deployment(load_model(fields["model"]), load_hardware(fields["hardware"]), fields["formats"], engine=IDEAL,
                   tp=fields["tp"], ep=fields["ep"])
    except ValueError:
        return False
    return True


def _deployment(row: ServingRow, engine: Engine) -> Deployment:
    """The row's deployment under `engine`, with the memory fraction its launch script set (launches)."""
    if row.launch is not None:
        engine = row.launch.engine(engine)
    hardware = load_hardware(row.hardware)
    precision = as_served(row.precision, hardware.peak_flops)  # fp8 W8A8; int4, and nvfp4 on Hopper, weight-only
    return Deployment(load_model(row.model), hardware, precision,
                      Options(experts_read=row.experts_read), tp=row.tp, ep=row.ep, expert_tp=row.expert_tp,
                      engine=engine)


def _policy(row: ServingRow, d: Deployment, engine: Engine) -> Policy | None:
    """The scheduler `row` ran under (`d` its deployment): the profile's, with its launch's token budget, streaming and
    batch wait where set; None where the KV pool holds no sequence of the row's lengths."""
    budget = engine.scheduler.token_budget if row.token_budget is None else row.token_budget
    # a step carries no more decode tokens than its budget: a launch's small budget caps the running batch too
    running = min(engine.scheduler.max_sequences, budget - 1)
    pool = kv_sequences(d, row.prompt, row.gen, token_budget=budget)
    if pool < 1:
        return None
    launch = row.launch
    # the front end's load as launched: a chunk every stream_interval tokens, shared by its post-processing workers
    streaming = {} if launch is None else {"stream_interval": launch.stream_interval,
                                           "postprocess_workers": launch.postprocess_workers}
    # prompts held to run together where the launch set a batch wait (roofline.serving.batch_wait)
    return Policy(budget, running, pool, **streaming, batch_wait_steps=row.batch_wait[0],
                  batch_wait_ratio=row.batch_wait[1])


def predict(rows: list[ServingRow], engine: Engine) -> dict[str, np.ndarray]:
    """Per row: before (offline) and after (under load) TTFT and TPOT, seconds; NaN where not priced."""
    out = {k: np.full(len(rows), np.nan) for k in ("ttft_before", "tpot_before", "ttft_after", "tpot_after")}
    groups: dict = {}
    for i, row in enumerate(rows):
        # one load model a deployment, workload and token budget (a launch's may vary with the concurrency)
        budget = engine.scheduler.token_budget if row.token_budget is None else row.token_budget
        groups.setdefault((row.model, row.hardware, row.precision, row.tp, row.ep, row.expert_tp, row.experts_read,
                           row.launch, row.batch_wait, budget, row.prompt, row.gen), []).append(i)
    for (*_, prompt, gen), members in groups.items():
        d = _deployment(rows[members[0]], engine)
        concurrency = np.array([rows[i].concurrency for i in members], dtype=float)
        decode = d.step(DECODE, concurrency, float(decode_context(prompt)))
        out["tpot_before"][members] = np.broadcast_to(decode.total_s, concurrency.shape)
        out["ttft_before"][members] = float(d.step(PREFILL, 1.0, float(prompt)).total_s) + d.request_s
        policy = _policy(rows[members[0]], d, engine)
        if policy is None:
            continue
        launch = rows[members[0]].launch
        # a launch's client drawing output lengths at random: its closed loop's requests arrive at random (steady_loop)
        requests = np.array([rows[i].requests or RUN_REQUESTS_PER_CLIENT * rows[i].concurrency for i in members],
                            dtype=float)
        load = LoadModel(d, prompt, gen, policy, launch is not None and launch.lengths_vary).at_concurrency(
            concurrency, requests)
        out["ttft_after"][members], out["tpot_after"][members] = load["ttft_s"], load["tpot_s"]
    for when in ("before", "after"):
        out[f"ttft_{when}"] = as_timed(rows, out[f"ttft_{when}"], out[f"tpot_{when}"])
    return out


def client_lengths(row: ServingRow, requests: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(prompts, outputs) of a run of `requests`: every one the row's lengths, or, where its launch's client drew
    them at random, each uniform in [⌊r L⌋, L] about the row's mean (Launch.mean_length)."""
    launch = row.launch
    if launch is None or not launch.lengths_vary:
        return np.full(requests, row.prompt), np.full(requests, row.gen)

    def drawn(mean: int) -> np.ndarray:
        stated = next(n for n in range(mean, 2 * mean + 2) if launch.mean_length(n) >= mean)
        return rng.integers(math.floor(launch.length_ratio * stated), stated + 1, requests)
    return drawn(row.prompt), drawn(row.gen)


def simulate(rows: list[ServingRow], engine: Engine, seed: int = 0) -> dict[str, np.ndarray]:
    """Per row: the mean TTFT and TPOT (seconds) of its run in the simulator (roofline.serving.batching), which steps
    the scheduler `predict`'s load model prices request by request: the same deployment, policy, run length and first
    wave, the lengths its client drew; NaN where not priced. A check on the load model's closed forms, not a fit's path
    (seconds a row; validation/closed_loop_sim.py)."""
    out = {k: np.full(len(rows), np.nan) for k in ("ttft_after", "tpot_after")}
    rng = np.random.default_rng(seed)
    for i, row in enumerate(rows):
        d = _deployment(row, engine)
        policy = _policy(row, d, engine)
        if policy is None:
            continue
        requests = int(row.requests or RUN_REQUESTS_PER_CLIENT * row.concurrency)
        prompts, outputs = client_lengths(row, requests, rng)
        terms = engine_terms(d)
        front_end = replace(terms["front_end"], stream_interval=policy.stream_interval,
                            postprocess_workers=policy.postprocess_workers)
        # the pool reserves a sequence's prompt and output at admission (its sequences at the row's lengths)
        run = simulate_continuous(Workload(np.zeros(requests), prompts, outputs), StepCost(d), policy.max_batch,
                                  capacity_tokens=policy.kv_sequences * (row.prompt + row.gen),
                                  chunk_tokens=policy.token_budget, clients=row.concurrency,
                                  request_overhead_s=terms["request_overhead_s"], front_end=front_end,
                                  overlap_steps=terms["overlap_steps"], mixed=terms["mixed"], ranks=terms["ranks"],
                                  balance_steps=terms["balance_steps"], batch_wait_steps=policy.batch_wait_steps,
                                  batch_wait_ratio=policy.batch_wait_ratio)
        out["ttft_after"][i], out["tpot_after"][i] = np.mean(run.ttft_s), np.nanmean(run.tpot_s)
    out["ttft_after"] = as_timed(rows, out["ttft_after"], out["tpot_after"])
    return out


def row_table(rows: list[ServingRow], predicted: dict) -> list[dict]:
    """Per row (predict's order): what it ran, TTFT and TPOT measured and predicted before and after (ms), and
    predicted after / measured − 1; None where a row is not priced (its KV pool holds no sequence)."""
    def ms(x: float):
        return None if not np.isfinite(x) else round(1e3 * float(x), 4)

    def error(p: float, m: float):
        return None if not np.isfinite(p) else round(float(p) / m - 1, 4)

    table = []
    for i, r in enumerate(rows):
        table.append({"id": r.id, "backend": r.backend, "model": r.model, "hardware": r.hardware,
                      "weights": r.precision.weights, "experts": r.precision.experts or r.precision.weights,
                      "kv": r.precision.kv,
                      "tp": r.tp, "ep": r.ep, "concurrency": r.concurrency, "isl": r.prompt, "osl": r.gen,
                      "ttft_ms": ms(r.ttft_s), "ttft_before_ms": ms(predicted["ttft_before"][i]),
                      "ttft_after_ms": ms(predicted["ttft_after"][i]),
                      "ttft_error": error(predicted["ttft_after"][i], r.ttft_s),
                      "tpot_ms": ms(r.tpot_s), "tpot_before_ms": ms(predicted["tpot_before"][i]),
                      "tpot_after_ms": ms(predicted["tpot_after"][i]),
                      "tpot_error": error(predicted["tpot_after"][i], r.tpot_s)})
    return table


def as_timed(rows: list[ServingRow], ttft: np.ndarray, tpot: np.ndarray) -> np.ndarray:
    """The server's TTFT as each row's benchmark timed it: plus one completion interval E2E / C where the row's
    client issued its requests one completion ahead (ServingRow.ttft_includes_completion_interval)."""
    marked = np.array([r.ttft_includes_completion_interval for r in rows], dtype=bool)
    gen = np.array([r.gen for r in rows], dtype=float)
    concurrency = np.array([r.concurrency for r in rows], dtype=float)
    return np.where(marked, ttft + (ttft + (gen - 1) * tpot) / concurrency, ttft)


def scores(rows: list[ServingRow], predicted: dict, by: str = "backend") -> dict:
    """Median and p90 of |predicted / measured − 1| per backend (or per another ServingRow field, `by`: "model")
    and metric, before and after."""
    backends = sorted({getattr(r, by) for r in rows}) + ["all"]
    measured = {"ttft": np.array([r.ttft_s for r in rows]), "tpot": np.array([r.tpot_s for r in rows])}
    report = {}
    for backend in backends:
        chosen = np.array([backend in ("all", getattr(r, by)) for r in rows], dtype=bool)  # bool when empty too
        report[backend] = {}
        for metric in ("ttft", "tpot"):
            for when in ("before", "after"):
                error = np.abs(predicted[f"{metric}_{when}"][chosen] / measured[metric][chosen] - 1)
                error = error[np.isfinite(error)]
                report[backend][f"{metric}_{when}"] = {
                    "n": int(error.size), "median": float(np.median(error)) if error.size else None,
                    "p90": float(np.percentile(error, 90)) if error.size else None}
    return report
