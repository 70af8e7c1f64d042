"""Steady state of a continuous-batching server at an offered load: open-loop rate λ or closed-loop concurrency C.

How the engine fills a step is a step model, chosen once from the policy (Policy.step_policy; None, the default, is
the engine's, roofline.serving.batching.engine_terms): mixed (vLLM, TensorRT-LLM: the decoders' tokens and prefill
chunks share the token budget Tb in one step; roofline.serving.mixed_policy) or prefill first (SGLang's default:
prompts in steps of their own, the decoders paused for them; roofline.serving.prefill_first). Each gives the steps
at a rate when the mean step is τ̄ (the fixed point's map, solved here for τ̄ by bisection), a prompt's own prefill
and its wait for the budget, the budget's saturating rate in closed form, and the closed loop. The rest is shared:
  TTFT = residual of the step in progress E[τ²] / 2τ̄ (open loop) + waiting for the budget + the prompt's own
         prefill + the engine's per-request cost + s τ̄ under an engine that schedules s steps ahead (roofline.scheduler
         overlap_steps; TensorRT-LLM's overlap scheduler, s = 1: the step after the one in progress was batched before
         the request arrived) + the wait for every attention data-parallel rank to hold a prompt, where the engine
         balances them (roofline.serving.attention_dp) + the steps a launch holds prompts to run more of them
         together (TensorRT-LLM's batch wait, Policy.batch_wait_steps; roofline.serving.batch_wait)
  E2E = TTFT + (G − 1) TPOT;  in flight = λ E2E (Little);  goodput = λ G output tokens/s.
Saturation: the budget full (the step model's closed form), the running batch at max_batch, or the KV pool unable to
hold λ·E2E sequences, whichever binds first (found numerically).
Left out: preemption (the simulator has it), sampling, prefix caching, spread prompt and output lengths
(the means are used; that outputs vary sets how a closed loop's requests arrive, LoadModel's lengths_vary), the spread of
the decoders' contexts (priced at the mean, P + G / 2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from ..deployment import Deployment
from ..memory import workspace
from ..scheduler import MIXED, PREFILL_FIRST, STEP_POLICIES
from ..sharding import whole
from .attention_dp import balance_wait_seconds, balances, chunk_share
from .batch_wait import batch_wait, check_batch_wait
from .batching import engine_terms
from .mixed_policy import MixedSteps
from .mixed_step import StepTable, prefill_attention_seconds, rank_excess_per_token, rank_excess_seconds
from .prefill_first import PrefillFirstSteps

BISECTIONS = 32  # halvings of log τ̄: 2^-32 of the bracket, ~1e-9 of τ̄, far below the fits' 1e-3 difference step
SATURATION_ROUNDS, SATURATION_POINTS = 4, 32  # the saturating rate: 32 candidates a round, 4 rounds
STEP_MODELS = {MIXED: MixedSteps, PREFILL_FIRST: PrefillFirstSteps}  # roofline.scheduler's step policies


class StepModel(Protocol):
    """What a step policy tells the load model (MixedSteps, PrefillFirstSteps), `s` the steps at the solved mean step."""
    carrying_step: str  # the step that carries prompt tokens, as `steps` names it
    largest_step_tokens: int  # the step table's reach
    budget_tokens_per_request: int  # a request's tokens through the budget: the largest mean step a rate allows

    def mean_step(self, rate, tau) -> np.ndarray: ...  # the fixed point's map alone
    def steps(self, rate, tau) -> dict: ...  # the map and what a running request sees
    def own_prefill(self, rate, s: dict) -> np.ndarray: ...  # seconds of a prompt's own prefill steps
    def budget_wait(self, rate, s: dict) -> np.ndarray: ...  # seconds it waits for the budget
    def terms(self, rate: np.ndarray, tau: np.ndarray, s: dict) -> dict: ...  # `--explain`'s named terms
    def budget_saturation(self) -> float: ...  # requests/s with every step full, closed form
    def closed_loop(self, concurrency: np.ndarray, requests=None) -> dict: ...  # LoadModel.at_concurrency's figures


@dataclass(frozen=True)
class Policy:
    """The scheduler's limits: prefill+decode tokens a step, running sequences, and the KV pool in sequences; how it
    fills a step, the engine's unless named (`for_engine`)."""
    token_budget: int = 8192  # vLLM's max_num_batched_tokens with chunked prefill; TensorRT-LLM max_num_tokens
    max_batch: int = 256  # vLLM max_num_seqs; TensorRT-LLM max_batch_size
    kv_sequences: float = math.inf  # sequences the KV pool holds (kv_sequences: at P + G, or P + G / 2 on demand)
    step_policy: str | None = None  # None: the engine's; or MIXED, or PREFILL_FIRST (SGLang's), roofline.scheduler
    stream_interval: int = 1  # output tokens a streamed chunk (TensorRT-LLM's stream_interval; its default 1)
    postprocess_workers: int = 0  # processes sharing the chunks' work (TensorRT-LLM's num_postprocess_workers)
    batch_wait_steps: int = 0  # steps prompts are held at most to run together (TensorRT-LLM batch_wait_timeout_iters)
    batch_wait_ratio: float = 0.0  # ... or until their tokens reach this share of the budget (batch_wait_max_tokens_ratio)

    def __post_init__(self):
        whole("token_budget", self.token_budget, low=2, note=" tokens")
        whole("max_batch", self.max_batch)
        whole("stream_interval", self.stream_interval, note=" tokens a streamed chunk (TensorRT-LLM's default: 1)")
        whole("postprocess_workers", self.postprocess_workers, low=0, note=" processes (TensorRT-LLM's default: 0)")
        check_batch_wait(self.batch_wait_steps, self.batch_wait_ratio)
        if self.step_policy is not None and self.step_policy not in STEP_POLICIES:
            raise ValueError(f"step_policy: unknown policy {self.step_policy!r}; fix: one of {', '.join(STEP_POLICIES)}")
        if self.token_budget <= self.max_batch and self.step_policy == MIXED:
            raise ValueError(f"token_budget: {self.token_budget} tokens cannot carry one decode batch of max_batch "
                             f"{self.max_batch} plus a prefill chunk; fix: a budget above {self.max_batch}")
        if not self.kv_sequences >= 1:
            raise ValueError(f"kv_sequences: the KV pool must hold at least one sequence, got {self.kv_sequences!r}")

    def for_engine(self, d: Deployment) -> Policy:
        """This policy with its step policy settled, the one place that is done: its own where it names one (a what-if,
        the planner's ideal bound run as the candidate's engine), else the Deployment's engine's (batching.engine_terms)."""
        if self.step_policy is not None:
            return self
        return replace(self, step_policy=MIXED if engine_terms(d)["mixed"] else PREFILL_FIRST)  # checked: mixed needs Tb > B


