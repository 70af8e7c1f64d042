"""Static and continuous batching, simulated request by request with the roofline's step cost.

An iteration is priced as selective batching runs it (Orca, Yu et al. OSDI 2022): every op that does
not read the cache (projections, MLP, norms, head) runs once over the flattened tokens of all
sequences; attention runs per sequence group (decoders at their contexts, each prefill chunk at its
own). Each op is priced by the Deployment's step (the engine's roofs, corner, collectives and per-iteration
overheads included; collectives and overheads go with the flattened ops).
  static:     a batch of up to `max_batch` waiting requests, prompts padded to the longest, decoded
              until its longest output ends; every request returns when its batch does.
  continuous: iteration-level scheduling: requests join after any step and leave when done, FCFS,
              limited by `max_batch` and by KV memory (reserved at admission: prompt + output rounded
              up to blocks of `block_size`, or the workload's longest sequence when contiguous; or taken on
              demand, as the engine's admission rule says, roofline.kv_memory);
              optional chunked prefill caps the tokens of one iteration (mixed: the decoders' tokens and the
              chunks share it, as vLLM and TensorRT-LLM run; or prefill first, as SGLang runs by default: a step
              with prompts waiting carries prompt tokens alone, up to the chunk, and the decoders pause for it,
              roofline.scheduler); an engine that batches `overlap_steps` steps ahead (TensorRT-LLM's overlap
              scheduler: 1) admits into a step only the requests there when the step that many before it started.
              Closed loop (`clients`): the first
              `clients` requests arrive together and each later one when a request completes (a serving
              benchmark's fixed concurrency; work.arrivals is then ignored).
Left out: swapping (preemption recomputes, on_demand below), sampling time.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..deployment import Deployment
from ..kv_memory import ON_DEMAND
from ..scheduler import MIXED
from ..sharding import whole
from .attention_dp import BalanceGate, chunk_share
from .batch_wait import BatchWaitGate
from .front_end import FrontEnd, SharedFrontEnd
from .mixed_step import attention_seconds, dense_seconds, rank_excess_per_token, rank_excess_seconds

STATIC, CONTINUOUS = "static", "continuous"
POLICIES = (STATIC, CONTINUOUS)
OVERLOAD_SHARE = 0.9  # served below this share of the offered tokens/s: overloaded
MAX_REQUESTS = 100_000  # one request costs ~0.5-2 ms of simulation; percentiles settle long before this
CONTEXT_BUCKET = 16  # decode attention is priced at the group's mean context, rounded to this many tokens


@dataclass(frozen=True)
class Workload:
    arrivals: np.ndarray  # seconds, non-decreasing
    prompts: np.ndarray  # tokens per request
    outputs: np.ndarray  # generated tokens per request (>= 1)


def poisson_arrivals(rng: np.random.Generator, rate: float, requests: int) -> np.ndarray:
    """Seconds at which `requests` arrive as a Poisson process of `rate` requests/s (exponential gaps from 0)."""
    return np.cumsum(rng.exponential(1 / rate, requests))


def poisson_workload(requests: int, rate: float, prompt_mean: float = 512, output_mean: float = 128,
                     seed: int = 0) -> Workload:
    """Poisson arrivals at `rate` requests/s; prompt and output lengths geometric with the given means."""
    if not rate > 0:
        raise ValueError(f"rate: must be > 0 requests/s, got {rate!r}")
    whole("requests", requests)
    if requests > MAX_REQUESTS:
        raise ValueError(f"requests: at most {MAX_REQUESTS} (the simulation keeps every request and costs ~1 ms "
                         f"each), got {requests}; fix: simulate fewer requests: the percentiles settle within a few "
                         f"thousand")
    for name, mean in (("prompt_mean", prompt_mean), ("output_mean", output_mean)):
        if not mean >= 1:
            raise ValueError(f"{name}: must be >= 1 token, got {mean!r}")
    rng = np.random.default_rng(seed)
    arrivals = poisson_arrivals(rng, rate, requests)
    return Workload(arrivals, rng.geometric(1 / prompt_mean, requests), rng.geometric(1 / output_mean, requests))


class StepCost:
    """Seconds of one iteration: the mixed step (roofline.serving.mixed_step), cached by token counts and
    context buckets."""

    def __init__(self, deployment: Deployment):
        self.deployment = deployment
        self.cache: dict = {}

    def dense(self, sequences: int, tokens: int) -> float:
        """Ops that do not read the cache, over `tokens` flattened tokens from `sequences` sequences."""
        key = ("dense", sequences, tokens)
        if key not in self.cache:
            self.cache[key] = float(np.ravel(dense_seconds(self.deployment, float(sequences), float(tokens)))[0])
        return self.cache[key]

    def attention(self, sequences: int, queries: int, context: float) -> float:
        """Cache-reading ops for `sequences` sequences of `queries` new tokens ending at `context` keys."""
        if queries == 1:
            context = max(round(context / CONTEXT_BUCKET) * CONTEXT_BUCKET, 1)
        key = ("attention", sequences, queries, context)
        if key not in self.cache:
            self.cache[key] = float(np.ravel(attention_seconds(self.deployment, float(sequences), float(queries),
                                                               float(context)))[0])
        return self.cache[key]

    def iteration(self, decode_contexts, prefills=()) -> float:
        """decode_contexts: keys of each decoding sequence; prefills: (new tokens, context end) per chunk."""
        decoding = len(decode_contexts)
        sequences = decoding + len(prefills)
        tokens = decoding + sum(chunk for chunk, _ in prefills)
        seconds = self.dense(sequences, tokens)
        if decoding:
            seconds += self.attention(decoding, 1, float(np.mean(decode_contexts)))
        if prefills:
            chunk = max(size for size, _ in prefills)
            seconds += float(rank_excess_seconds(self.rank_excess_per_token(chunk), self.deployment.ep,
                                                 sum(size for size, _ in prefills), len(prefills)))
        return seconds + chunk_share(self.deployment) * sum(self.attention(1, chunk, end) for chunk, end in prefills)

    def rank_excess_per_token(self, chunk: int) -> float:
        """A prefill token's work on its own expert-parallel rank (mixed_step.rank_excess_per_token; 0 without ep)."""
        key = ("excess", chunk)
        if key not in self.cache:
            self.cache[key] = rank_excess_per_token(self.deployment, chunk)
        return self.cache[key]


