"""The steady state of a prefill-first server (SGLang's default scheduler, roofline.scheduler.PREFILL_FIRST): a step
with prompts waiting carries prompt tokens alone, up to the chunk Tc; the running decoders pause for it; decode steps
carry the decoders alone.

Open loop, rate λ, prompt P, output G, k = ⌈P / Tc⌉ prefill steps a lone prompt, τ_d(m) a decode step of m
decoders, τ_p(q) a prefill step of q prompt tokens (each priced by the one pricer, roofline.serving.mixed_step):
  prefill runs     a run of prefill steps starts after any step in which a request arrived: after a decode step
                   with a_d = 1 − e^(−λ τ_d); a run is k steps, followed by another with a_r = 1 − e^(−λ k τ_p)
                   (a two-state chain), so a share ψ = a_d / (1 − a_r + a_d) of the blocks are runs and
                   φ = kψ / (kψ + 1 − ψ) of the steps prefill; never fewer than the chunk allows, λ τ̄ P / Tc
  prompt tokens    q = min(λ τ̄ P / φ, Tc) a prefill step (every prompt's P tokens over φ / τ̄ prefill steps a second)
  decoders         m = λ (G − 1) τ̄ / (1 − φ) (Little: a decoder gets a token every τ̄ / (1 − φ))
  mean step        τ̄ = (1 − φ) τ_d(m) + φ τ_p(q)                                          solved for τ̄
  TPOT             τ_d(m + D) + φ / (1 − φ) · (m + D − 1) / m · τ_p(q): the steps a running request sees, weighted
                   by their decoders. Each arrival pauses its neighbours for its prompt (P τ_p / q) and lengthens
                   their decode steps (b a decoder), which brings more arrivals: the mixed steps' cluster process, branching
                   β = λ (P τ_p / q + b (G − 1) / 2), D = 1 / (1 − β)². A request sees m + D decoders, and the prefill
                   pauses in proportion to the m + D − 1 beside it (size-biased)
  TTFT             residual of the step in progress E[τ²] / 2τ̄ (open loop) + the budget's wait (the prompt tokens ahead
                   past one chunk, M/D/1 in full steps: LoadModel.budget_wait with the whole chunk as room) + its own
                   k steps, the last beside the prompts that arrived in the same step (λ E[τ²] / τ̄ of them)
                   + the engine's per-request cost.
Closed loop of C identical requests (how the serving rows run): prefill first keeps them in one cohort. The C prompts
that arrive together run first, W = ⌈C P / Tc⌉ full prefill steps, member i's first token at the end of step
⌈i P / Tc⌉; all then decode together, G − 1 steps of C decoders, end in the same step and are sent again at once.
So every wave is the first: TTFT_i = request cost + the steps up to its own, E2E = request cost + W prefill steps +
(G − 1) τ_d(C) for all, TPOT_i = (E2E − TTFT_i) / (G − 1), rate = C / E2E (Little). Stepped, not a closed form
(W + 1 prices). Past the KV pool or the running cap the rest queue, TTFT + (C − held) / rate, as LoadModel's.
Output lengths that differ (LoadModel's lengths_vary: a benchmark's `--random-range-ratio` r < 1 draws each in
[r G, G]) untie the cohort: two members end (1 − r) G / 3 steps apart on average, far more than a prompt's prefill,
are sent again apart, and arrive as an open loop's do (roofline.serving.steady_loop: the open loop at λ = C / E2E).
InferenceX's DeepSeek-R1 on H200 under SGLang, 7373 / 922 tokens (r = 0.8): measured TTFT 0.45 s at C 4 and 2.28 s
at C 64, the cohort 0.91 s and 6.36 s (every prompt of the wave prefilled before the first decodes).
Left out: the overlap scheduler's CPU work hidden behind the GPU, --enable-mixed-chunk, prefix caching, the
conservative admission by new_token_ratio (the KV pool is the only memory limit here).
"""
from __future__ import annotations

import math

import numpy as np

from ..scheduler import PREFILL_FIRST
from .steady_loop import steady_closed_loop


