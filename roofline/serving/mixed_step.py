"""The mixed step of a continuous-batching engine: the running sequences' decode tokens and up to a token
budget of prefill-chunk tokens, priced as one step by the one pricer (Deployment.step, phase 'queries').

As selective batching runs it (Orca, Yu et al. OSDI 2022; vLLM's and TensorRT-LLM's in-flight batching):
every op that does not read the cache (projections, MLP, norms, the head, and the step's collectives and
fixed overheads) runs once over the flattened tokens of all sequences; attention runs per sequence group
(the decoders at their context, each prefill chunk against its own prompt so far). The head computes
logits for one token a sequence (serving engines' `logits='last'`), so the dense part depends on the
tokens and, through the head and the engine's per-sequence host work, on the sequences.

`StepTable` samples the same pricer on a grid of token counts once, for the steady-state load model
(roofline.serving.load), which evaluates thousands of steps per load curve: each op's time is the pricer's
at the grid's points and linear between them (the roofline is piecewise linear in the tokens).
Under expert parallelism (attention data parallel) the dense rows are the tokens' even share over the ranks;
a step's prefill chunks add their extra work on the ranks holding their sequences where they leave ranks
without one (`rank_excess_seconds`: Deployment.busiest_rank_sequences).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..deployment import OVERHEAD_GROUP, SEQUENCES_OP, Deployment
from ..engine import KERNEL
from ..model import QUERIES
from .attention_dp import balances, chunk_share

HEAD_GROUP = "head"  # the final norm and the LM head: one row a sequence under logits='last'
TABLE_POINTS = 256  # grid points per table; geometric, 1 token to the budget


def _rows(d: Deployment, sequences, context, queries) -> tuple[list, np.ndarray, np.ndarray]:
    """The pricer's step, row by row: (seconds per row, reads the cache, scales with the sequences: the head and
    the engine's per-sequence host work)."""
    step = d.step(QUERIES, sequences, context, queries)
    per_sequence = np.array([getattr(op, "group", "") == HEAD_GROUP
                             or (getattr(op, "group", "") == OVERHEAD_GROUP and op.op == SEQUENCES_OP)
                             for op in step.ops])
    return step.time_s, np.array(step.reads_context), per_sequence


def _sum(rows: list, keep: np.ndarray):
    chosen = [np.asarray(t, dtype=float) for t, k in zip(rows, keep) if k]
    return sum(chosen[1:], chosen[0]) if chosen else np.float64(0.0)


def _spread_body(d: Deployment, tokens, sequences=1.0):
    """The rows that neither read the cache nor scale with the sequences, over `tokens` flattened tokens from
    `sequences` sequences, spread evenly over any expert-parallel ranks: priced as e times the sequences, each with
    1/e of their tokens, so the busiest rank (Deployment.busiest_rank_sequences) holds tokens/e (e = 1: as given)."""
    sequences = np.maximum(np.asarray(sequences, dtype=float), 1.0)
    queries = np.asarray(tokens, dtype=float) / sequences
    # (the attention rows, dropped, are priced at context = queries: fewer keys than queries is no step)
    rows, attention, per_sequence = _rows(d, sequences * d.ep, np.maximum(queries, 1.0), queries / d.ep)
    return _sum(rows, ~attention & ~per_sequence)


def _per_sequence(d: Deployment, sequences):
    """The head and the engine's per-sequence host work for `sequences` sequences."""
    sequences = np.maximum(np.asarray(sequences, dtype=float), 1.0)
    rows, _, per_sequence = _rows(d, sequences, 1.0, np.ones_like(sequences))
    return _sum(rows, per_sequence)


def dense_seconds(d: Deployment, sequences, tokens):
    """Ops that do not read the cache (collectives and fixed overheads included) over `tokens` flattened
    tokens from `sequences` sequences (arrays broadcast), spread evenly over any expert-parallel ranks (a prefill
    chunk's excess on its own rank is `rank_excess_seconds`)."""
    sequences = np.maximum(np.asarray(sequences, dtype=float), 1.0)
    queries = np.asarray(tokens, dtype=float) / sequences
    rows, _, per_sequence = _rows(d, sequences, np.maximum(queries, 1.0), queries)
    return _spread_body(d, tokens, sequences) + _sum(rows, per_sequence)


def rank_excess_per_token(d: Deployment, chunk: int) -> float:
    """Under expert parallelism, seconds a prefill token's dense layers, shared experts, router and all-to-all send
    take on the one rank that holds its sequence (Deployment.busiest_rank_sequences), at a chunk of `chunk` tokens:
    (alone − even share) / (chunk (1 − 1/e)), the pricer's both ways; 0 without expert parallelism, and where the engine
    holds prompts until every rank has one, so that each rank runs its own chunk beside the others' (the even share:
    roofline.serving.attention_dp)."""
    if d.ep == 1 or balances(d):
        return 0.0
    rows, attention, per_sequence = _rows(d, 1.0, float(chunk), float(chunk))
    alone = float(np.ravel(_sum(rows, ~attention & ~per_sequence))[0])
    share = float(np.ravel(_spread_body(d, float(chunk)))[0])
    return max(alone - share, 0.0) / (chunk * (1 - 1 / d.ep))