@dataclass
class Result:
    policy: str
    ttft_s: np.ndarray  # per request: arrival to first token
    e2e_s: np.ndarray  # per request: arrival to its last token being returned
    tpot_s: np.ndarray  # per request: (e2e − ttft) / (output − 1); NaN for one-token outputs
    output_tokens: int
    makespan_s: float  # first arrival to last completion
    trace_s: np.ndarray  # iteration end times
    trace_batch: np.ndarray  # sequences in each iteration
    padded_fraction: float = 0.0  # static: token slots spent on padding (prompt and decode)
    notes: list = field(default_factory=list)
    offered_tokens_per_s: float = float("nan")  # output tokens asked for / the span of the arrivals

    @property
    def throughput_tokens_per_s(self) -> float:
        return self.output_tokens / self.makespan_s

    @property
    def overloaded(self) -> bool:
        """Arrivals outpace service: the server returned < 90% of the tokens/s offered, so queues (and TTFT) grow
        with the number of requests instead of settling."""
        return bool(self.throughput_tokens_per_s < OVERLOAD_SHARE * self.offered_tokens_per_s)

    def summary(self) -> dict:
        out = {"throughput_tokens_per_s": self.throughput_tokens_per_s, "max_concurrency": int(self.trace_batch.max()),
               "offered_tokens_per_s": self.offered_tokens_per_s, "overloaded": self.overloaded}
        for name, values in (("ttft", self.ttft_s), ("tpot", self.tpot_s), ("e2e", self.e2e_s)):
            for q in (50, 90, 99):
                finite = values[np.isfinite(values)]
                out[f"{name}_p{q}_s"] = float(np.percentile(finite, q)) if finite.size else float("nan")
        out["padded_fraction"] = self.padded_fraction
        return out


