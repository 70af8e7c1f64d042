"""The steady state of a mixed-step server (vLLM's and TensorRT-LLM's scheduler, roofline.scheduler.MIXED): every
step carries one token of each running decoder plus up to the token budget (vLLM max_num_batched_tokens,
TensorRT-LLM max_num_tokens) of prefill chunks, priced as one mixed step (roofline.serving.mixed_step).

Open loop, rate λ, prompt P, output G, budget Tb:
  decoders a step (Little)          m = λ (G − 1) τ̄   (a step has at least one: m / (1 − e^−m))
  chunk room                        c = Tb − m,  k = ⌈P / c⌉ chunks a prompt
  prefill tokens per step           π = λ τ̄ P
  steps carrying prefill            φ = max(1 − exp(−λ k τ̄), π / c),  each with q = π / φ prefill tokens
  mean step                         τ̄ = (1 − φ) τ_decode(m) + φ τ_mixed(m, q)          solved for τ̄
  TPOT, the steps a running request sees, weighted by their decoders: each arrival lengthens its
       neighbours' steps (k chunks, Δ = τ_mixed − τ_decode each; b a step per decoder), which brings more
       arrivals: a cluster process, branching ratio β = λ (k Δ + b (G − 1) / 2), counts dispersed by
       D = 1 / (1 − β)². A request sees m + D decoders and chunk steps φ (m + D − 1) / m of the time.
  TTFT's own part: waiting for the budget (the prefill tokens ahead, M/D/1, spilling into later full steps) + the
       prompt's k chunk steps (k − 1 full, then the rest beside those who arrived in its step).
TPOT's inflation is TPOT / τ_decode − 1: the prefill chunks riding in the decoders' steps.
Checked against the simulator (roofline.serving.batching) running the same scheduler: within 3% at 0.2-0.8
of saturation (tests/test_load.py); near saturation (0.95) the dispersion diverges and the model does not hold.
Budget saturation: λ_max = Tb / ((P + G − 1) τ_full), every step Tb tokens of which Tb (G − 1)/(P + G − 1) decode.
Closed loop: C requests in flight, a new one as one ends: identical requests stagger, so below saturation no
residual and no budget wait (TTFT = own chunks + request cost); past the budget's saturation or the KV pool's
sequences the rest queue and TTFT grows by (C − held) / λ (the closed loop's asymptotic bound). A run of N
requests adds its first wave, C sent at t = 0 (roofline.serving.first_wave). Outputs that vary (LoadModel's
lengths_vary) arrive at random instead: the open loop's residual and budget wait at λ = C / E2E
(roofline.serving.steady_loop).
"""
from __future__ import annotations

import math

import numpy as np

from .attention_dp import released_beside
from .steady_loop import steady_closed_loop


