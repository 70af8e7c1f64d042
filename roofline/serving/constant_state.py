"""Where a hybrid's cache goes: constant-state layers flat in the context, attention's KV growing with it.

CS336 lecture 10: attention's KV cache grows with the context S and makes decode memory-bound
("the KV wall"); SSM and linear-attention layers keep a per-sequence state whose size does not
depend on S. For a hybrid (Qwen3-Next: 1 attention layer in 4; Nemotron-H: 4 in 56) the wall
moves: only the attention layers' KV grows. Every number here comes from the model's own op
accounting (model.kv_cache_expr, the Deployment's memory); the comparison point is the model's
all-attention twin (every constant-state mixer replaced by the model's own attention), which
isolates what the mixers change.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import sympy as sp

from ..api import Analysis
from ..models.config import GLOBAL, STATE_MIXERS, ModelConfig
from ..deployment import Deployment
from ..memory import memory
from ..hardware import Hardware
from ..model import DECODE, Options, phase_ops
from ..precision import Precision
from ..symbols import B, S, b_kv


def attention_twin(config: ModelConfig) -> ModelConfig:
    """The same model with every constant-state mixer replaced by its (global) attention."""
    kinds = tuple(GLOBAL if kind in STATE_MIXERS else kind for kind in config.layer_attention)
    return replace(config, name=f"{config.name} (all-attention twin)", layer_attention=kinds)


def cache_by_group(config: ModelConfig, options: Options = Options()) -> dict[str, tuple[sp.Expr, sp.Expr]]:
    """Per layer group: (KV bytes of one sequence at S keys, constant state bytes of one sequence), in b_kv."""
    out: dict[str, list] = {}
    for p in phase_ops(config, options, DECODE):
        if not p.op_name.in_layers:
            continue
        kv, state = out.setdefault(p.group, [sp.Integer(0), sp.Integer(0)])
        if p.op.state != 0:
            out[p.group][1] = state + p.count * p.op.state
        else:
            per_token = p.op.cost.kv_write.xreplace({B: 1})
            keys = sp.Min(S, config.window) if p.window else S
            out[p.group][0] = kv + p.count * per_token * keys
    return {group: (kv, state) for group, (kv, state) in out.items()}


def cache_against_context(config: ModelConfig, contexts, precision: Precision = Precision()) -> pd.DataFrame:
    """One sequence's cache at each context: the attention layers' KV, the constant state, their sum,
    and the all-attention twin's KV (bytes)."""
    contexts = np.asarray(contexts, dtype=float)
    width = {b_kv: precision.kv_bytes}

    def at(expr):
        f = sp.lambdify(S, sp.sympify(expr).xreplace(width), modules="numpy")
        return np.broadcast_to(np.asarray(f(contexts), dtype=float), contexts.shape)

    groups = cache_by_group(config)
    kv = sum((at(k) for k, _ in groups.values()), np.zeros_like(contexts))
    state = sum((at(s) for _, s in groups.values()), np.zeros_like(contexts))
    twin = sum((at(k) + at(s) for k, s in cache_by_group(attention_twin(config)).values()), np.zeros_like(contexts))
    return pd.DataFrame({"context": contexts.astype(int), "kv_bytes": kv, "state_bytes": state,
                         "cache_bytes": kv + state, "twin_cache_bytes": twin})


def layer_kind_table(analysis: Analysis, batch: int, prompt: int, gen: int) -> pd.DataFrame:
    """Per layer group (e.g. layers[deltanet,moe]): layers, one sequence's cache at prompt + gen tokens
    (KV and state), and the group's share of the prefill and decode step time at `batch`."""
    config, precision = analysis.deployment.config, analysis.deployment.precision
    ops = analysis.op_table(batch, prompt)
    ops = ops[ops["group"].str.startswith("layers[")]
    time = ops.groupby(["group", "phase"])["time_s"].sum().unstack(fill_value=0.0)
    width = {b_kv: precision.kv_bytes, S: prompt + gen}
    rows = []
    for group, (kv, state) in cache_by_group(config).items():
        kind = group[len("layers["):-1].split(",")
        count = sum(1 for a, m in zip(config.layer_attention, config.layer_mlp) if [a, m] == kind)
        rows.append({"group": group, "layers": count, "kv_bytes": float(kv.xreplace(width)),
                     "state_bytes": float(sp.sympify(state).xreplace(width)),
                     "prefill_s": float(time.loc[group].get("prefill", 0.0)),
                     "decode_s": float(time.loc[group].get("decode", 0.0))})
    return pd.DataFrame(rows)


def hybrid_walls(config: ModelConfig, hw: Hardware, precision: Precision = Precision(), prompt: int = 1024,
                 gen: int = 128) -> pd.DataFrame:
    """The model against its all-attention twin: cache per sequence, largest batch that fits, the context
    where one sequence's cache read equals the weights read (roofline.memory, derivations)."""
    from .. import derivations
    rows = []
    for label, cfg in (("this model", config), ("all-attention twin", attention_twin(config))):
        d = Deployment(cfg, hw, precision)
        mem = memory(d, 1.0, float(prompt), float(gen))
        _, crossover = derivations.kv_equals_weights_context(cfg, precision)
        rows.append({"model": label, "cache_bytes_per_sequence": float(mem["kv_bytes"]),
                     "state_bytes_per_sequence": float(mem["state_bytes_per_sequence"]),
                     "max_batch": float(mem["max_batch"]), "kv_equals_weights_context": crossover})
    return pd.DataFrame(rows)


def break_even_context(config: ModelConfig, precision: Precision = Precision()) -> tuple[sp.Expr, float]:
    """Context past which the model's cache per sequence is smaller than its all-attention twin's:
    state + KV_hybrid(S) = KV_twin(S), solved for S (no window layers; nan when it never is)."""
    one = {B: 1, b_kv: precision.kv_bytes}
    ours = sum((k + s for k, s in cache_by_group(config).values()), sp.Integer(0)).xreplace(one)
    twin = sum((k + s for k, s in cache_by_group(attention_twin(config)).values()), sp.Integer(0)).xreplace(one)
    roots = [r for r in sp.solve(sp.Eq(ours, twin), S) if r.is_real and r > 0]
    return (sp.Eq(S, roots[0]), float(roots[0])) if roots else (sp.nan, float("nan"))
