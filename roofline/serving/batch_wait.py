"""TensorRT-LLM's batch waiting: prompts held back for up to T steps, so that more of them run in one step.

A launch may set `batch_wait_timeout_iters: T` and `batch_wait_max_tokens_ratio: r` (TensorRT-LLM's LLM API; both 0
by default, and either 0 turns it off). Each step PyExecutor._schedule (tensorrt_llm/_torch/pyexecutor/py_executor.py)
hands the context requests it scheduled to _waiting_requests, when there are some, some generation requests beside
them and no attention data parallelism. That holds all of them for this step unless its counter has reached T or the
step's tokens, every held prompt's and one a decoder, reach r x max_num_tokens; a step that holds them advances the
counter, a release sets it back to 0. So, with Tb the token budget and m decoders running:
  a hold opens with the first prompt to arrive, and closes T steps later (the decode steps it holds: Θ = T τ_decode),
  or when the prompts held reach k = ⌈(r Tb − m) / P⌉ of length P, after k − 1 more arrivals (k <= 1: never held).
The wait a prompt sees follows (roofline.serving.held_prompts, the clock starting with the hold): Θ where prompts are
rare (the first waits it all), less as more arrive within a hold. The prompts of a hold run in the step that releases
it, beside each other: a prompt's own prefill step carries the others released with it, μ (2 + μ) / (1 + μ) of them on
average for μ = λ L more a hold (1 + Poisson(μ) a hold, seen by a prompt in it: size-biased).
Where it was set: InferenceX's Llama-3.3-70B fp8 TensorRT-LLM scripts on the H200 and B200 (benchmarks/70b_fp8_h200_
trt_slurm.sh at 9596d23d7, L25-28: T 20, r 0.9 for 1024 in and 1024 out below tp 8; roofline.fitting.launches).
Left out: the counter's steps priced at the mean decode step, and a closed loop's requests arriving as Poisson ones
(the rows' clients draw their lengths at random, roofline.serving.steady_loop).
"""
from __future__ import annotations

import math

import numpy as np

from ..sharding import whole
from .held_prompts import hold_seconds


def check_batch_wait(steps, ratio) -> None:
    """A clear error for a batch wait that is not one: T a whole number >= 0, r in [0, 1]."""
    whole("batch_wait_steps", steps, low=0, note=" steps",
          fix="TensorRT-LLM's batch_wait_timeout_iters, or 0 (off)")
    if isinstance(ratio, bool) or not (isinstance(ratio, (int, float)) and 0 <= ratio <= 1):
        raise ValueError(f"batch_wait_ratio: must be in [0, 1], got {ratio!r}; fix: TensorRT-LLM's "
                         "batch_wait_max_tokens_ratio, or 0 (off)")


def prompts_to_release(ratio: float, budget: int, prompt: float, decoders) -> np.ndarray:
    """k: the held prompts of `prompt` tokens whose tokens, with one a decoder, reach r x the budget (at least 1)."""
    return np.maximum(np.ceil((ratio * budget - np.asarray(decoders, dtype=float)) / prompt), 1.0)


def batch_wait(rate, steps: int, ratio: float, budget: int, prompt: float, decode_step_s, decoders,
               ranks: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(mean seconds a prompt is held, the prompts released beside it) at `rate` prompts a second, `decoders` running
    in decode steps of `decode_step_s` (the module docstring); (0, 0) where the launch sets no wait, where nothing
    decodes, or under attention data parallelism (`ranks` > 1: its own rule, roofline.serving.attention_dp)."""
    rate, decode_step_s, decoders = np.broadcast_arrays(*(np.asarray(x, dtype=float)
                                                          for x in (rate, decode_step_s, decoders)))
    if steps <= 0 or ratio <= 0 or ranks > 1:
        return np.zeros(rate.shape), np.zeros(rate.shape)
    more = prompts_to_release(ratio, budget, prompt, decoders) - 1
    wait, length = hold_seconds(rate, more, steps * decode_step_s)
    mu = rate * length
    held = decoders >= 1
    return np.where(held, wait, 0.0), np.where(held, mu * (2 + mu) / (1 + mu), 0.0)


class BatchWaitGate:
    """The simulator's copy of the rule (roofline.serving.batching.simulate_continuous): each step, whether the prompts
    waiting for a chunk run in it."""

    def __init__(self, steps: int = 0, ratio: float = 0.0, budget: float = math.inf, ranks: int = 1):
        check_batch_wait(steps, ratio)
        self.steps, self.threshold, self.waited = steps, ratio * budget, 0
        self.on = steps > 0 and ratio > 0 and ranks == 1

    def releases(self, prompt_tokens: list, decoders: int) -> bool:
        """Whether a step with prompts of `prompt_tokens` tokens to run and `decoders` decoding runs them: always
        without prompts or decoders; else when the counter has reached T or the tokens r x the budget."""
        if not self.on or not prompt_tokens or decoders == 0:
            return True
        if self.waited >= self.steps or sum(prompt_tokens) + decoders >= self.threshold:
            self.waited = 0
            return True
        self.waited += 1
        return False