def _finish(policy, work, first, done, trace_s, trace_batch, padded=0.0) -> Result:
    ttft, e2e = first - work.arrivals, done - work.arrivals
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(work.outputs > 1, (e2e - ttft) / (work.outputs - 1), np.nan)
    with np.errstate(over="ignore", divide="ignore"):  # arrivals all at t ~ 0: an infinite offered rate
        offered = float(np.float64(work.outputs.sum()) / np.float64(work.arrivals.max()))
    return Result(policy, ttft, e2e, tpot, int(work.outputs.sum()), float(done.max() - work.arrivals.min()),
                  np.array(trace_s), np.array(trace_batch), padded, offered_tokens_per_s=offered)


def simulate_static(work: Workload, cost: StepCost, max_batch: int, capacity_tokens: float = np.inf,
                    progress=None, state_tokens: float = 0.0, token_units: float = 1.0) -> Result:
    """Batches formed when the server frees up: padded prefill, then decode until the longest output.

    The budget is in units (a KV token's bytes): a token costs token_units, a sequence's constant state
    (SSM / linear-attention layers) state_tokens (a model without attention: 0 and 1)."""
    n = len(work.arrivals)
    first, done = np.zeros(n), np.zeros(n)
    trace_s, trace_batch, padding, slots = [], [], 0, 0
    now, i = 0.0, 0
    while i < n:
        now = max(now, work.arrivals[i])
        members = [i]
        while (i + len(members) < n and len(members) < max_batch and work.arrivals[i + len(members)] <= now
               and (len(members) + 1) * (token_units * (work.prompts[i:i + len(members) + 1].max()
                                                        + work.outputs[i:i + len(members) + 1].max()) + state_tokens)
               <= capacity_tokens):
            members.append(i + len(members))
        k, p, g = len(members), int(work.prompts[members].max()), int(work.outputs[members].max())
        now += cost.iteration((), [(p, p)] * k)
        first[members] = now
        trace_s.append(now), trace_batch.append(k)
        for j in range(1, g):
            now += cost.iteration([p + j] * k)
            trace_s.append(now), trace_batch.append(k)
        done[members] = now
        padding += int((p - work.prompts[members]).sum() + (g - work.outputs[members]).sum())
        slots += k * (p + g)
        i += k
        if progress is not None:
            progress(i, n)
    return _finish(STATIC, work, first, done, trace_s, trace_batch, padding / slots)


