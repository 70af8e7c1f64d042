"""Steady state of a continuous-batching server at an offered load: open-loop rate λ or closed-loop concurrency C.

The scheduler is vLLM's and TensorRT-LLM's (and roofline.serving.batching's): every step carries one token of
each running decoder plus up to the token budget (vLLM max_num_batched_tokens, TensorRT-LLM max_num_tokens)
of prefill chunks, priced as one mixed step (roofline.serving.mixed_step). With prompt P, output G, budget Tb:
  decoders a running request sees   n = 1 + λ (G − 1) τ̄                 (Little's law, itself included)
  chunk room                        c = Tb − n,  k = ⌈P / c⌉ chunks a prompt
  prefill tokens per step           π = λ τ̄ P
  steps carrying prefill            φ = 1 − exp(−λ k τ̄),  each with q = π / φ prefill tokens
  mean step (= TPOT)                τ̄ = (1 − φ) τ_decode(n) + φ τ_mixed(n, q)         solved for τ̄
  TTFT = residual of the step in progress E[τ²] / 2τ̄ (open loop) + waiting for the budget (M/D/1, load
         ρ = π / c, service k τ_mixed) + the prompt's k chunk steps + the engine's per-request cost
  E2E = TTFT + (G − 1) τ̄;  in flight = λ E2E (Little);  goodput = λ G output tokens/s.
TPOT's inflation is τ̄ / τ_decode(n) − 1: the prefill chunks riding in the decoders' steps.
Saturation: the budget full (closed form λ_max = Tb / ((P + G − 1) τ_full), every step Tb tokens of which
Tb (G − 1)/(P + G − 1) decode), the running batch at max_batch, or the KV pool unable to hold λ·E2E sequences,
whichever binds first (found numerically). Closed loop: C requests in flight, a new one as one ends (no
residual wait); past the KV pool's sequences the rest queue and TTFT grows by (C − held) / λ.
Left out: preemption (the simulator has it), sampling, prefix caching, the spread of the decoders' contexts
(they are priced at the mean, P + G / 2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..deployment import Deployment
from .mixed_step import StepTable, prefill_attention_seconds

BISECTIONS = 48  # halvings of log τ̄: 2^-48 of the bracket
SATURATION_ROUNDS, SATURATION_POINTS = 4, 32  # the saturating rate: 32 candidates a round, 4 rounds
CURVE_POINTS = 512  # closed loop: the open-loop curve it inverts


@dataclass(frozen=True)
class Policy:
    """The scheduler's limits: prefill+decode tokens a step, running sequences, and the KV pool in sequences."""
    token_budget: int = 8192  # vLLM's max_num_batched_tokens with chunked prefill; TensorRT-LLM max_num_tokens
    max_batch: int = 256  # vLLM max_num_seqs; TensorRT-LLM max_batch_size
    kv_sequences: float = math.inf  # sequences the KV pool holds at P + G tokens each

    def __post_init__(self):
        if not (isinstance(self.token_budget, (int, np.integer)) and self.token_budget >= 2):
            raise ValueError(f"token_budget: must be a whole number of tokens >= 2, got {self.token_budget!r}")
        if not (isinstance(self.max_batch, (int, np.integer)) and self.max_batch >= 1):
            raise ValueError(f"max_batch: must be a whole number >= 1, got {self.max_batch!r}")
        if self.token_budget <= self.max_batch:
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