class PrefillFirstSteps:
    """The prefill-first step policy of a roofline.serving.load.LoadModel (its workload, policy and step table)."""
    carrying_step = "prefill_step_s"  # the step that carries prompt tokens, as `steps` names it

    def __init__(self, model):
        self.model = model
        # the step table's reach: the chunk, or a decode step of the running cap
        self.largest_step_tokens = max(model.policy.token_budget, model.policy.max_batch)
        self.budget_tokens_per_request = model.P  # only prompts go through the chunk; decode steps have their own

    def prefill_step(self, tokens, prompts):
        """Seconds of a prefill step of `tokens` prompt tokens from `prompts` prompts (their chunks' attention at the
        prompt's mean share a token)."""
        model = self.model
        chunks = np.array([math.ceil(model.P / model.policy.token_budget)])
        per_token = model.prefill_attention(chunks)[0] / model.P
        return (model.table.dense(np.maximum(prompts, 1.0), tokens) + tokens * per_token
                + model.rank_excess(tokens, prompts))

    def decode_step(self, decoders):
        """Seconds of a decode step of `decoders` decoders at the mean context."""
        model = self.model
        return model.table.dense(decoders, decoders) + model.decoders_attention(decoders)

    def mean_step(self, rate, tau) -> np.ndarray:
        """The fixed point's map alone: the mean step when the mean step is `tau`."""
        return self.steps(rate, tau)["step_s"]

    def steps(self, rate, tau) -> dict:
        """The steps at open-loop rates `rate` when the mean step is `tau` (the module docstring's fixed point)."""
        model = self.model
        P, G, chunk = model.P, model.G, model.policy.token_budget
        k = math.ceil(P / chunk)
        fluid = np.minimum(rate * tau * P / chunk, 1.0)
        # the chain's shares need the steps' lengths, which need the shares: eight rounds from the fluid share settle
        # them (sixteen move TPOT < 0.1% against the simulator's 5%)
        phi = fluid
        for _ in range(8):
            tokens = np.minimum(rate * tau * P / np.maximum(phi, 1e-300), chunk)
            prefill = self.prefill_step(tokens, tokens / P)
            m = rate * (G - 1) * tau / np.maximum(1 - phi, 1e-12)
            with np.errstate(divide="ignore", invalid="ignore"):
                busy = np.where(m > 1e-12, m / -np.expm1(-m), 1.0)  # a decode step has one decoder at least
            decode = self.decode_step(busy)
            start = -np.expm1(-rate * decode)
            again = -np.expm1(-rate * k * prefill)
            runs = start / (1 - again + start)
            phi = np.maximum(k * runs / (k * runs + 1 - runs), fluid)
        mean = (1 - phi) * decode + phi * prefill
        with np.errstate(divide="ignore", invalid="ignore"):
            pauses = np.where(phi < 1, phi / (1 - phi), np.inf)
        # What a running request sees, weighted by the decoders: each arrival pauses its neighbours for its prompt's
        # prefill time and lengthens their decode steps, which brings more arrivals (MixedSteps.steps' cluster process)
        slope = self.decode_step(busy + 1) - decode
        branching = rate * (P * prefill / tokens + slope * (G - 1) / 2)
        dispersion = 1 / np.square(1 - np.minimum(branching, 1 - 1e-9))
        dispersion = np.minimum(dispersion, np.maximum(model.policy.max_batch - m, 1.0))
        seen = self.decode_step(m + dispersion)
        with np.errstate(divide="ignore", invalid="ignore"):
            pauses_seen = pauses * np.where(m > 1e-12, (m + dispersion - 1) / m, 1.0)
        return {"step_s": mean, "decode_step_s": seen, "prefill_step_s": prefill, "tpot_s": seen + pauses_seen * prefill,
                "decoders": m + dispersion, "prefill_share": phi, "prefill_tokens_per_step": tokens, "chunks": k,
                "second_moment": (1 - phi) * decode ** 2 + phi * prefill ** 2,
                "batch_wait_s": model.batch_wait(rate, seen, m + dispersion)[0],
                "feasible": (fluid < 1) & (m <= model.policy.max_batch)}

    def own_prefill(self, rate, s: dict):
        """Seconds of a prompt's own k prefill steps: k − 1 full chunks, the last beside the prompts that arrived in the
        step it arrived in (size-biased: λ E[τ²] / τ̄ of them)."""
        model = self.model
        P, chunk = model.P, model.policy.token_budget
        k = s["chunks"]
        beside = rate * s["second_moment"] / s["step_s"] * P
        last = np.minimum(P - (k - 1) * chunk + beside, chunk)
        return (k - 1) * self.prefill_step(float(chunk), chunk / P) + self.prefill_step(last, last / P)

    def budget_wait(self, rate, s: dict):
        """LoadModel.budget_wait with the whole chunk as each prefill step's room."""
        model = self.model
        full = self.prefill_step(float(model.policy.token_budget), model.policy.token_budget / model.P)
        return model.budget_wait(rate, {"chunk_room": float(model.policy.token_budget), "full_step_s": full})

    def budget_saturation(self) -> float:
        """Requests/s with the server flat out: every prompt in full prefill steps, the decode steps at the running cap
        (or the KV pool's sequences): λ = B / (B P / Tc · τ_p(Tc) + (G − 1) τ_d(B))."""
        model = self.model
        chunk = model.policy.token_budget
        batch = float(min(model.policy.max_batch, model.policy.kv_sequences))
        full = float(self.prefill_step(float(chunk), chunk / model.P))
        return batch / (batch * model.P / chunk * full + (model.G - 1) * float(self.decode_step(batch)))

    def cohort(self, clients: np.ndarray) -> dict:
        """The closed loop of `clients` (per replica, rounded to whole requests) as one cohort (the module docstring):
        mean TTFT, TPOT and E2E, and the rate; `held` requests run, the rest wait in the queue."""
        model = self.model
        P, G, chunk = model.P, model.G, model.policy.token_budget
        cap = min(model.policy.max_batch, model.policy.kv_sequences)
        out = {name: np.empty(np.shape(clients)) for name in ("ttft_s", "tpot_s", "e2e_s", "held", "prefill_s")}
        for i, c in enumerate(np.ravel(clients)):
            held = max(int(round(min(c, cap))), 1)
            total = held * P
            ends = np.minimum(np.arange(1, math.ceil(total / chunk) + 1) * chunk, total)
            tokens = np.diff(ends, prepend=0.0)
            touched = np.ceil(ends / P) - np.floor((ends - tokens) / P)  # prompts each step runs a piece of
            done = np.cumsum(self.prefill_step(tokens, touched))
            firsts = done[np.ceil(np.arange(1, held + 1) * P / chunk).astype(int) - 1]
            decoding = (G - 1) * float(self.decode_step(float(held)))
            overhead = model.request_overhead_s
            e2e = overhead + done[-1] + decoding
            ttft = overhead + firsts
            for name, value in (("ttft_s", ttft.mean()), ("e2e_s", e2e), ("held", held), ("prefill_s", done[-1]),
                                ("tpot_s", np.mean(e2e - ttft) / max(G - 1, 1))):
                out[name].flat[i] = value
        return out

    def closed_loop(self, concurrency: np.ndarray, requests=None) -> dict:
        """LoadModel.at_concurrency's figures under prefill first: the cohort, the requests past it queued (a run's mean
        TTFT, `requests` given, is the cohort's: its first wave adds nothing); out of step where output lengths vary."""
        model = self.model
        if model.lengths_vary:
            return steady_closed_loop(model, concurrency, requests)
        wave = self.cohort(concurrency)
        held = wave["held"]
        queued = np.maximum(concurrency - held, 0.0)  # past the KV pool's (or the batch cap's) sequences: they queue
        # Little with the front end shared (roofline.serving.front_end): λ (E + F / (1 − λ w)) = held, F its work before
        # a first token, w a request's; the root with λ w < 1, in the form that holds at w = 0 (λ = held / (E + F))
        cohort, front_end = wave["e2e_s"], model.front_end
        work, first = float(front_end.work(model.G)), front_end.first_token_work(held)
        both = cohort + first + held * work
        rate = 2 * held / (both + np.sqrt(np.maximum(both ** 2 - 4 * cohort * work * held, 0.0)))
        front = first / (1 - rate * work)
        wait = queued / rate
        decode = self.decode_step(held)
        prefill_steps = np.ceil(held * model.P / model.policy.token_budget)
        full = self.prefill_step(float(model.policy.token_budget), model.policy.token_budget / model.P)
        out = {"rate": rate, "saturated": np.zeros(concurrency.shape, dtype=bool), "tpot_s": wave["tpot_s"],
               "ttft_s": wave["ttft_s"] + front + wait, "e2e_s": wave["e2e_s"] + front + wait, "in_flight": held,
               "decoders": held,
               "decode_step_s": decode, "mixed_step_s": np.full(concurrency.shape, full),
               "tpot_inflation": wave["tpot_s"] / decode - 1, "step_s": wave["e2e_s"] / (model.G - 1 + prefill_steps),
               "prefill_share": prefill_steps / (model.G - 1 + prefill_steps), "ttft_queue_s": wait,
               "ttft_front_end_s": front,
               "ttft_prefill_s": wave["ttft_s"] - model.request_overhead_s,
               "ttft_batch_wait_s": np.zeros(concurrency.shape),  # prompts run as soon as a step is free: no hold
               "goodput_tokens_per_s": rate * model.G, "goodput_requests_per_s": rate, "concurrency": concurrency,
               "queued": queued, "ttft_steady_s": wave["ttft_s"] + front + wait}
        if requests is not None:
            out["ttft_first_wave_s"] = np.zeros(concurrency.shape)
        return out

    def terms(self, rate: np.ndarray, tau: np.ndarray, s: dict) -> dict:
        """The named terms at one rate for `--explain` (`s`: steps at the solved mean step `tau`)."""
        model = self.model
        out = {name: float(np.ravel(value)[0]) for name, value in s.items() if name != "feasible"}
        out.update(step_policy=PREFILL_FIRST, rate=float(rate[0]), prompt=model.P, gen=model.G,
                   token_budget=model.policy.token_budget, residual_s=out["second_moment"] / (2 * out["step_s"]),
                   budget_wait_s=float(np.ravel(self.budget_wait(rate, s))[0]),
                   own_prefill_s=float(np.ravel(self.own_prefill(rate, s))[0]),
                   request_overhead_s=model.request_overhead_s, budget_saturation=self.budget_saturation(),
                   decoders_mean=out["decoders"] - 1)
        return out