def simulate_continuous(work: Workload, cost: StepCost, max_batch: int, capacity_tokens: float = np.inf,
                        block_size: int | None = None, chunk_tokens: int | None = None, progress=None,
                        state_tokens: float = 0.0, token_units: float = 1.0, *, on_demand: bool = False,
                        request_overhead_s: float = 0.0, front_end: FrontEnd = FrontEnd(), prompts_cached: bool = False,
                        clients: int | None = None, overlap_steps: int = 0, mixed: bool = True, ranks: int = 1,
                        balance_steps: int = 0, batch_wait_steps: int = 0, batch_wait_ratio: float = 0.0) -> Result:
    """Iteration-level scheduling with FCFS admission under a batch cap and a KV-token budget (units as in
    simulate_static: a sequence reserves its tokens x token_units plus its state's state_tokens).

    on_demand (with block_size): blocks are taken as a sequence's tokens land, as vLLM's paged KV does: a
    request is admitted when its prompt's blocks are free; when a decoder needs a block and none is free,
    the newest running request is preempted (its blocks freed; readmitted first, it prefills its prompt
    and tokens so far again: vLLM's recompute). Otherwise a request reserves prompt + output at admission.
    request_overhead_s: the engine's per-request cost (tokenizing, scheduling), paid before the scheduler
    sees the request. front_end: the server's front end (roofline.serving.front_end), one process shared by every
    request's submission and every stream's chunks (SharedFrontEnd): a request reaches the scheduler through it, and its
    tokens reach its client through it (TTFT and E2E are the client's). prompts_cached: a disaggregated decode
    worker's requests, whose prompt's KV and first token arrive from a prefill worker: each decodes from admission (its
    TTFT 0, its TPOT from its arrival here).
    clients: a closed loop of that many requests in flight (the module docstring). overlap_steps: steps whose batch
    the engine forms while earlier ones run (roofline.scheduler); an idle engine batches at once. mixed=False: prefill
    first (SGLang's default, roofline.scheduler.PREFILL_FIRST): a step with prompt tokens to run carries them alone, up
    to chunk_tokens, and the running decoders wait for the next step without prompts. ranks, balance_steps: attention
    data-parallel ranks whose engine holds prompts until every rank has one, at most balance_steps steps
    (roofline.serving.attention_dp.BalanceGate; 0: run as they come). batch_wait_steps, batch_wait_ratio: a launch
    holding prompts at most that many steps, or until their tokens and the decoders' reach that share of chunk_tokens,
    to run them together (TensorRT-LLM's batch wait; roofline.serving.batch_wait.BatchWaitGate; 0: off)."""
    n = len(work.arrivals)
    if clients is not None:
        whole("clients", clients)
        # the first `clients` arrive at 0, each later one when a request completes (set as they do)
        work = Workload(np.where(np.arange(n) < clients, 0.0, np.inf), work.prompts, work.outputs)
    need = work.prompts + work.outputs
    if on_demand and block_size is None:
        raise ValueError("on_demand: blocks taken on demand need a block_size; fix: block_size=16 (vLLM's)")
    blocks = (lambda tokens: -(-tokens // block_size) * block_size) if block_size else None  # noqa: E731
    reserve = (np.full(n, need.max()) if block_size is None else blocks(need)).astype(float)
    reserve = reserve * token_units + state_tokens
    if reserve.max() > capacity_tokens:
        raise ValueError(f"memory: a request needs {int(reserve.max())} KV tokens; only {int(capacity_tokens)} fit")
    ready = work.arrivals + request_overhead_s  # when the scheduler sees each request
    shared = None if front_end.idle else _shared_front_end(front_end, work, ready, request_overhead_s, clients)
    first, done = (shared.first, shared.done) if shared else (np.zeros(n), np.zeros(n))
    prefilled, generated = np.zeros(n, dtype=int), np.zeros(n, dtype=int)
    target = work.prompts.astype(int).copy()  # tokens to prefill: the prompt, or prompt + tokens after a preemption
    if prompts_cached:
        if on_demand:
            raise ValueError("prompts_cached: a cached prompt's blocks are reserved whole; fix: on_demand=False")
        prefilled[:], generated[:], first[:] = target, 1, work.arrivals
    held, in_use = np.zeros(n), 0.0  # units each request holds in the pool, and their sum
    waiting, running = deque(), []
    trace_s, trace_batch = [], []
    now, arrived, completed, preemptions = 0.0, 0, 0, 0
    issued = n if clients is None or shared else min(clients, n)  # closed loop: requests sent so far (or the front end's)
    whole("overlap_steps", overlap_steps, low=0)
    starts = deque([0.0] * overlap_steps, maxlen=overlap_steps + 1)  # the latest steps' start times, oldest first
    gate = BalanceGate(ranks, balance_steps)
    batch_gate = BatchWaitGate(batch_wait_steps, batch_wait_ratio, math.inf if chunk_tokens is None else chunk_tokens, ranks)
    while arrived < n or waiting or running:
        if shared:  # the front end's events up to now: submissions handed to the scheduler, tokens delivered
            shared.advance(now)
        if not waiting and not running:
            if shared and not np.isfinite(ready[arrived]):  # idle until the front end hands over the next request
                shared.advance(math.inf, stop=lambda r=arrived: np.isfinite(ready[r]))
            now = max(now, ready[arrived])
            starts.extend([now] * overlap_steps)  # idle: the engine waits for a request and batches it at once
        starts.append(now)
        while arrived < n and ready[arrived] <= starts[0]:  # batched when the step overlap_steps back started
            waiting.append(arrived)
            arrived += 1
        while waiting and len(running) < max_batch:
            r = waiting[0]
            cost_units = blocks(target[r]) * token_units + state_tokens if on_demand else reserve[r]
            if in_use + cost_units > capacity_tokens:
                break
            held[r] = cost_units
            in_use += cost_units
            gate.place(r, running)
            running.append(waiting.popleft())
        decoders = [r for r in running if prefilled[r] == target[r]]
        if not mixed and len(decoders) < len(running):  # prompts to run: a prefill step, the decoders paused
            decoders = []
        if on_demand:  # each decoder's next token may need a fresh block; the newest give theirs up
            while True:
                grow = {r: blocks(work.prompts[r] + generated[r]) * token_units + state_tokens - held[r]
                        for r in decoders}
                if in_use + sum(grow.values()) <= capacity_tokens or len(running) == 1:
                    break
                victim = running.pop()
                in_use -= held[victim]
                held[victim], prefilled[victim] = 0.0, 0
                target[victim] = work.prompts[victim] + generated[victim]
                waiting.appendleft(victim)
                preemptions += 1
                decoders = [r for r in decoders if r != victim]
            for r, extra in grow.items():
                held[r] += extra
                in_use += extra
        budget = np.inf if chunk_tokens is None else max(chunk_tokens - len(decoders), 0)  # (none when not mixed)
        prompting = [r for r in running if prefilled[r] < target[r]]
        if not gate.releases(prompting, decoders):
            budget = 0  # held for every attention data-parallel rank to hold a prompt
        elif not batch_gate.releases([int(target[r]) for r in prompting], len(decoders)):
            budget = 0  # held for more prompts to run beside them
        chunks = []
        for r in running:
            if prefilled[r] < target[r] and budget > 0:
                take = int(min(target[r] - prefilled[r], budget))
                chunks.append((r, take))
                budget -= take
        now += cost.iteration([work.prompts[r] + generated[r] for r in decoders],
                              [(take, prefilled[r] + take) for r, take in chunks])
        trace_s.append(now), trace_batch.append(len(decoders) + len(chunks))
        if shared:
            shared.advance(now)
        for r in decoders:
            generated[r] += 1
            if shared:
                shared.emit(r, int(generated[r]), int(work.outputs[r]))
        for r, take in chunks:
            prefilled[r] += take
            if prefilled[r] == target[r]:  # the prefill's last chunk yields the next token
                generated[r] += 1
                if shared:
                    shared.emit(r, int(generated[r]), int(work.outputs[r]))
                elif generated[r] == 1:
                    first[r] = now
        finished = [r for r in decoders + [r for r, _ in chunks] if generated[r] >= work.outputs[r]]
        for r in finished:
            if not shared:  # (else when the front end delivers its last token)
                done[r] = now
            in_use -= held[r]
            held[r] = 0.0
            running.remove(r)
            if clients is not None and issued < n:  # the client whose request ended sends the next
                work.arrivals[issued], ready[issued] = now, now + request_overhead_s
                issued += 1
        if finished and progress is not None:
            completed += len(finished)
            progress(completed, n)
    if shared:
        shared.advance(math.inf)  # the tokens still in the front end reach their clients
    result = _finish(CONTINUOUS, work, first, done, trace_s, trace_batch)
    if preemptions:
        result.notes.append(f"{preemptions} preemptions: the KV pool ran out of blocks and the newest requests "
                            "were prefilled again")
    return result


def _shared_front_end(front_end: FrontEnd, work: Workload, ready: np.ndarray, request_overhead_s: float,
                      clients: int | None) -> SharedFrontEnd:
    """simulate_continuous's front end: requests pass it to reach the scheduler (`ready`: its submission's end, then
    the request's own cost), tokens to reach their client (`first`, `done`); a closed loop's client sends its next
    request when its last token arrives."""
    n = len(work.arrivals)
    ready[:] = np.inf
    sent = [n if clients is None else min(clients, n)]

    def submitted(r, t):
        ready[r] = t + request_overhead_s

    def delivered(r, token, t):
        if shared.first[r] == 0:
            shared.first[r] = t
        if token >= work.outputs[r]:
            shared.done[r] = t
            if clients is not None and sent[0] < n:  # the client whose request ended sends the next
                work.arrivals[sent[0]] = t
                shared.arrive(sent[0], t)
                sent[0] += 1

    shared = SharedFrontEnd(front_end, submitted, delivered)
    shared.first, shared.done = np.zeros(n), np.zeros(n)
    for r in range(sent[0]):
        shared.arrive(r, work.arrivals[r])
    return shared


def engine_terms(d: Deployment) -> dict:
    """What the engine's profile tells simulate_continuous: its per-request cost, the steps its scheduler batches
    ahead, whether its steps mix prompts with decode tokens, how it balances prompts over attention data-parallel
    ranks (roofline.scheduler), and whether it takes KV blocks on demand (roofline.kv_memory's admission rule). Every
    caller that simulates a Deployment's engine takes them from here, and so does the load model (roofline.serving.load)."""
    scheduler = d.engine.scheduler
    return {"request_overhead_s": d.request_s, "front_end": FrontEnd.of(d.engine),
            "overlap_steps": scheduler.overlap_steps,
            "mixed": scheduler.step_policy == MIXED, "ranks": d.ep,
            "balance_steps": scheduler.attention_dp_balance_steps, "on_demand": d.engine.memory.admission == ON_DEMAND}


def simulate(d: Deployment, work: Workload, policy: str = CONTINUOUS, max_batch: int = 256,
             block_size: int | None = 16, chunk_tokens: int | None = None, progress=None) -> Result:
    """Serve `work` on one replica of the Deployment; KV memory is what the weights leave free; the engine's
    request cost, scheduler lookahead and step policy as its profile states them (engine_terms).

    progress(done, total), if given, is called as requests complete (the CLI draws a bar from it).
    """
    if policy not in POLICIES:
        raise ValueError(f"policy: unknown policy {policy!r}; use '{STATIC}' or '{CONTINUOUS}'")
    if block_size is not None and block_size < 1:
        raise ValueError(f"block_size: must be >= 1 token, got {block_size!r}")
    if max_batch < 1:
        raise ValueError(f"max_batch: must be >= 1, got {max_batch!r}")
    cm = d.compiled  # one GPU's shard: its weights, its share of every sequence's cache
    free = float(d.engine.memory.kv_room(d.hardware.capacity_bytes, d.weight_bytes))  # roofline.kv_memory
    if free <= 0:
        raise ValueError(f"memory: the weights of {d.config.name!r} do not fit in {d.hardware.id!r}")
    per_token, state = cm.kv_per_token(d.precision.kv_bytes), cm.state_bytes(d.precision.kv_bytes)
    # The budget counts KV tokens; a constant state is held once per sequence, as its token equivalent
    # (a model without attention counts states alone: one unit a sequence, no bytes per token).
    unit = per_token if per_token > 0 else state
    capacity, state_units, token_units = np.floor(free / unit), state / unit, per_token / unit
    cost = StepCost(d)
    if policy == STATIC:
        return simulate_static(work, cost, max_batch, capacity, progress, state_units, token_units)
    return simulate_continuous(work, cost, max_batch, capacity, block_size, chunk_tokens, progress, state_units,
                               token_units, **engine_terms(d))
