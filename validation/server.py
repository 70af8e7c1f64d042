"""A real continuous-batching server: the validation decoder run one mixed step at a time, on the wall clock.

The scheduler is the simulator's (roofline.serving.batching.simulate_continuous, without KV limits): FCFS
admission into `max_batch` cache slots; each step carries one decode token of every running sequence that
has finished its prompt, plus up to `token_budget - decoders` prefill-chunk tokens, oldest request first; the
last chunk of a prompt yields the request's first token. As selective batching runs it (Orca): the
projections, MLP and head run once over the flattened tokens of the step; attention runs per sequence over
its own rows of a static (L, slots, K, capacity, H) cache. Greedy sampling, no end-of-sequence: a request
generates exactly its output length. Left out: KV blocks and preemption (each slot holds a whole request).
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from roofline.serving.batching import Workload

from .decoder import Decoder, grouped_decode_attention
from .functional import prefill_attention, rms_norm, rotate


@dataclass(frozen=True)
class Segment:
    """One sequence's share of a step: its new tokens, written to its cache slot from position `start`."""
    slot: int
    tokens: torch.Tensor  # (t,) token ids
    start: int


def attend(model: Decoder, layer: int, q, k, v, segments: list[Segment]) -> torch.Tensor:
    """q (1, N, T, H), k and v (1, K, T, H) of the step's flattened tokens -> (1, N, T, H): each segment's
    keys go to its own cache rows and its queries read only them (a decode token: the grouped kernel)."""
    attention = model.layers[layer].attention
    K, G, H = attention.K, attention.N // attention.K, attention.H
    outs, offset = [], 0
    for s in segments:
        t, end = len(s.tokens), s.start + len(s.tokens)
        keys, values = model.k_cache[layer, s.slot:s.slot + 1], model.v_cache[layer, s.slot:s.slot + 1]
        keys[:, :, s.start:end] = k[:, :, offset:offset + t]
        values[:, :, s.start:end] = v[:, :, offset:offset + t]
        query = q[:, :, offset:offset + t]
        if t == 1:
            out = grouped_decode_attention(query.reshape(1, K, G, H), keys[:, :, :end], values[:, :, :end])
            outs.append(out.reshape(1, K * G, 1, H))
        else:
            outs.append(prefill_attention(query, keys[:, :, :end], values[:, :, :end], s.start))
        offset += t
    return torch.cat(outs, dim=2)


def mixed_step(model: Decoder, segments: list[Segment]) -> torch.Tensor:
    """The next token (greedy) of every segment, after one forward over all their tokens."""
    tokens = torch.cat([s.tokens for s in segments])
    positions = torch.cat([torch.arange(s.start, s.start + len(s.tokens)) for s in segments]).to(tokens.device)
    cos, sin = model.cos[positions], model.sin[positions]  # (T, H): each token at its own position
    T = len(tokens)
    x = model.embed(tokens)[None]  # (1, T, D)
    for i, layer in enumerate(model.layers):
        a = layer.attention
        q, k, v = a.qkv(rms_norm(x, layer.attn_norm, model.eps)).split((a.N * a.H, a.K * a.H, a.K * a.H), dim=-1)
        q = rotate(q.view(1, T, a.N, a.H).transpose(1, 2), cos, sin)
        k = rotate(k.view(1, T, a.K, a.H).transpose(1, 2), cos, sin)
        out = attend(model, i, q, k, v.view(1, T, a.K, a.H).transpose(1, 2), segments)
        x = x + a.o(out.transpose(1, 2).reshape(1, T, a.N * a.H))
        x = x + layer.mlp(rms_norm(x, layer.mlp_norm, model.eps))
    last = torch.tensor(np.cumsum([len(s.tokens) for s in segments]) - 1, device=tokens.device)
    return model.lm_head(rms_norm(x[0, last], model.final_norm, model.eps)).argmax(-1)


