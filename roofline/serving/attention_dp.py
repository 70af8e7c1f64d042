"""How an engine places prompts on attention data-parallel ranks, and what balancing them costs a prompt's TTFT.

Under attention data parallelism (Deployment.ep = e ranks) a prompt's prefill runs on the one rank that holds its
sequence, and every rank waits for the slowest at each MoE layer's all-to-all (Deployment.busiest_rank_sequences).
TensorRT-LLM places new requests on the ranks with the fewest active tokens, none above ⌈(active + new) / e⌉
requests (ExecutorRequestQueue._schedule_attention_dp_requests / _balance_requests_across_ranks,
tensorrt_llm/_torch/pyexecutor/), then each rank schedules its own. Two rules follow, chosen by the engine's
`scheduler.attention_dp_balance_steps` (roofline.scheduler):
  0 (absent; TensorRT-LLM's default, AttentionDpConfig.enable_balance = False in tensorrt_llm/llmapi/llm_args.py):
      each rank runs its prompts as they come, so a step with m < e chunks holds one whole chunk on its busiest rank:
      the chunks' rank excess (roofline.serving.mixed_step.rank_excess_seconds).
  T > 0 (enable_balance with timeout_iters = T; PyExecutor._balance_adp_requests): a rank's context requests are held
      until every rank has one, or until the waiting counter reaches T; then they run together. A released step's
      chunks are the even share, dense rows, attention and all-to-all alike (`chunk_share`; the mixed step and the load
      model price a step's mean prefill at it; a prompt's own last chunk runs beside the e − 1 others released with it,
      `released_beside`), and a prompt's TTFT gains its wait:
        the counter advances every step in which some rank lacks a context request, with or without prompts, and
        restarts at 0 on every release: a clock of period Θ = T τ̄ that the first prompt after a release meets at
        phase X mod Θ, X exponential of rate λ (the arrivals'), so it fires R later, P(R > t) = (1 − e^{−λ(Θ − t)}) /
        (1 − e^{−λΘ}) on [0, Θ]. A rank holding a prompt holds its P tokens more, so the placement sends the next
        prompts to the others: e consecutive prompts fill the e ranks, and the prompts close after A(t) = e − 1 more
        arrivals (Poisson, p_j(λt) of j by t) or at R. Per prompt (renewal reward: held prompt-seconds over prompts),
          wait = ∫_0^Θ P(R > t) Σ_{j<e−1} (j + 1) p_j(λt) dt  /  (1 + λ ∫_0^Θ P(R > t) Σ_{j<e−1} p_j(λt) dt)
        which is (e − 1) / 2λ when T is long (the fill: the first waits for e − 1 more, the last for none), Θ / 2 when
        prompts are rare (the clock's half period), 0 without data parallelism. The source releases at once while some
        rank holds no decoder: held only with at least e decoders running (the placement splits them evenly).
Left out: batching_wait_iters (the rows' launch configs set 0; a rank with fewer context requests waits that many more
steps); a step released by the timeout with some ranks still empty (priced at the even share too); a closed loop's
cohorts (prompts that return together fill the ranks at once and wait less: the wait takes Poisson arrivals, as the
load model's steady state does); and a release larger than the budget (TensorRT-LLM's max_num_tokens is each rank's:
the simulator's gate holds what a step leaves over until the next release).
"""
from __future__ import annotations

import numpy as np

from ..deployment import Deployment
from .held_prompts import hold_seconds


def balances(d: Deployment) -> bool:
    """Whether the engine holds prompts until every attention data-parallel rank has one (the module docstring)."""
    return d.ep > 1 and d.engine.scheduler.attention_dp_balance_steps > 0


def chunk_share(d: Deployment) -> float:
    """The share of a step's prefill chunks' attention that its busiest rank runs: 1/e where the engine balances (the
    chunks released together, one a rank: the even share, as the dense rows' and the decoders'), else 1 (each chunk's
    whole attention, as on the one rank that holds it; roofline.serving.mixed_step)."""
    return 1 / d.ep if balances(d) else 1.0


def released_beside(d: Deployment) -> int:
    """Prompts a balanced release runs beside each prompt (one a rank: e − 1), 0 where the engine does not balance."""
    return d.ep - 1 if balances(d) else 0


def balance_wait_seconds(rate, ranks: int, timeout_steps: int, step_s, decoders=np.inf) -> np.ndarray:
    """Mean seconds a prompt is held until the `ranks` ranks each hold one or the engine's waiting counter reaches
    `timeout_steps` steps of `step_s` seconds, at `rate` prompts a second, `decoders` running (fewer than one a rank:
    not held); the module docstring derives it."""
    rate, step_s, decoders = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (rate, step_s, decoders)))
    if ranks <= 1 or timeout_steps <= 0:
        return np.zeros(rate.shape)
    # a hold closes when e − 1 more prompts have come, or when the engine's counter, running apart from them, fires
    wait, _ = hold_seconds(rate, ranks - 1, timeout_steps * step_s, clock_phase_random=True)
    return np.where(decoders >= ranks, wait, 0.0)


class BalanceGate:
    """The simulator's copy of the rule (roofline.serving.batching.simulate_continuous): each admitted request on the
    rank running the fewest (ExecutorRequestQueue places by active tokens under a ⌈(active + new) / e⌉ cap: the same
    split for requests alike), and PyExecutor._balance_adp_requests deciding each step whether the prompts run."""

    def __init__(self, ranks: int, timeout_steps: int):
        self.ranks, self.timeout_steps, self.waited = ranks, timeout_steps, 0
        self.rank_of: dict = {}

    def place(self, request: int, running) -> None:
        """Put an admitted request on the rank with the fewest of `running` (the lowest such rank)."""
        load = np.bincount([self.rank_of[r] for r in running if r in self.rank_of], minlength=self.ranks)
        self.rank_of[request] = int(np.argmin(load))

    def releases(self, prompting, decoding) -> bool:
        """Whether this step runs the prompts of `prompting` beside `decoding`: every rank holds a prompt; or a rank
        holds no decoder; or the counter, advanced every step short of the first, reaches the timeout."""
        if self.ranks <= 1 or self.timeout_steps <= 0:
            return True
        if len({self.rank_of[r] for r in prompting}) == self.ranks:
            self.waited = 0
            return True
        self.waited += 1
        if self.waited >= self.timeout_steps or len({self.rank_of[r] for r in decoding}) < self.ranks:
            self.waited = 0
            return True
        return False