def check_rate(rate) -> np.ndarray:
    rate = np.asarray(rate, dtype=float)
    bad = rate[~(np.isfinite(rate) & (rate > 0))]
    if rate.size == 0 or bad.size:
        raise ValueError(f"rate: must be a finite number of requests/s > 0, got {bad[0] if bad.size else 'none'!r}; "
                         "fix: e.g. --rate 2")
    return rate


def check_concurrency(concurrency, low: float = 1.0) -> np.ndarray:
    concurrency = np.asarray(concurrency, dtype=float)
    bad = concurrency[~(np.isfinite(concurrency) & (concurrency >= low) & (concurrency > 0))]
    if concurrency.size == 0 or bad.size:
        raise ValueError(f"concurrency: must be a finite number of requests in flight >= {low:g}, got "
                         f"{bad[0] if bad.size else 'none'!r}; fix: e.g. 8")
    return concurrency


class LoadModel:
    """One deployment, one workload (prompt P, output G), one policy: its steady state at any load."""

    def __init__(self, d: Deployment, prompt: int, gen: int, policy: Policy = Policy(), lengths_vary: bool = False):
        """lengths_vary: the requests' output lengths differ about the mean G (a benchmark's random lengths, real
        traffic), so a closed loop's requests end at unrelated steps and arrive as an open loop's do, under every step
        policy (roofline.serving.steady_loop; identical ones stagger, or keep a cohort under prefill first)."""
        for name, value in (("prompt", prompt), ("gen", gen)):
            whole(name, value, note=" tokens")
        engine = engine_terms(d)  # the engine's request cost and steps batched ahead, as the simulator takes them
        self.d, self.P, self.G, self.policy = d, int(prompt), int(gen), policy.for_engine(d)
        self.lengths_vary = bool(lengths_vary)
        self.request_overhead_s, self.overlap_steps = engine["request_overhead_s"], engine["overlap_steps"]
        self.front_end = replace(engine["front_end"], stream_interval=self.policy.stream_interval,
                                 postprocess_workers=self.policy.postprocess_workers)
        self.step_model: StepModel = STEP_MODELS[self.policy.step_policy](self)
        # the table's grid reaches the largest step the step model takes
        self.table = StepTable(d, float(self.step_model.largest_step_tokens))
        self._prefill_attention: dict = {}
        self._rank_excess_per_token: float | None = None

    def decoders_attention(self, n):
        """`n` decoders' attention at the mean context (StepTable.decode_attention)."""
        return self.table.decode_attention(n, self.P + self.G / 2)

    def rank_excess(self, tokens, prompts):
        """What `prompts` prompts' chunks of `tokens` prefill tokens in all add to a step under expert parallelism,
        beyond the dense rows' even share (mixed_step.rank_excess_seconds, at the budget's chunk; 0 without ep)."""
        if self.d.ep == 1:
            return 0.0
        if self._rank_excess_per_token is None:
            self._rank_excess_per_token = rank_excess_per_token(self.d, min(self.P, self.policy.token_budget))
        return rank_excess_seconds(self._rank_excess_per_token, self.d.ep, tokens, prompts)

    def balance_wait(self, rate, tau, decoders) -> np.ndarray:
        """Seconds a prompt is held for every attention data-parallel rank to hold one, at `rate` requests/s, mean
        step `tau` and `decoders` running (roofline.serving.attention_dp; 0 where the engine does not balance)."""
        if not balances(self.d):
            return np.zeros(np.broadcast(rate, tau, decoders).shape)
        return balance_wait_seconds(rate, self.d.ep, self.d.engine.scheduler.attention_dp_balance_steps, tau, decoders)

    def batch_wait(self, rate, decode_step_s, decoders) -> tuple[np.ndarray, np.ndarray]:
        """(seconds a prompt is held to run beside others, the prompts released beside it) where the launch sets a
        batch wait (Policy.batch_wait_steps; roofline.serving.batch_wait), at `rate` requests/s and `decoders` running
        in decode steps of `decode_step_s`; zeros where it sets none."""
        policy = self.policy
        return batch_wait(rate, policy.batch_wait_steps, policy.batch_wait_ratio, policy.token_budget, self.P,
                          decode_step_s, decoders, self.d.ep)

    def prefill_attention(self, chunks: np.ndarray) -> np.ndarray:
        """A prompt's prefill attention cut into `chunks` equal chunks (the pricer's, per distinct count; its busiest
        rank's share where the engine balances prompts over attention data-parallel ranks, attention_dp.chunk_share)."""
        out = np.empty(np.shape(chunks))
        for k in np.unique(chunks):
            if k not in self._prefill_attention:
                self._prefill_attention[k] = (prefill_attention_seconds(self.d, self.P, math.ceil(self.P / k))
                                              * chunk_share(self.d))
            out[chunks == k] = self._prefill_attention[k]
        return out

    def mean_step(self, rate, tau) -> np.ndarray:
        """The fixed point's map alone: the mean step when the mean step is `tau` (what `solve` bisects)."""
        return self.step_model.mean_step(rate, tau)

    def steps(self, rate, tau) -> dict:
        """The mean step the model predicts when the mean step is `tau` (the fixed point's map), and what a
        running request sees."""
        return self.step_model.steps(rate, tau)

    def solve(self, rate) -> tuple[np.ndarray, np.ndarray]:
        """(mean step τ̄, whether a steady state exists) at each rate: τ̄ = steps(rate, τ̄), bisected in log τ̄."""
        rate = np.asarray(rate, dtype=float)
        low = np.full(rate.shape, float(self.table.dense(1.0, 1.0) + self.decoders_attention(1.0)))
        # the largest τ̄ the budget and the batch cap allow at this rate
        high = np.minimum(self.policy.token_budget / (rate * self.step_model.budget_tokens_per_request),
                          np.maximum(self.policy.max_batch - 1, 1e-9) / (rate * max(self.G - 1, 1e-9)))
        high = np.maximum(high, low)
        ok = self.mean_step(rate, high) <= high  # a root below the bound
        lo, hi = np.log(low), np.log(high)
        for _ in range(BISECTIONS):
            mid = (lo + hi) / 2
            above = self.mean_step(rate, np.exp(mid)) > np.exp(mid)
            lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
        tau = np.exp(hi)
        return tau, ok & self.steps(rate, tau)["feasible"]

    def at_rate(self, rate, closed_loop: bool = False, kv_limit: bool = True) -> dict:
        """Every steady-state figure at open-loop rates (requests/s); NaN where the rate saturates (kv_limit:
        counting a KV pool that cannot hold λ·E2E sequences as saturation)."""
        rate = check_rate(rate)
        tau, ok = self.solve(rate)
        s = self.steps(rate, tau)
        service, wait = self.step_model.own_prefill(rate, s), self.step_model.budget_wait(rate, s)
        residual = 0.0 if closed_loop else s["second_moment"] / (2 * tau)
        scheduled_ahead = self.overlap_steps * tau  # steps batched before it arrived
        balance = self.balance_wait(rate, tau, s["decoders"])
        held = s["batch_wait_s"]  # the step model's, from the steps it prices (roofline.serving.batch_wait)
        front = self.front_end.ttft_s(rate, self.G, s["decoders"])  # through the server's front end (inf past capacity)
        ttft = residual + wait + front + scheduled_ahead + balance + held + service + self.request_overhead_s
        tpot = s["tpot_s"]
        e2e = ttft + (self.G - 1) * tpot
        in_flight = rate * e2e
        ok = ok & ((in_flight <= self.policy.kv_sequences) | (not kv_limit)) & np.isfinite(ttft)
        nan = lambda x: np.where(ok, x, np.nan)  # noqa: E731
        return {"rate": rate, "saturated": ~ok, "tpot_s": nan(tpot), "ttft_s": nan(ttft), "e2e_s": nan(e2e),
                "in_flight": nan(in_flight), "decoders": nan(s["decoders"]),
                "decode_step_s": nan(s["decode_step_s"]), "mixed_step_s": nan(s[self.step_model.carrying_step]),
                "tpot_inflation": nan(tpot / s["decode_step_s"] - 1), "step_s": nan(tau),
                "prefill_share": nan(s["prefill_share"]),
                "ttft_queue_s": nan(residual + wait), "ttft_front_end_s": nan(front),
                "ttft_prefill_s": nan(service),
                "ttft_scheduled_ahead_s": nan(scheduled_ahead), "ttft_balance_wait_s": nan(balance),
                "ttft_batch_wait_s": nan(held),
                "goodput_tokens_per_s": nan(rate * self.G), "goodput_requests_per_s": nan(rate)}

    def terms(self, rate: float) -> dict:
        """The closed forms' named terms at one rate (requests/s, one replica), for `--explain`."""
        rate_ = check_rate([rate])
        tau, _ = self.solve(rate_)
        s = self.steps(rate_, tau)
        front = self.front_end
        return {**self.step_model.terms(rate_, tau, s), "front_end_idle": front.idle,
                "front_end_work_s": float(front.work(self.G)), "front_end_busy": float(front.busy(rate, self.G)),
                "front_end_s": float(front.ttft_s(rate_, self.G, s["decoders"])[0]),
                "front_end_capacity": front.capacity(self.G), "stream_interval": front.stream_interval}

    def budget_wait(self, rate, s: dict) -> np.ndarray:
        """Seconds a prompt waits for the budget: the prefill tokens ahead of it (M/D/1 in full steps of
        `chunk_room` prompt tokens: busy a share ρ = λ (P / c) τ_full of the time, the work then ahead exponential
        with mean P / 2(1 − ρ)) push its last chunk into a later step only when they and the prompt overflow
        ⌈P / c⌉ steps."""
        steps = self.P / s["chunk_room"]
        busy = rate * steps * s["full_step_s"]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            scale = self.P / (2 * (1 - busy)) / s["chunk_room"]  # the work ahead, in full steps
            # E⌈a + U⌉ − ⌈a⌉, less the half step the fluid queue drains within the step in progress (the
            # scheduler hands that step its tokens when it starts)
            later = np.exp(-(np.ceil(steps) - steps + 0.5) / scale) / -np.expm1(-1 / scale)
            return np.where(busy < 1, busy * later * s["full_step_s"], np.inf)

    def budget_saturation(self) -> float:
        """The step model's closed form: requests/s with every step full."""
        return self.step_model.budget_saturation()

    def saturation(self, kv_limit: bool = True) -> float:
        """The largest rate with a steady state (requests/s): candidates between 0 and the budget's closed form."""
        low, high = 0.0, self.budget_saturation()
        for _ in range(SATURATION_ROUNDS):
            candidates = np.linspace(low, high, SATURATION_POINTS + 1)[1:]
            ok = ~self.at_rate(candidates, kv_limit=kv_limit)["saturated"]
            if not ok.any():
                high = candidates[0]
                continue
            last = int(np.flatnonzero(ok).max())
            low = candidates[last]
            if last + 1 == len(candidates):
                break
            high = candidates[last + 1]
        return float(low)

    def at_concurrency(self, concurrency, requests=None) -> dict:
        """Closed loop: C requests in flight, a new one as one ends (the step model's closed loop; beyond the KV pool's
        sequences the rest queue). `requests` (N a run, per C; None: the steady state alone): TTFT is the run's mean,
        its first wave of C requests sent together at t = 0 included (roofline.serving.first_wave)."""
        concurrency = check_concurrency(concurrency, low=0.0)  # a replica's share of C may be a fraction
        if requests is not None:
            requests = check_concurrency(requests, low=1.0)
        return self.step_model.closed_loop(concurrency, requests)