@dataclass
class Served:
    """One request: its arrival and the wall-clock time of each generated token, both since the run began."""
    request: int
    arrival_s: float
    token_s: list = field(default_factory=list)  # wall-clock seconds since the run began, per output token
    tokens: list = field(default_factory=list)  # the generated token ids

    @property
    def ttft_s(self) -> float:
        return self.token_s[0] - self.arrival_s

    @property
    def inter_token_s(self) -> np.ndarray:
        return np.diff(self.token_s)

    @property
    def tpot_s(self) -> float:
        """(e2e - ttft) / (output - 1), the simulator's definition; NaN for one token."""
        return float(np.mean(self.inter_token_s)) if len(self.token_s) > 1 else float("nan")


@dataclass(frozen=True)
class Step:
    """One iteration as it ran: what it carried and how long its forward took."""
    decode_contexts: tuple  # keys each decoder attends (its prompt and tokens so far)
    chunks: tuple  # (new tokens, context end) of each prefill chunk
    seconds: float  # the forward, sampling included, on the wall clock
    cpu_seconds: float  # CPU time the process got meanwhile: below `seconds` when another tenant had the core


def serve(model: Decoder, work: Workload, token_budget: int, max_batch: int, prompts: list[torch.Tensor],
          on_finish=None, on_step=None, clock=time.perf_counter, clients: int | None = None) -> list[Served]:
    """Serve `work` on the wall clock: arrivals are seconds after the start (closed loop, `clients`: set as
    requests complete, work.arrivals ignored); on_finish(Served) and on_step(Step) are called as requests complete
    and steps end."""
    n = len(work.arrivals)
    if clients is not None:
        work = Workload(np.where(np.arange(n) < clients, 0.0, np.inf), work.prompts, work.outputs)
    issued = n if clients is None else min(clients, n)
    model.allocate_cache(max_batch, int((work.prompts + work.outputs).max()))
    free_slots, slot = list(range(max_batch)), {}
    served = [Served(r, float(work.arrivals[r])) for r in range(n)]  # closed loop: arrivals past `issued` set later
    prefilled, last_token = np.zeros(n, dtype=int), {}
    waiting, running, arrived = deque(), [], 0
    start = clock()
    while arrived < n or waiting or running:
        now = clock() - start
        if not waiting and not running and work.arrivals[arrived] > now:
            time.sleep(work.arrivals[arrived] - now)
            now = clock() - start
        while arrived < n and work.arrivals[arrived] <= now:
            waiting.append(arrived)
            arrived += 1
        while waiting and free_slots:
            r = waiting.popleft()
            slot[r] = free_slots.pop(0)
            running.append(r)
        decoders = [r for r in running if prefilled[r] == work.prompts[r]]
        budget = max(token_budget - len(decoders), 0)
        segments = [Segment(slot[r], last_token[r], int(work.prompts[r]) + len(served[r].token_s) - 1)
                    for r in decoders]
        chunks = []
        for r in running:
            if prefilled[r] < work.prompts[r] and budget > 0:
                take = int(min(work.prompts[r] - prefilled[r], budget))
                segments.append(Segment(slot[r], prompts[r][prefilled[r]:prefilled[r] + take], int(prefilled[r])))
                chunks.append((r, take))
                budget -= take
        began, cpu_began = clock(), time.process_time()
        with torch.inference_mode():
            next_tokens = mixed_step(model, segments)
        ended, cpu_seconds = clock(), time.process_time() - cpu_began
        if on_step is not None:
            on_step(Step(tuple(s.start + 1 for s in segments[:len(decoders)]),
                         tuple((take, int(prefilled[r]) + take) for r, take in chunks), ended - began, cpu_seconds))
        owners = decoders + [r for r, _ in chunks]  # the sequence of each segment, in order
        for r, take in chunks:
            prefilled[r] += take
        for i, r in enumerate(owners):
            if prefilled[r] == work.prompts[r]:  # a decoder, or a prompt's last chunk: a token out
                served[r].token_s.append(ended - start)
                last_token[r] = next_tokens[i:i + 1]
                served[r].tokens.append(int(last_token[r]))
        for r in [r for r in owners if len(served[r].token_s) >= work.outputs[r]]:
            running.remove(r)
            free_slots.append(slot.pop(r))
            if issued < n:  # closed loop: the client whose request ended sends the next
                work.arrivals[issued] = served[issued].arrival_s = ended - start
                issued += 1
            if on_finish is not None:
                on_finish(served[r])
    model.release_cache()
    return served
