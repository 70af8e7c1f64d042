"""Steady state of a continuous-batching server at an offered load: open-loop rate λ or closed-loop concurrency C.

The scheduler is vLLM's and TensorRT-LLM's (and roofline.serving.batching's): every step carries one token of
each running decoder plus up to the token budget (vLLM max_num_batched_tokens, TensorRT-LLM max_num_tokens)
of prefill chunks, priced as one mixed step (roofline.serving.mixed_step). With prompt P, output G, budget Tb:
  decoders a step (Little)          m = λ (G − 1) τ̄   (a step has at least one: m / (1 − e^−m))
  chunk room                        c = Tb − m,  k = ⌈P / c⌉ chunks a prompt
  prefill tokens per step           π = λ τ̄ P
  steps carrying prefill            φ = max(1 − exp(−λ k τ̄), π / c),  each with q = π / φ prefill tokens
  mean step                         τ̄ = (1 − φ) τ_decode(m) + φ τ_mixed(m, q)          solved for τ̄
  TPOT, the steps a running request sees, weighted by their decoders: each arrival lengthens its
       neighbours' steps (k chunks, Δ = τ_mixed − τ_decode each; b a step per decoder), which brings more
       arrivals: a cluster process, branching ratio β = λ (k Δ + b (G − 1) / 2), counts dispersed by
       D = 1 / (1 − β)². A request sees m + D decoders and chunk steps φ (m + D − 1) / m of the time.
  TTFT = residual of the step in progress E[τ²] / 2τ̄ (open loop) + waiting for the budget (the prefill
         tokens ahead, M/D/1, spilling into later full steps) + the prompt's k chunk steps (k − 1 full, then
         the rest beside those who arrived in its step) + the engine's per-request cost
         + s τ̄ under an engine that schedules s steps ahead (roofline.scheduler overlap_steps; TensorRT-LLM's
         overlap scheduler, s = 1: the step after the one in progress was batched before the request arrived)
  E2E = TTFT + (G − 1) TPOT;  in flight = λ E2E (Little);  goodput = λ G output tokens/s.
TPOT's inflation is TPOT / τ_decode − 1: the prefill chunks riding in the decoders' steps.
Checked against the simulator (roofline.serving.batching) running the same scheduler: within 3% at 0.2-0.8
of saturation (tests/test_load.py); near saturation (0.95) the dispersion diverges and the model does not hold.
Saturation: the budget full (closed form λ_max = Tb / ((P + G − 1) τ_full), every step Tb tokens of which
Tb (G − 1)/(P + G − 1) decode), the running batch at max_batch, or the KV pool unable to hold λ·E2E sequences,
whichever binds first (found numerically). Closed loop: C requests in flight, a new one as one ends: identical
requests stagger, so below saturation no residual and no budget wait (TTFT = own chunks + request cost); past the
budget's saturation or the KV pool's sequences the rest queue and TTFT grows by (C − held) / λ (the closed loop's
asymptotic bound). A run of N requests adds its first wave, C sent at t = 0 (roofline.serving.first_wave).
Prefill first (SGLang's default, Policy.step_policy = PREFILL_FIRST): prompts run in prefill steps of their own and
the decoders pause for them; its steady state, and its closed loop's one cohort, are roofline.serving.prefill_first's.
Left out: preemption (the simulator has it), sampling, prefix caching, spread prompt and output lengths
(the means are used), the spread of the decoders' contexts (priced at the mean, P + G / 2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..deployment import Deployment
from ..memory import workspace
from ..scheduler import MIXED, PREFILL_FIRST, STEP_POLICIES
from ..sharding import whole
from . import prefill_first
from .first_wave import run_mean_ttft
from .mixed_step import StepTable, prefill_attention_seconds

BISECTIONS = 32  # halvings of log τ̄: 2^-32 of the bracket, ~1e-9 of τ̄, far below the fits' 1e-3 difference step
SATURATION_ROUNDS, SATURATION_POINTS = 4, 32  # the saturating rate: 32 candidates a round, 4 rounds
CURVE_POINTS = 512  # closed loop: the open-loop curve it inverts


@dataclass(frozen=True)
class Policy:
    """The scheduler's limits: prefill+decode tokens a step, running sequences, and the KV pool in sequences."""
    token_budget: int = 8192  # vLLM's max_num_batched_tokens with chunked prefill; TensorRT-LLM max_num_tokens
    max_batch: int = 256  # vLLM max_num_seqs; TensorRT-LLM max_batch_size
    kv_sequences: float = math.inf  # sequences the KV pool holds at P + G tokens each
    step_policy: str = MIXED  # or PREFILL_FIRST, SGLang's: prompts in steps of their own (roofline.scheduler)

    def __post_init__(self):
        whole("token_budget", self.token_budget, low=2, note=" tokens")
        whole("max_batch", self.max_batch)
        if self.step_policy not in STEP_POLICIES:
            raise ValueError(f"step_policy: unknown policy {self.step_policy!r}; fix: one of {', '.join(STEP_POLICIES)}")
        if self.token_budget <= self.max_batch and self.step_policy == MIXED:
            raise ValueError(f"token_budget: {self.token_budget} tokens cannot carry one decode batch of max_batch "
                             f"{self.max_batch} plus a prefill chunk; fix: a budget above {self.max_batch}")
        if not self.kv_sequences >= 1:
            raise ValueError(f"kv_sequences: the KV pool must hold at least one sequence, got {self.kv_sequences!r}")


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

    def __init__(self, d: Deployment, prompt: int, gen: int, policy: Policy = Policy()):
        for name, value in (("prompt", prompt), ("gen", gen)):
            whole(name, value, note=" tokens")
        self.d, self.P, self.G, self.policy = d, int(prompt), int(gen), policy
        self.prefill_first = policy.step_policy == PREFILL_FIRST  # (roofline.serving.prefill_first)
        # the table's grid reaches the largest step: the budget, or a prefill-first decode step of max_batch
        self.table = StepTable(d, float(max(policy.token_budget, policy.max_batch if self.prefill_first else 0)))
        self._prefill_attention: dict = {}

    def decoders_attention(self, n):
        """`n` decoders' attention at the mean context (StepTable.decode_attention)."""
        return self.table.decode_attention(n, self.P + self.G / 2)

    def prefill_attention(self, chunks: np.ndarray) -> np.ndarray:
        """A prompt's prefill attention cut into `chunks` equal chunks (the pricer's, per distinct count)."""
        out = np.empty(np.shape(chunks))
        for k in np.unique(chunks):
            if k not in self._prefill_attention:
                self._prefill_attention[k] = prefill_attention_seconds(self.d, self.P, math.ceil(self.P / k))
            out[chunks == k] = self._prefill_attention[k]
        return out

    def _parts(self, n, rate, tau, companions=None, own: bool = True) -> dict:
        """The steps at `n` decoders when the mean step is `tau`: decode-only, carrying prefill, and a request's own
        (its last chunk beside `companions` prefill tokens of the others; default the mean a step)."""
        P, budget = self.P, self.policy.token_budget
        room = np.maximum(budget - n, 1.0)
        k = np.ceil(P / room)
        prefill_tokens = rate * tau * P
        # Poisson chunk starts a step, but never fewer steps than the budget can carry the prefill tokens in
        phi = np.maximum(-np.expm1(-rate * k * tau), np.minimum(prefill_tokens / room, 1.0))
        q = np.where(phi > 0, np.minimum(prefill_tokens / np.maximum(phi, 1e-300), room), P / k)
        per_prompt = self.prefill_attention(k) / P

        def carrying(tokens, prompts):  # tokens of prefill from `prompts` prompts beside the n decoders
            return self.table.dense(n + prompts, n + tokens) + self.decoders_attention(n) + tokens * per_prompt

        out = {"decode": carrying(0.0, 0.0), "mixed": carrying(q, np.maximum(q * k / P, 1.0)), "chunks": k,
               "room": room, "phi": phi, "q": q, "prefill_tokens": prefill_tokens}
        if own:  # a request's own prefill alone: k - 1 full chunks, then the rest beside the others' demand
            rest = np.minimum(P - (k - 1) * room + (prefill_tokens if companions is None else companions), room)
            out.update(own=(k - 1) * carrying(room, 1.0) + carrying(rest, np.maximum(rest * k / P, 1.0)),
                       full=carrying(room, np.maximum(room / P, 1.0)))
        return out

    def mean_step(self, rate, tau) -> np.ndarray:
        """The fixed point's map alone: the mean step when the mean step is `tau` (what `solve` bisects)."""
        if self.prefill_first:
            return prefill_first.steps(self, rate, tau)["step_s"]
        m = rate * (self.G - 1) * tau
        with np.errstate(divide="ignore", invalid="ignore"):
            busy = np.where(m > 1e-12, m / -np.expm1(-m), 1.0)
        at = self._parts(busy, rate, tau, own=False)
        return (1 - at["phi"]) * at["decode"] + at["phi"] * at["mixed"]

    def steps(self, rate, tau) -> dict:
        """The mean step the model predicts when the mean step is `tau` (the fixed point's map), and what a
        running request sees."""
        if self.prefill_first:
            return prefill_first.steps(self, rate, tau)
        G = self.G
        m = rate * (G - 1) * tau  # decoders a step, averaged over time (Little)
        with np.errstate(divide="ignore", invalid="ignore"):
            busy = np.where(m > 1e-12, m / -np.expm1(-m), 1.0)  # a step has at least one: E[n | n >= 1], Poisson
        at = self._parts(busy, rate, tau)
        phi = at["phi"]
        mean = (1 - phi) * at["decode"] + phi * at["mixed"]
        # What a running request sees: steps weighted by their decoders. Each arrival lengthens the G - 1
        # steps of the requests decoding beside it (its chunks by Δ each, its attention by b a step), which
        # brings more arrivals: a cluster process of branching ratio β, whose counts have variance
        # D = 1 / (1 − β)² times their mean. A request sees E[n²]/E[n] = m + D decoders, and a chunk step
        # m + D − 1 of them (size-biased).
        slope = self._parts(busy + 1, rate, tau, own=False)["decode"] - at["decode"]
        branching = rate * (at["chunks"] * (at["mixed"] - at["decode"]) + slope * (G - 1) / 2)
        dispersion = 1 / np.square(1 - np.minimum(branching, 1 - 1e-9))
        # (never more decoders than a step holds: the batch cap, or the budget beside the prefill)
        dispersion = np.minimum(dispersion, np.maximum(np.minimum(self.policy.max_batch, self.policy.token_budget
                                                                  - at["prefill_tokens"]) - m, 1.0))
        seen = self._parts(m + dispersion, rate, tau, own=False)
        # A request arrives in a step picked by its length (E[τ²]/τ̄ long); those arriving with it share its chunk.
        # (whole prompts, k = 1, come a Poisson number a chunk step, each adding its own share of the step;
        # chunks of longer prompts fill the budget instead)
        prompts = np.maximum(at["q"] / self.P, 1.0)
        spread = np.where(at["chunks"] == 1, (at["mixed"] - at["decode"]) ** 2 / prompts, 0.0)
        second_moment = (1 - phi) * at["decode"] ** 2 + phi * (at["mixed"] ** 2 + spread)
        beside = self._parts(m + dispersion - 1, rate, tau, rate * second_moment / tau * self.P)
        with np.errstate(divide="ignore", invalid="ignore"):
            phi_seen = np.minimum(np.where(m > 1e-12, phi * (m + dispersion - 1) / m, phi), 1.0)
        return {"step_s": mean, "tpot_s": (1 - phi_seen) * seen["decode"] + phi_seen * seen["mixed"],
                "decode_step_s": seen["decode"], "mixed_step_s": beside["mixed"], "own_prefill_s": beside["own"],
                "full_step_s": beside["full"], "decoders": m + dispersion, "chunks": at["chunks"],
                "chunk_room": at["room"], "prefill_share": phi, "prefill_tokens_per_step": at["prefill_tokens"],
                "second_moment": second_moment,
                "feasible": (at["prefill_tokens"] + m <= self.policy.token_budget * (1 + 1e-9))
                & (m <= self.policy.max_batch)}

    def solve(self, rate) -> tuple[np.ndarray, np.ndarray]:
        """(mean step τ̄, whether a steady state exists) at each rate: τ̄ = steps(rate, τ̄), bisected in log τ̄."""
        rate = np.asarray(rate, dtype=float)
        low = np.full(rate.shape, float(self.table.dense(1.0, 1.0) + self.decoders_attention(1.0)))
        # the largest τ̄ the budget and the batch cap allow at this rate
        per_request = self.P + self.G - 1
        high = np.minimum(self.policy.token_budget / (rate * (self.P if self.prefill_first else per_request)),
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
        if self.prefill_first:
            service, wait = prefill_first.own_prefill(self, rate, s), prefill_first.budget_wait(self, rate, s)
            s.update(mixed_step_s=s["prefill_step_s"])
        else:
            service, wait = s["own_prefill_s"], self.budget_wait(rate, s)
        residual = 0.0 if closed_loop else s["second_moment"] / (2 * tau)
        scheduled_ahead = self.d.engine.scheduler.overlap_steps * tau  # steps batched before it arrived
        ttft = residual + wait + scheduled_ahead + service + self.d.engine.request_overhead_s
        tpot = s["tpot_s"]
        e2e = ttft + (self.G - 1) * tpot
        in_flight = rate * e2e
        ok = ok & ((in_flight <= self.policy.kv_sequences) | (not kv_limit)) & np.isfinite(ttft)
        nan = lambda x: np.where(ok, x, np.nan)  # noqa: E731
        return {"rate": rate, "saturated": ~ok, "tpot_s": nan(tpot), "ttft_s": nan(ttft), "e2e_s": nan(e2e),
                "in_flight": nan(in_flight), "decoders": nan(s["decoders"]),
                "decode_step_s": nan(s["decode_step_s"]), "mixed_step_s": nan(s["mixed_step_s"]),
                "tpot_inflation": nan(tpot / s["decode_step_s"] - 1), "step_s": nan(tau),
                "prefill_share": nan(s["prefill_share"]),
                "ttft_queue_s": nan(residual + wait), "ttft_prefill_s": nan(service),
                "ttft_scheduled_ahead_s": nan(scheduled_ahead),
                "goodput_tokens_per_s": nan(rate * self.G), "goodput_requests_per_s": nan(rate)}

    def terms(self, rate: float) -> dict:
        """The closed forms' named terms at one rate (requests/s, one replica), for `--explain`."""
        rate_ = check_rate([rate])
        tau, _ = self.solve(rate_)
        s = self.steps(rate_, tau)
        if self.prefill_first:
            return prefill_first.terms(self, rate_, s)
        m = float(rate * (self.G - 1) * tau[0])
        decoders = self.policy.token_budget * (self.G - 1) / (self.P + self.G - 1)
        out = {name: float(np.ravel(value)[0]) for name, value in s.items() if name != "feasible"}
        residual = out["second_moment"] / (2 * out["step_s"])
        out.update(rate=float(rate), decoders_mean=m, residual_s=residual,
                   budget_wait_s=float(self.budget_wait(rate_, s)[0]), request_overhead_s=self.d.engine.request_overhead_s,
                   scheduled_ahead_s=self.d.engine.scheduler.overlap_steps * out["step_s"],
                   full_decoders=decoders, full_prefill=self.policy.token_budget - decoders,
                   budget_saturation=self.budget_saturation(), prompt=self.P, gen=self.G,
                   token_budget=self.policy.token_budget)
        return out

    def budget_wait(self, rate, s: dict) -> np.ndarray:
        """Seconds a prompt waits for the budget: the prefill tokens ahead of it (M/D/1 in full steps: busy
        a share ρ = λ (P / c) τ_full of the time, the work then ahead exponential with mean P / 2(1 − ρ))
        push its last chunk into a later step only when they and the prompt overflow ⌈P / c⌉ steps."""
        steps = self.P / s["chunk_room"]
        busy = rate * steps * s["full_step_s"]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            scale = self.P / (2 * (1 - busy)) / s["chunk_room"]  # the work ahead, in full steps
            # E⌈a + U⌉ − ⌈a⌉, less the half step the fluid queue drains within the step in progress (the
            # scheduler hands that step its tokens when it starts)
            later = np.exp(-(np.ceil(steps) - steps + 0.5) / scale) / -np.expm1(-1 / scale)
            return np.where(busy < 1, busy * later * s["full_step_s"], np.inf)

    def budget_saturation(self) -> float:
        """The closed form: every step full, Tb tokens of which Tb (G − 1)/(P + G − 1) are decoders' (prefill first:
        roofline.serving.prefill_first.budget_saturation)."""
        if self.prefill_first:
            return prefill_first.budget_saturation(self)
        P, G, budget = self.P, self.G, self.policy.token_budget
        decoders = budget * (G - 1) / (P + G - 1)
        prefill = budget - decoders
        k = math.ceil(P / max(prefill, 1.0))
        full = (float(self.table.dense(decoders + prefill * k / P, budget)) + float(self.decoders_attention(decoders))
                + prefill * float(self.prefill_attention(np.array([k]))[0]) / P)
        return budget / ((P + G - 1) * full)

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
        """Closed loop: C requests in flight; the rate is where λ·E2E(λ) = C, beyond the KV pool's the rest queue.
        `requests` (N a run, per C; None: the steady state alone): TTFT is the run's mean, its first wave of C
        requests sent together at t = 0 (roofline.serving.first_wave) beside N − C at the steady state's."""
        concurrency = check_concurrency(concurrency, low=0.0)  # a replica's share of C may be a fraction
        if self.prefill_first:  # one cohort, every wave the first: `requests` adds nothing
            return prefill_first.closed_loop(self, concurrency, requests is not None)
        top = self.saturation(kv_limit=False)
        rates = np.geomspace(top * 1e-6, top, CURVE_POINTS)
        curve = self.at_rate(rates, closed_loop=True, kv_limit=False)
        valid = ~curve["saturated"]
        # Identical requests in a closed loop stagger: each is sent as one ends, so they do not collide for the budget
        # the way Poisson arrivals do, and below saturation none waits (the closed loop's asymptotic bound, Denning &
        # Buzen 1978: R(C) = max(D, C·D_max − Z), met with equality without variability). Measured: the CPU server's
        # closed loop, TTFT past the first wave within 8% of the own prefill (validation/README.md, "The closed loop")
        in_flight = rates * (curve["e2e_s"] - curve["ttft_queue_s"])
        held_max = np.nanmax(np.where(valid, in_flight, np.nan))
        held = np.minimum(concurrency, min(held_max, self.policy.kv_sequences))
        rate = np.interp(held, in_flight[valid], rates[valid])
        out = self.at_rate(rate, closed_loop=True, kv_limit=False)
        for name in ("ttft_s", "e2e_s"):
            out[name] = out[name] - out["ttft_queue_s"]
        out["ttft_queue_s"] = np.zeros_like(out["ttft_queue_s"])
        out["in_flight"] = rate * out["e2e_s"]
        queued = concurrency - held
        out["ttft_queue_s"] = out["ttft_queue_s"] + queued / rate
        out["ttft_s"] = out["ttft_s"] + queued / rate
        out["e2e_s"] = out["e2e_s"] + queued / rate
        out.update(concurrency=concurrency, in_flight=held, queued=queued, ttft_steady_s=out["ttft_s"])
        if requests is not None:
            requests = np.broadcast_to(check_concurrency(requests, low=1.0), concurrency.shape)
            run = [run_mean_ttft(self, c, n, t) if np.isfinite(t) else np.nan
                   for c, n, t in zip(concurrency, requests, out["ttft_s"])]
            out["ttft_first_wave_s"] = np.array(run) - out["ttft_s"]  # what the start adds to the run's mean
            out["ttft_s"] = np.array(run)
        return out


def kv_sequences(d: Deployment, prompt: int, gen: int, block_size: int | None = None, token_budget: int = 8192,
                 usable_bytes: float | None = None) -> float:
    """Sequences of P + G tokens, in whole blocks, the engine's KV pool holds (roofline.kv_memory): one GPU's, e GPUs' under ep:
    the bytes the device shows the runtime (or `usable_bytes`), the engine's rule, one budget's activations."""
    if block_size is not None and (isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer))
                                   or block_size < 1):
        raise ValueError(f"block_size: must be a whole number of tokens >= 1, got {block_size!r}; vLLM uses 16")
    pool = d.engine.memory if block_size is None else replace(d.engine.memory, block_tokens=int(block_size))
    piece, pieces = workspace(d, float(prompt), int(token_budget))
    activations = float(np.ravel(piece)[0]) * float(np.minimum(pieces, 1e300))
    # under expert parallelism a GPU holds 1/e of the routed experts, and the pool of each of the e GPUs its own sequences
    weights = d.weight_bytes if d.ep == 1 else float(d.memory_bytes(0.0, 0.0)[0])
    room = float(pool.kv_room(d.hardware.capacity_bytes if usable_bytes is None else usable_bytes, weights, activations))
    per_sequence = float(d.compiled.kv_cache(1.0, float(pool.blocks_tokens(prompt + gen)), d.precision.kv_bytes))
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