def kv_sequences(d: Deployment, prompt: int, gen: int, block_size: int | None = None, token_budget: int = 8192,
                 usable_bytes: float | None = None) -> float:
    """Sequences of P in and G out, in whole blocks, the engine's KV pool holds (roofline.kv_memory): one GPU's, e GPUs'
    under ep: the bytes the device shows the runtime (or `usable_bytes`), the engine's rule, one budget's activations;
    each holds P + G tokens where the engine reserves them at admission, P + G / 2 on average where it takes them on
    demand (KvMemory.resident_tokens)."""
    if block_size is not None and (isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer))
                                   or block_size < 1):
        raise ValueError(f"block_size: must be a whole number of tokens >= 1, got {block_size!r}; vLLM uses 16")
    pool = d.engine.memory if block_size is None else replace(d.engine.memory, block_tokens=int(block_size))
    piece, pieces = workspace(d, float(prompt), int(token_budget))
    activations = float(np.ravel(piece)[0]) * float(np.minimum(pieces, 1e300))
    # under expert parallelism a GPU holds 1/e of the routed experts, and the pool of each of the e GPUs its own sequences
    weights = d.weight_bytes if d.ep == 1 else float(d.memory_bytes(0.0, 0.0)[0])
    room = float(pool.kv_room(d.hardware.capacity_bytes if usable_bytes is None else usable_bytes, weights, activations))
    per_sequence = float(d.compiled.kv_cache(1.0, float(pool.resident_tokens(prompt, gen)), d.precision.kv_bytes))
    return math.floor(room / per_sequence) * d.ep if room > 0 and per_sequence > 0 else 0.0


