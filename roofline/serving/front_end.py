"""The server's front end: one process outside the GPUs that every request and every streamed chunk passes through.

An OpenAI-compatible server in Python (TensorRT-LLM's `trtllm-serve`, vLLM's and SGLang's API servers) parses each
request, tokenizes its prompt and hands it to the engine, then detokenizes and sends its output in chunks: the first
token alone, then one every `stream_interval` tokens (TensorRT-LLM's; 1 by default) and the last. That work runs in
one process, one coroutine a request, its time shared among them whatever the GPUs do. A request takes
  w = a + (1 + ⌈(G − 1) / s⌉) b / max(1, W)      seconds of it
(a: a request's submission, `Engine.frontend_request_s`; b: a chunk's, `Engine.frontend_chunk_s`; s the stream
interval; W post-processing workers, TensorRT-LLM's `num_postprocess_workers`, sharing the chunks' work in their own
processes), so at λ requests/s it is busy ρ = λ w of the time, and shared (M/G/1 processor sharing: a job of x takes
x / (1 − ρ), whatever the mix of jobs):
  capacity  λ < 1 / w: past it requests queue before the engine sees them (a closed loop's, as past its KV pool)
  TTFT      + (a + (1 + B / s) b / max(1, W)) / (1 − ρ): the submission, then the first chunk, which the GPUs emit
            with the chunks of the B / s decoders whose turn it is
TPOT is the GPUs': a stream's chunks share the front end with one step's burst, which it clears within the step below
its capacity. The simulator runs the same front end event by event (SharedFrontEnd; roofline.serving.batching); the
prefill-first cohort solves Little's law with it (roofline.serving.prefill_first).
Simplified: the workers' share is one station with the main process's, not a second one beside it; a step's burst is
its mean, not its spread. Measured: TensorRT-LLM 1.0.0rc3's Llama-3.1-8B rows on H100 (NVIDIA's silicon sample) top
out at ~9.2k output tokens/s whatever the tp (4 or 8) and the output length (README, "What the rows show").
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from ..sharding import whole


@dataclass(frozen=True)
class FrontEnd:
    request_s: float = 0.0  # a request's own work in the front end (parsing, tokenizing, handing it to the engine)
    chunk_s: float = 0.0  # a streamed chunk's (detokenizing, formatting, sending)
    stream_interval: int = 1  # tokens a chunk
    postprocess_workers: int = 0  # processes sharing the chunks' work (0: the front end does it itself)

    def __post_init__(self):
        for name in ("request_s", "chunk_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"front end: {name} must be a finite number of seconds >= 0, got {value!r}")
        whole("stream_interval", self.stream_interval, note=" tokens a streamed chunk (TensorRT-LLM's default: 1)")
        whole("postprocess_workers", self.postprocess_workers, low=0,
              note=" processes (TensorRT-LLM's num_postprocess_workers; default 0)")

    @classmethod
    def of(cls, engine) -> FrontEnd:
        """An engine's front end (its `frontend_request_s` and `frontend_chunk_s`), streaming every token."""
        return cls(engine.frontend_request_s, engine.frontend_chunk_s)

    @property
    def alone_s(self) -> float:
        """What it adds to a lone request's first token on an idle server: its submission and its first chunk."""
        return float(self.first_token_work(0.0))

    @property
    def idle(self) -> bool:
        """Whether it costs nothing (the ideal bound's, and every profile's without the terms)."""
        return self.request_s == 0 and self.chunk_s == 0

    def work(self, gen) -> np.ndarray:
        """Seconds of the front end a request of `gen` output tokens takes: w = a + (1 + ⌈(G − 1) / s⌉) b / max(1, W)
        (the first token is a chunk of its own, then one every s tokens)."""
        chunks = 1 + np.ceil((np.asarray(gen, dtype=float) - 1) / self.stream_interval)
        return self.request_s + chunks * self.chunk_s / max(1, self.postprocess_workers)

    def busy(self, rate, gen) -> np.ndarray:
        """The share of the time it works at `rate` requests/s: ρ = λ w."""
        return np.asarray(rate, dtype=float) * self.work(gen)

    def first_token_work(self, decoders) -> np.ndarray:
        """Its work before a request's first token, with `decoders` running: its submission a, and its first chunk,
        which the GPUs emit with a chunk of every decoder whose turn it is (decoders / s of them, b / max(1, W) each):
        a + (1 + decoders / s) b / max(1, W)."""
        chunk = self.chunk_s / max(1, self.postprocess_workers)
        return self.request_s + (1 + np.asarray(decoders, dtype=float) / self.stream_interval) * chunk

    def ttft_s(self, rate, gen, decoders) -> np.ndarray:
        """What it adds to a request's first token at `rate` requests/s with `decoders` running: its first-token work,
        shared with the rest, stretched to x / (1 − ρ) (M/G/1 processor sharing); inf at or past its capacity."""
        busy = self.busy(rate, gen)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(busy < 1, self.first_token_work(decoders) / (1 - busy), np.inf)

    def capacity(self, gen) -> float:
        """Requests/s the front end passes at most, 1 / w (inf where it costs nothing)."""
        w = float(self.work(gen))
        return math.inf if w <= 0 else 1 / w