class LoadModel:
    """One deployment, one workload (prompt P, output G), one policy: its steady state at any load."""

    def __init__(self, d: Deployment, prompt: int, gen: int, policy: Policy = Policy()):
        for name, value in (("prompt", prompt), ("gen", gen)):
            if not (isinstance(value, (int, np.integer)) and value >= 1):
                raise ValueError(f"{name}: must be a whole number of tokens >= 1, got {value!r}")
        self.d, self.P, self.G, self.policy = d, int(prompt), int(gen), policy
        self.table = StepTable(d, float(policy.token_budget))
        self.decode_attention = self.table.decode_attention_per_sequence(self.P + self.G / 2)
        self._prefill_attention: dict = {}

    def prefill_attention(self, chunks: np.ndarray) -> np.ndarray:
        """A prompt's prefill attention cut into `chunks` equal chunks (the pricer's, per distinct count)."""
        out = np.empty(np.shape(chunks))
        for k in np.unique(chunks):
            if k not in self._prefill_attention:
                self._prefill_attention[k] = prefill_attention_seconds(self.d, self.P, math.ceil(self.P / k))
            out[chunks == k] = self._prefill_attention[k]
        return out

    def steps(self, rate, tau, residents=None) -> dict:
        """The mean step the model predicts when the mean step is `tau` (the fixed point's map), and its parts.
        residents: decoders a running request sees (default: Little's law at `rate`)."""
        P, G, budget = self.P, self.G, self.policy.token_budget
        n = 1 + rate * (G - 1) * tau if residents is None else residents
        room = np.maximum(budget - n, 1.0)
        k = np.ceil(P / room)
        prefill_tokens = rate * tau * P
        phi = -np.expm1(-rate * k * tau)
        q = np.minimum(prefill_tokens / np.maximum(phi, 1e-300), room)
        q = np.where(phi > 0, q, P / k)
        decode = self.table.dense(n, n) + n * self.decode_attention
        per_prompt = self.prefill_attention(k) / P
        mixed = self.table.dense(n + q * k / P, n + q) + n * self.decode_attention + q * per_prompt
        # the step that carries a request's own chunk: its chunk plus the others' prefill demand
        own_q = np.minimum(P / k + prefill_tokens, room)
        own = self.table.dense(n + own_q * k / P, n + own_q) + n * self.decode_attention + own_q * per_prompt
        mean = (1 - phi) * decode + phi * mixed
        return {"step_s": mean, "decode_step_s": decode, "mixed_step_s": mixed, "own_chunk_step_s": own,
                "decoders": n, "chunks": k, "chunk_room": room, "prefill_share": phi,
                "prefill_tokens_per_step": prefill_tokens, "second_moment": (1 - phi) * decode ** 2 + phi * mixed ** 2,
                # the budget's tokens a step on average (decoders counted without the tagged request)
                "feasible": (prefill_tokens + n - 1 <= budget * (1 + 1e-9)) & (n <= self.policy.max_batch)}

    def solve(self, rate) -> tuple[np.ndarray, np.ndarray]:
        """(mean step τ̄, whether a steady state exists) at each rate: τ̄ = steps(rate, τ̄), bisected in log τ̄."""
        rate = np.asarray(rate, dtype=float)
        low = np.full(rate.shape, float(self.table.dense(1.0, 1.0) + self.decode_attention))
        # the largest τ̄ the budget and the batch cap allow at this rate
        per_request = self.P + self.G - 1
        high = np.minimum(self.policy.token_budget / (rate * per_request),
                          np.maximum(self.policy.max_batch - 1, 1e-9) / (rate * max(self.G - 1, 1e-9)))
        high = np.maximum(high, low)
        top = self.steps(rate, high)
        ok = (top["step_s"] <= high) & top["feasible"]
        lo, hi = np.log(low), np.log(high)
        for _ in range(BISECTIONS):
            mid = (lo + hi) / 2
            above = self.steps(rate, np.exp(mid))["step_s"] > np.exp(mid)
            lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
        return np.exp(hi), ok

    def at_rate(self, rate, closed_loop: bool = False) -> dict:
        """Every steady-state figure at open-loop rates (requests/s); NaN where the rate saturates."""
        rate = check_rate(rate)
        tau, ok = self.solve(rate)
        s = self.steps(rate, tau)
        budget_load = np.minimum(s["prefill_tokens_per_step"] / s["chunk_room"], 1.0)
        service = s["chunks"] * s["own_chunk_step_s"]
        with np.errstate(divide="ignore", invalid="ignore"):
            wait = np.where(budget_load < 1, budget_load / (2 * (1 - budget_load)) * service, np.inf)
        residual = 0.0 if closed_loop else s["second_moment"] / (2 * tau)
        ttft = residual + wait + service + self.d.engine.request_overhead_s
        e2e = ttft + (self.G - 1) * tau
        in_flight = rate * e2e
        ok = ok & (in_flight <= self.policy.kv_sequences) & np.isfinite(ttft)
        nan = lambda x: np.where(ok, x, np.nan)  # noqa: E731
        return {"rate": rate, "saturated": ~ok, "tpot_s": nan(tau), "ttft_s": nan(ttft), "e2e_s": nan(e2e),
                "in_flight": nan(in_flight), "decoders": nan(s["decoders"]),
                "decode_step_s": nan(s["decode_step_s"]), "mixed_step_s": nan(s["mixed_step_s"]),
                "tpot_inflation": nan(tau / s["decode_step_s"] - 1), "prefill_share": nan(s["prefill_share"]),
                "ttft_queue_s": nan(residual + wait), "ttft_prefill_s": nan(service),
                "goodput_tokens_per_s": nan(rate * self.G), "goodput_requests_per_s": nan(rate)}

    def budget_saturation(self) -> float:
        """The closed form: every step full, Tb tokens of which Tb (G − 1)/(P + G − 1) are decoders'."""
        P, G, budget = self.P, self.G, self.policy.token_budget
        decoders = budget * (G - 1) / (P + G - 1)
        prefill = budget - decoders
        k = math.ceil(P / max(prefill, 1.0))
        full = (float(self.table.dense(decoders + prefill * k / P, budget)) + decoders * self.decode_attention
                + prefill * float(self.prefill_attention(np.array([k]))[0]) / P)
        return budget / ((P + G - 1) * full)

    def saturation(self) -> float:
        """The largest rate with a steady state (requests/s): candidates between 0 and the budget's closed form."""
        low, high = 0.0, self.budget_saturation()
        for _ in range(SATURATION_ROUNDS):
            candidates = np.linspace(low, high, SATURATION_POINTS + 1)[1:]
            ok = ~self.at_rate(candidates)["saturated"]
            if not ok.any():
                high = candidates[0]
                continue
            last = int(np.flatnonzero(ok).max())
            low = candidates[last]
            if last + 1 == len(candidates):
                break
            high = candidates[last + 1]
        return float(low)

    def at_concurrency(self, concurrency) -> dict:
        """Closed loop: C requests in flight; the rate is where λ·E2E(λ) = C, beyond the KV pool's the rest queue."""
        concurrency = np.asarray(concurrency, dtype=float)
        if concurrency.size == 0 or not np.all(np.isfinite(concurrency) & (concurrency >= 1)):
            raise ValueError(f"concurrency: every value must be a finite number >= 1, got {concurrency.tolist()!r}")
        top = self.saturation()
        rates = np.geomspace(top * 1e-6, top, CURVE_POINTS)
        curve = self.at_rate(rates, closed_loop=True)
        held_max = np.nanmax(np.where(curve["saturated"], np.nan, curve["in_flight"]))
        held = np.minimum(concurrency, min(held_max, self.policy.kv_sequences))
        valid = ~curve["saturated"]
        rate = np.interp(held, curve["in_flight"][valid], rates[valid])
        out = self.at_rate(rate, closed_loop=True)
        queued = concurrency - held
        out["ttft_queue_s"] = out["ttft_queue_s"] + queued / rate
        out["ttft_s"] = out["ttft_s"] + queued / rate
        out["e2e_s"] = out["e2e_s"] + queued / rate
        out.update(concurrency=concurrency, in_flight=held, queued=queued)
        return out


def kv_sequences(d: Deployment, prompt: int, gen: int, usable_bytes: float, block_size: int = 16) -> float:
    """Sequences of P + G tokens (in whole blocks) the KV pool holds after the weights."""
    if not (isinstance(block_size, (int, np.integer)) and block_size >= 1):
        raise ValueError(f"block_size: must be a whole number of tokens >= 1, got {block_size!r}; vLLM uses 16")
    free = usable_bytes - d.weight_bytes
    tokens = math.ceil((prompt + gen) / block_size) * block_size
    per_sequence = float(d.compiled.kv_cache(1.0, tokens, d.precision.kv_bytes))
    return math.floor(free / per_sequence) if free > 0 and per_sequence > 0 else 0.0