class MixedSteps:
    """The mixed step policy of a roofline.serving.load.LoadModel (its workload, policy and step table)."""
    carrying_step = "mixed_step_s"  # the step that carries prompt tokens, as `steps` names it

    def __init__(self, model):
        self.model = model
        self.largest_step_tokens = model.policy.token_budget  # the step table's reach
        # the tokens a request puts through the budget: its prompt and every decode token but the first
        self.budget_tokens_per_request = model.P + model.G - 1

    def parts(self, n, rate, tau, companions=None, own: bool = True) -> dict:
        """The steps at `n` decoders when the mean step is `tau`: decode-only, carrying prefill, and a request's own
        (its last chunk beside `companions` prefill tokens of the others; default the mean a step)."""
        model = self.model
        P, budget = model.P, model.policy.token_budget
        room = np.maximum(budget - n, 1.0)
        k = np.ceil(P / room)
        prefill_tokens = rate * tau * P
        # Poisson chunk starts a step, but never fewer steps than the budget can carry the prefill tokens in
        phi = np.maximum(-np.expm1(-rate * k * tau), np.minimum(prefill_tokens / room, 1.0))
        q = np.where(phi > 0, np.minimum(prefill_tokens / np.maximum(phi, 1e-300), room), P / k)
        per_prompt = model.prefill_attention(k) / P

        def carrying(tokens, prompts):  # tokens of prefill from `prompts` prompts beside the n decoders
            return (model.table.dense(n + prompts, n + tokens) + model.decoders_attention(n) + tokens * per_prompt
                    + model.rank_excess(tokens, prompts))

        out = {"decode": carrying(0.0, 0.0), "mixed": carrying(q, np.maximum(q * k / P, 1.0)), "chunks": k,
               "room": room, "phi": phi, "q": q, "prefill_tokens": prefill_tokens}
        if own:  # a request's own prefill alone: k - 1 full chunks, then the rest beside the others' demand
            rest = np.minimum(P - (k - 1) * room + (prefill_tokens if companions is None else companions), room)
            out.update(own=(k - 1) * carrying(room, 1.0) + carrying(rest, np.maximum(rest * k / P, 1.0)),
                       full=carrying(room, np.maximum(room / P, 1.0)))
        return out

    def mean_step(self, rate, tau) -> np.ndarray:
        """The fixed point's map alone: the mean step when the mean step is `tau`."""
        m = rate * (self.model.G - 1) * tau
        with np.errstate(divide="ignore", invalid="ignore"):
            busy = np.where(m > 1e-12, m / -np.expm1(-m), 1.0)
        at = self.parts(busy, rate, tau, own=False)
        return (1 - at["phi"]) * at["decode"] + at["phi"] * at["mixed"]

    def steps(self, rate, tau) -> dict:
        """The mean step when the mean step is `tau` (the fixed point's map), and what a running request sees."""
        model = self.model
        G, policy = model.G, model.policy
        m = rate * (G - 1) * tau  # decoders a step, averaged over time (Little)
        with np.errstate(divide="ignore", invalid="ignore"):
            busy = np.where(m > 1e-12, m / -np.expm1(-m), 1.0)  # a step has at least one: E[n | n >= 1], Poisson
        at = self.parts(busy, rate, tau)
        phi = at["phi"]
        mean = (1 - phi) * at["decode"] + phi * at["mixed"]
        # What a running request sees: steps weighted by their decoders. Each arrival lengthens the G - 1
        # steps of the requests decoding beside it (its chunks by Δ each, its attention by b a step), which
        # brings more arrivals: a cluster process of branching ratio β, whose counts have variance
        # D = 1 / (1 − β)² times their mean. A request sees E[n²]/E[n] = m + D decoders, and a chunk step
        # m + D − 1 of them (size-biased).
        slope = self.parts(busy + 1, rate, tau, own=False)["decode"] - at["decode"]
        branching = rate * (at["chunks"] * (at["mixed"] - at["decode"]) + slope * (G - 1) / 2)
        dispersion = 1 / np.square(1 - np.minimum(branching, 1 - 1e-9))
        # (never more decoders than a step holds: the batch cap, or the budget beside the prefill)
        dispersion = np.minimum(dispersion, np.maximum(np.minimum(policy.max_batch, policy.token_budget
                                                                  - at["prefill_tokens"]) - m, 1.0))
        seen = self.parts(m + dispersion, rate, tau, own=False)
        # A request arrives in a step picked by its length (E[τ²]/τ̄ long); those arriving with it share its chunk.
        # (whole prompts, k = 1, come a Poisson number a chunk step, each adding its own share of the step;
        # chunks of longer prompts fill the budget instead)
        prompts = np.maximum(at["q"] / model.P, 1.0)
        spread = np.where(at["chunks"] == 1, (at["mixed"] - at["decode"]) ** 2 / prompts, 0.0)
        second_moment = (1 - phi) * at["decode"] ** 2 + phi * (at["mixed"] ** 2 + spread)
        # (where the engine balances prompts over attention data-parallel ranks, its own chunk runs beside the e − 1
        # released with it: roofline.serving.attention_dp; where the launch holds prompts to run together, beside
        # those of its hold: roofline.serving.batch_wait)
        held_wait, held_beside = model.batch_wait(rate, seen["decode"], m + dispersion)
        companions = np.maximum(np.maximum(rate * second_moment / tau, released_beside(model.d)), held_beside) * model.P
        beside = self.parts(m + dispersion - 1, rate, tau, companions)
        with np.errstate(divide="ignore", invalid="ignore"):
            phi_seen = np.minimum(np.where(m > 1e-12, phi * (m + dispersion - 1) / m, phi), 1.0)
        return {"step_s": mean, "tpot_s": (1 - phi_seen) * seen["decode"] + phi_seen * seen["mixed"],
                "decode_step_s": seen["decode"], "mixed_step_s": beside["mixed"], "own_prefill_s": beside["own"],
                "full_step_s": beside["full"], "decoders": m + dispersion, "chunks": at["chunks"],
                "chunk_room": at["room"], "prefill_share": phi, "prefill_tokens_per_step": at["prefill_tokens"],
                "second_moment": second_moment, "batch_wait_s": held_wait,
                "feasible": (at["prefill_tokens"] + m <= policy.token_budget * (1 + 1e-9)) & (m <= policy.max_batch)}

    def own_prefill(self, rate, s: dict) -> np.ndarray:
        """Seconds of a prompt's own k chunk steps (`s`: steps at the solved mean step)."""
        return s["own_prefill_s"]

    def budget_wait(self, rate, s: dict) -> np.ndarray:
        """Seconds a prompt waits for the budget: LoadModel.budget_wait in the chunk room beside the decoders."""
        return self.model.budget_wait(rate, s)

    def terms(self, rate: np.ndarray, tau: np.ndarray, s: dict) -> dict:
        """The closed forms' named terms at one rate (`s`: steps at the solved mean step `tau`), for `--explain`."""
        model = self.model
        P, G, budget = model.P, model.G, model.policy.token_budget
        m = float(rate[0] * (G - 1) * tau[0])
        decoders = budget * (G - 1) / (P + G - 1)
        out = {name: float(np.ravel(value)[0]) for name, value in s.items() if name != "feasible"}
        residual = out["second_moment"] / (2 * out["step_s"])
        out.update(rate=float(rate[0]), decoders_mean=m, residual_s=residual,
                   budget_wait_s=float(self.budget_wait(rate, s)[0]), request_overhead_s=model.request_overhead_s,
                   scheduled_ahead_s=model.overlap_steps * out["step_s"],
                   full_decoders=decoders, full_prefill=budget - decoders,
                   budget_saturation=self.budget_saturation(), prompt=P, gen=G, token_budget=budget)
        return out

    def budget_saturation(self) -> float:
        """The closed form: every step full, Tb tokens of which Tb (G − 1)/(P + G − 1) are decoders'."""
        model = self.model
        P, G, budget = model.P, model.G, model.policy.token_budget
        decoders = budget * (G - 1) / (P + G - 1)
        prefill = budget - decoders
        k = math.ceil(P / max(prefill, 1.0))
        full = (float(model.table.dense(decoders + prefill * k / P, budget)) + float(model.decoders_attention(decoders))
                + prefill * float(model.prefill_attention(np.array([k]))[0]) / P
                + float(model.rank_excess(prefill, prefill * k / P)))
        return budget / ((P + G - 1) * full)

    def closed_loop(self, concurrency: np.ndarray, requests=None) -> dict:
        """LoadModel.at_concurrency's figures: identical requests stagger (each prompt's chunks ride beside the others'
        decode steps), varied ones arrive at random (roofline.serving.steady_loop)."""
        return steady_closed_loop(self.model, concurrency, requests)