class SharedFrontEnd:
    """The simulator's front end (roofline.serving.batching.simulate_continuous), event by event: processor sharing,
    its time split evenly over the jobs it holds, as one Python process's event loop splits it over its coroutines. A
    job is a request's submission (a), or a stream's backlog of chunks (b / max(1, W) each; a chunk is emitted at the
    first token, then every s tokens and at the last; chunks emitted while the stream's job runs join it, and its
    tokens reach the client when it ends). `on_submitted(request, t)` and `on_delivered(request, token, t)` are called
    as jobs end, in time order; either may send more (`arrive`). Kept in virtual time (the service each job present
    has had): a job ends when it reaches its virtual finish, the smallest first (a heap; a grown job's old entry is
    skipped)."""

    def __init__(self, front: FrontEnd, on_submitted, on_delivered):
        self.front, self.on_submitted, self.on_delivered = front, on_submitted, on_delivered
        self.chunk_s = front.chunk_s / max(1, front.postprocess_workers)
        self.t, self.served = 0.0, 0.0  # the clock, and the service each job present has had since t = 0
        self.finish: dict = {}  # ("submit" | "stream", request) -> the virtual time it ends at
        self.ends: list = []  # heap of (virtual finish, order, key); an entry no longer in `finish` is skipped
        self.upto: dict = {}  # request -> the last token its stream's job delivers
        self.sends: list = []  # heap of (time, request): submissions not yet arrived
        self.order = 0

    def arrive(self, request: int, at: float) -> None:
        heapq.heappush(self.sends, (float(at), int(request)))

    def emit(self, request: int, token: int, last: int) -> None:
        """The GPUs produced `token` (1-based) of the request's `last` at the current time (advance() first)."""
        if not (token == 1 or token == last or (token - 1) % self.front.stream_interval == 0):
            return
        key = ("stream", request)
        self._add(key, self.finish.get(key, self.served) + self.chunk_s)
        self.upto[request] = token

    def _add(self, key, finish: float) -> None:
        self.finish[key] = finish
        self.order += 1
        heapq.heappush(self.ends, (finish, self.order, key))

    def advance(self, until: float, stop=None) -> None:
        """Serve up to time `until` (inf: until nothing is left), or until `stop()` is true after an event (and every
        other event at that instant: jobs that end together reach the scheduler together)."""
        stopping = False
        while True:
            while self.ends and self.finish.get(self.ends[0][2]) != self.ends[0][0]:
                heapq.heappop(self.ends)  # a stream's job that grew since, or one that ended
            jobs = len(self.finish)
            ends = self.t + max(self.ends[0][0] - self.served, 0.0) * jobs if jobs else math.inf
            send = self.sends[0][0] if self.sends else math.inf
            event = min(ends, send)
            if stopping and event > self.t:
                return
            if event > until or event == math.inf:
                if math.isfinite(until) and until > self.t:
                    self.served += (until - self.t) / jobs if jobs else 0.0
                    self.t = until
                return
            self.served += (event - self.t) / jobs if jobs else 0.0
            self.t = event
            if ends <= send:
                _, _, (kind, request) = heapq.heappop(self.ends)
                del self.finish[(kind, request)]
                if kind == "submit":
                    self.on_submitted(request, self.t)
                else:
                    self.on_delivered(request, self.upto.pop(request), self.t)
            else:
                _, request = heapq.heappop(self.sends)
                self._add(("submit", request), self.served + self.front.request_s)
            stopping = stopping or (stop is not None and stop())