def at_load(d: Deployment, prompt: int, gen: int, rate=None, concurrency=None, policy: Policy = Policy(),
            requests=None) -> dict:
    """The steady state of a deployment (its replicas share the load evenly) at open-loop rates or closed-loop
    concurrencies, with its saturating rate and a lone request's TTFT beside it (`ttft_alone_s`). `requests` (closed
    loop: N a run, the replicas' together): TTFT is the run's mean, its first wave included (LoadModel.at_concurrency)."""
    if (rate is None) == (concurrency is None):
        raise ValueError("rate, concurrency: give one (open loop: requests/s; closed loop: requests in flight)")
    if requests is not None and concurrency is None:
        raise ValueError("requests: a run's request count belongs to a closed loop; give concurrency too")
    model = LoadModel(d, prompt, gen, policy)
    replicas = d.replicas
    if rate is not None:
        out = model.at_rate(check_rate(rate) / replicas)
        out["rate"] = out["rate"] * replicas
    else:
        concurrency = check_concurrency(concurrency)
        run = None if requests is None else np.broadcast_to(check_concurrency(requests), concurrency.shape) / replicas
        if run is not None and (run * replicas < concurrency).any():
            raise ValueError(f"requests: a run sends at least its concurrency's requests (the first wave), got "
                             f"{np.min(run * replicas):g} for a concurrency of {np.max(concurrency):g}; fix: e.g. 10 x C")
        out = model.at_concurrency(concurrency / replicas, run)
        if run is not None:
            out["requests"] = run * replicas
        out["rate"], out["concurrency"] = out["rate"] * replicas, out["concurrency"] * replicas
        out["in_flight"], out["queued"] = out["in_flight"] * replicas, out["queued"] * replicas
    for name in ("goodput_tokens_per_s", "goodput_requests_per_s"):
        out[name] = out[name] * replicas
    top = model.saturation()
    alone = model.at_rate([top * 1e-9], closed_loop=True)
    out.update(saturation_rate=top * replicas, budget_saturation_rate=model.budget_saturation() * replicas,
               ttft_alone_s=float(alone["ttft_s"][0]), tpot_alone_s=float(alone["tpot_s"][0]))
    return out