def rank_excess_seconds(per_token: float, ep: int, tokens, chunks):
    """What `chunks` prefill chunks of `tokens` tokens in all add to a step beyond the even share `dense_seconds`
    prices, `per_token` from `rank_excess_per_token`. Each chunk runs whole on its sequence's rank and the step waits
    for the busiest: with m chunks on distinct ranks it holds max(1, m/e) chunks of tokens/m, where the even share is
    tokens/e, so tokens · max(1/m − 1/e, 0) extra (one chunk: its (1 − 1/e); e or more: balanced, none)."""
    chunks = np.maximum(np.asarray(chunks, dtype=float), 1.0)
    return per_token * np.asarray(tokens, dtype=float) * np.maximum(1 / chunks - 1 / ep, 0.0)


def attention_seconds(d: Deployment, sequences, queries, context):
    """Cache-reading ops for `sequences` sequences of `queries` new tokens each, ending at `context` keys (under
    expert parallelism, the busiest rank's: Deployment.busiest_rank_sequences)."""
    rows, attention, _ = _rows(d, np.asarray(sequences, dtype=float), np.asarray(context, dtype=float),
                               np.asarray(queries, dtype=float))
    return _sum(rows, attention)


def chunk_sizes(prompt: int, chunk: int) -> list[int]:
    """How a budget of `chunk` tokens a step cuts a prompt: full chunks, then the rest."""
    return [chunk] * (prompt // chunk) + ([prompt % chunk] if prompt % chunk else [])


def prefill_attention_seconds(d: Deployment, prompt: int, chunk: int) -> float:
    """A whole prompt's prefill attention, chunk by chunk, each chunk against the prompt so far."""
    sizes = chunk_sizes(int(prompt), int(chunk))
    ends = np.cumsum(sizes)
    return float(sum(float(np.ravel(attention_seconds(d, 1.0, size, end))[0]) for size, end in zip(sizes, ends)))


def mixed_step_seconds(d: Deployment, decode_contexts, chunks=()) -> float:
    """One step: `decode_contexts` the keys each decoder attends to; `chunks` (new tokens, context end) per
    prefill chunk. Decode attention is priced at the decoders' mean context (it is linear in the keys)."""
    decoding = len(decode_contexts)
    sequences = decoding + len(chunks)
    tokens = decoding + sum(size for size, _ in chunks)
    seconds = float(np.ravel(dense_seconds(d, sequences, tokens))[0])
    if decoding:
        seconds += float(np.ravel(attention_seconds(d, decoding, 1.0, float(np.mean(decode_contexts))))[0])
    if chunks:
        prefill = sum(size for size, _ in chunks)
        seconds += float(rank_excess_seconds(rank_excess_per_token(d, max(size for size, _ in chunks)), d.ep, prefill,
                                             len(chunks)))
    attention = sum(float(np.ravel(attention_seconds(d, 1.0, size, end))[0]) for size, end in chunks)
    return seconds + chunk_share(d) * attention


@dataclass(frozen=True)
class StepTable:
    """The pricer's mixed-step parts sampled once on a token grid: dense body (every non-head, non-attention
    row) by tokens, the head and the per-sequence host work by sequences, one decoder's attention at a context."""
    deployment: Deployment
    max_tokens: float  # the grid's top: the token budget

    @cached_property
    def grid(self) -> np.ndarray:
        return np.unique(np.concatenate(([0.0], np.geomspace(1.0, max(self.max_tokens, 2.0), TABLE_POINTS))))

    @cached_property
    def _body_and_head(self) -> tuple[np.ndarray, np.ndarray]:
        points = np.maximum(self.grid, 1.0)
        # body: one sequence of T tokens spread evenly (the per-sequence rows taken out); head: B sequences of one token
        # (arrays of sequences: the pricer's one-point path would read only the first query count)
        body = np.broadcast_to(_spread_body(self.deployment, points, np.ones_like(points)), points.shape).astype(float)
        head = np.broadcast_to(_per_sequence(self.deployment, points), points.shape).astype(float)
        zero = self.grid == 0  # no tokens: no step. Fixed overheads ride with any token, so scale the first point
        return np.where(zero, 0.0, body), np.where(zero, 0.0, head)

    def dense(self, sequences, tokens):
        """Seconds of the dense rows over `tokens` tokens from `sequences` sequences (linear between grid points)."""
        body, head = self._body_and_head
        return np.interp(tokens, self.grid, body) + np.interp(sequences, self.grid, head)

    def decode_attention(self, decoders, context: float):
        """`decoders` decoders' attention at `context` keys: B times one's on datasheet roofs (linear in B); on kernel
        roofs the attention roof depends on the bytes all B read (roofline.kernel_roofs), so the pricer's own values
        on the sequences grid, linear between its points."""
        if self.deployment.engine.roofs != KERNEL:
            return decoders * self.decode_attention_per_sequence(context)
        if context not in self._attention_by_sequences:
            points = np.maximum(self.grid, 1.0)
            seconds = np.broadcast_to(attention_seconds(self.deployment, points, 1.0, float(context)), points.shape)
            self._attention_by_sequences[context] = np.where(self.grid == 0, 0.0, seconds)
        return np.interp(decoders, self.grid, self._attention_by_sequences[context])

    @cached_property
    def _attention_by_sequences(self) -> dict:
        return {}

    def decode_attention_per_sequence(self, context: float) -> float:
        """One decoder's attention at `context` keys: the attention of B decoders is B times it (their
        costs are B times one sequence's, and a roofline corner scales with them). Priced once a context: the
        load model asks at one context thousands of times a curve."""
        if context not in self._attention_per_sequence:
            self._attention_per_sequence[context] = float(np.ravel(attention_seconds(self.deployment, 1.0, 1.0,
                                                                                     context))[0])
        return self._attention_per_sequence[context]

    @cached_property
    def _attention_per_sequence(self) -> dict:
        return {}
