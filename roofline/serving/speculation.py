"""Speculative decoding: a draft proposes γ tokens, the target checks them in one pass of γ + 1 queries.

Acceptance is i.i.d. per drafted token with rate α (Leviathan et al. 2023, "Fast Inference from
Transformers via Speculative Decoding", eq. 1): a pass yields (1 − α^(γ+1)) / (1 − α) tokens in
expectation (γ + 1 at α = 1), never γα + 1. An iteration costs γ draft decode steps plus one target
pass of T = γ + 1 query tokens against the cached context, priced by the same roofline as decode:
nearly free while the step is memory-bound, not free once B·(γ+1) tokens make the matmuls
compute-bound. Both models run on the same Deployment (tensor parallelism and the engine included;
the draft is split tp ways too). Left out: the draft's KV-cache memory, rejection-sampling arithmetic,
tree drafts.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import sympy as sp

from ..compiled import CompiledPhase, compile_queries
from ..models.config import MOE, ModelConfig, check_context, load_model
from ..deployment import Deployment
from ..model import DECODE, QUERIES, Options, decode_context
from ..sharding import whole

alpha, gamma = sp.symbols("alpha gamma", nonnegative=True)
MAX_GAMMA = 16  # the search range of best_gamma (0 = plain decoding)


def expected_tokens_expr() -> sp.Expr:
    """Tokens per target pass: accepted prefix (geometric, capped at γ) plus the pass's own token."""
    j = sp.Symbol("j", integer=True, nonnegative=True)
    return sp.simplify(sp.summation(alpha ** j, (j, 0, gamma)))  # P(at least j accepted) = α^j


def expected_tokens(acceptance, lookahead) -> np.ndarray:
    """(1 − α^(γ+1)) / (1 − α), with its limit γ + 1 at α = 1; broadcasts over arrays."""
    a, g = np.broadcast_arrays(np.asarray(acceptance, dtype=float), np.asarray(lookahead, dtype=float))
    safe = np.where(a < 1, a, 0.0)
    return np.where(a < 1, (1 - safe ** (g + 1)) / (1 - safe), g + 1)


def check(lookahead, acceptance) -> None:
    whole("gamma", lookahead, note=" (the lookahead: draft tokens a step)")
    if not 0 <= acceptance <= 1:
        raise ValueError(f"alpha: the acceptance rate must be in [0, 1], got {acceptance!r}")


def queries_phase(config: ModelConfig, options: Options, queries) -> CompiledPhase:
    """Verification pass: `queries` tokens per sequence, logits for every one (each drafted position is scored)."""
    return compile_queries(config, replace(options, logits="all")).phase(queries)


@dataclass(frozen=True)
class Speculation:
    gamma: int
    alpha: float
    batch: int
    prompt: int
    expected_tokens_per_iteration: float
    draft_s: float  # γ draft decode steps
    verify_s: float  # one target pass over γ + 1 queries
    iteration_s: float
    tpot_s: float  # iteration_s / expected tokens
    baseline_tpot_s: float  # one plain target decode step
    speedup: float
    best_gamma: int  # 0 when plain decoding is fastest
    best_speedup: float
    best_gamma_is_search_cap: bool = False  # the search stopped at max_gamma: a longer lookahead may be faster still


def check_draft(draft: ModelConfig, target: ModelConfig, draft_params: float, target_params: float) -> None:
    """A draft must speak the target's vocabulary (its tokens are verified by id) and be smaller than it."""
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"draft: {draft.name!r} has a {draft.vocab_size}-token vocabulary and the target "
                         f"{target.name!r} {target.vocab_size}; the target verifies the draft's token ids, so both "
                         f"need one tokenizer; fix: pick a draft from the target's family")
    if draft_params >= target_params:
        raise ValueError(f"draft: {draft.name!r} ({draft_params / 1e9:.3g}B parameters) is not smaller than the "
                         f"target {target.name!r} ({target_params / 1e9:.3g}B); drafting with it costs more than "
                         f"plain decoding; fix: pick a smaller draft of the same family, or a cost fraction")


def _draft_steps(draft, target: Deployment, target_decode, batch, contexts):
    """Seconds of one draft decode step at each context: a model's own roofline or a share of the target's."""
    if isinstance(draft, (int, float)) and not isinstance(draft, bool):
        if not 0 < draft <= 1:
            raise ValueError(f"draft: a cost fraction must be in (0, 1], got {draft!r}")
        return draft * target_decode
    config = load_model(draft)
    # A dense draft has no routed experts to store in the target's expert format: its weights are `weights`.
    precision = target.precision if MOE in config.layer_mlp else replace(target.precision, experts=None,
                                                                          expert_group_size=None)
    drafter = replace(target, config=config, options=Options(), precision=precision)
    check_draft(drafter.config, target.config, drafter.compiled.params * target.tp, target.compiled.params * target.tp)
    return drafter.step(DECODE, batch, contexts).total_s


def speculate(d: Deployment, draft: str | ModelConfig | float, gamma: int, alpha: float, batch: int = 1,
              prompt: int = 1024, max_gamma: int = MAX_GAMMA, allow_beyond_window: bool = False) -> Speculation:
    """Effective TPOT and speedup of speculative decoding, and the best lookahead for this α and batch.

    draft: a model (name or config) or a fraction of the target's decode step (MTP/Medusa-style heads);
    a model must share the target's vocabulary and be smaller. The best lookahead is searched up to
    max(max_gamma, gamma); `best_gamma_is_search_cap` says when the search stopped there.
    d: the target's deployment; a draft model runs on the same one (its engine, split and all-reduces included).
    """
    check(gamma, alpha)
    for name, value in (("batch", batch), ("prompt", prompt)):
        whole(name, value)
    check_context(d.config, prompt + gamma + 1, "prompt + gamma + 1", allow_beyond_window)
    lookaheads = np.arange(0, max(max_gamma, gamma) + 1, dtype=float)  # γ = 0 is plain decoding

    contexts = decode_context(prompt) + lookaheads  # the draft's step j sees prompt + 1 + j keys
    # a model without attention (pure Mamba) prices every context alike: its step is one number
    target_decode = np.broadcast_to(d.step(DECODE, batch, contexts).total_s, contexts.shape)
    per_draft_step = _draft_steps(draft, d, target_decode, batch, contexts)
    draft_s = np.concatenate([[0.0], np.cumsum(np.broadcast_to(per_draft_step, contexts.shape))[:-1]])
    verifier = replace(d, options=replace(d.options, logits="all"))  # each drafted position is scored
    verify_s = verifier.step(QUERIES, batch, contexts, queries=lookaheads + 1).total_s

    tokens = expected_tokens(alpha, lookaheads)
    tpot = (draft_s + verify_s) / tokens
    best = int(np.argmin(tpot))
    g = int(gamma)
    return Speculation(g, float(alpha), int(batch), int(prompt), float(tokens[g]), float(draft_s[g]),
                       float(verify_s[g]), float(draft_s[g] + verify_s[g]), float(tpot[g]), float(target_decode[0]),
                       float(target_decode[0] / tpot[g]), best, float(target_decode[0] / tpot[best]),
                       best == len(lookaheads) - 1)
