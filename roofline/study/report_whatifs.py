"""The report's sensitivities and what-ifs: each reruns the model with one input changed.

Sensitivities: TTFT and TPOT elasticities (reruns at +10%, and sympy's d ln t / d ln x). What-ifs: GQA, MQA,
MLA, narrower weights and KV, tensor parallelism and speculative decoding against the baseline.
"""
from __future__ import annotations

import math
import os
from dataclasses import replace

import numpy as np
import pandas as pd

from ..api import analyze
from ..deployment import Deployment
from ..models.config import ModelConfig, bundled_models, load_model
from ..model import parameter_count
from ..serving import crossovers
from ..serving.speculation import speculate
from ..sharding import link
from ..views.fmt import fmt_rate, fmt_seconds

def sensitivities(config, hw, precision, inputs) -> pd.DataFrame:
    """Elasticities of TTFT and TPOT at each batch: reruns at +10% of an input, and sympy's d ln t / d ln x."""
    batch, prompt, gen = inputs["batch"], inputs["prompt"], inputs["gen"]
    base = analyze(config, hw, batch=batch, prompt=prompt, gen=gen, precision=precision).metrics
    longer = max(round(prompt * 1.1), prompt + 1)  # a whole token longer at least: below 5 tokens +10% rounds to +0
    cases = [("memory bandwidth", 1.1, replace(hw, memory_bandwidth=hw.memory_bandwidth * 1.1), prompt),
             ("peak FLOP/s (every dtype)", 1.1, replace(hw, peak_flops={k: v * 1.1 for k, v in hw.peak_flops.items()}),
              prompt),
             ("prompt length", longer / prompt, hw, longer)]
    rows = []
    for name, ratio, device, p in cases:
        out = analyze(config, device, batch=batch, prompt=p, gen=gen, precision=precision,
                      allow_beyond_window=True).metrics  # a derivative's probe, 10% past the request
        row = {"input": name, "how": "rerun at +10%"}
        for metric in ("ttft_s", "tpot_s"):
            for b, new, old in zip(batch, out[metric], base[metric]):
                row[f"{metric} B={b}"] = math.log(new / old) / math.log(ratio)
        rows.append(row)
    solved = {b: crossovers.elasticities(Deployment(config, hw, precision), b, prompt) for b in batch}
    for key, name in (("kv_bits", "KV bytes per element"), ("batch", "batch size")):
        row = {"input": name, "how": "d ln TPOT / d ln x (roofline.serving.crossovers)"}
        row.update({f"ttft_s B={b}": math.nan for b in batch})
        row.update({f"tpot_s B={b}": solved[b][key].value for b in batch})
        rows.append(row)
    return pd.DataFrame(rows)


WHATIFS = (  # name, what changes, overrides, precision changes
    ("GQA", "8 KV heads", {"n_kv_heads": 8}, {}),
    ("MQA", "1 KV head", {"n_kv_heads": 1}, {}),
    ("MLA", "latent KV cache", None, {}),
    ("int8 weights", "weights int8 (group 128)", {}, {"weights": "int8"}),
    ("int4 weights", "weights int4 (group 128)", {}, {"weights": "int4"}),
    ("fp8 KV", "KV cache fp8", {}, {"kv": "fp8"}),
    ("int8 KV", "KV cache int8", {}, {"kv": "int8"}),
)
TP_DEGREES = (2, 4, 8)
ACCEPTANCE = 0.8  # assumed per-token acceptance rate α of the speculative what-if
MTP_COST = 0.05  # assumed cost of an MTP-style draft head, as a share of one target decode step
AT_LARGEST = ("gpus", "tokens_per_s", "per_gpu_memory_bytes", "fits", "comm_s", "kv_bytes_per_token", "max_batch")
PER_BATCH = ("tokens_per_s", "per_gpu_memory_bytes", "fits", "comm_s")  # headed with the batch they are at


def _whatif_note(config: ModelConfig, name: str, overrides) -> str:
    heads = (overrides or {}).get("n_kv_heads")
    if name == "MLA":
        return "baseline already uses MLA" if config.is_mla else "not applicable: the model does not use MLA"
    if heads and not config.has_kv_heads:
        return "not applicable: MLA caches a latent, not per-head K, V"
    if heads and config.n_kv_heads <= heads:
        return f"not applicable: baseline already has {config.n_kv_heads} KV heads"
    if heads and config.n_heads % heads:
        return f"not applicable: {config.n_heads} query heads are not divisible by {heads}"
    return ""


def _whatif_row(name, change, metrics, batches, note="") -> dict:
    """TPOT at every batch, the rest at the largest; NaN (shown '—') where the scenario gives no number."""
    def at(column, i):
        return metrics[column].iloc[i] if metrics is not None and column in metrics else math.nan
    row = {"scenario": name, "change": change, **{f"tpot_s B={b}": at("tpot_s", i) for i, b in enumerate(batches)}}
    row.update({f"{c} B={batches[-1]}" if c in PER_BATCH else c: at(c, -1) for c in AT_LARGEST})
    return {**row, "note": note}


def _tensor_parallel(config, hw, precision, inputs, tp: int) -> dict:
    """The model split over tp GPUs (roofline.serving.tensor_parallel): per-GPU memory, all-reduces inside TPOT."""
    name, change = f"tensor parallelism, tp={tp}", f"{tp} GPUs: heads, MLP and vocabulary split; 2 all-reduces a layer"
    batches = inputs["batch"]
    try:  # roofline.serving.tensor_parallel.shard refuses degrees the heads do not allow; no interconnect, no TP
        metrics = analyze(config, hw, batch=batches, prompt=inputs["prompt"], gen=inputs["gen"], precision=precision,
                          tp=tp).metrics
    except ValueError as err:
        return _whatif_row(name, change, None, batches, f"not applicable: {err}")
    bandwidth, latency, _ = link(hw)
    note = (f"per GPU: memory, KV/token, max batch; link {fmt_rate(bandwidth, 'B/s')}, latency {fmt_seconds(latency)} "
            + ("assumed (none in the hardware file)" if metrics["link_latency_assumed"].iloc[0] else
               "from the hardware file"))
    return _whatif_row(name, change, metrics, batches, note)


def draft_model(config: ModelConfig) -> ModelConfig | None:
    """The smallest bundled model of the target's family and vocabulary size with fewer parameters, if any."""
    size = parameter_count(config)
    drafts = [load_model(name) for name in bundled_models()]
    drafts = [d for d in drafts if d.family == config.family and d.vocab_size == config.vocab_size
              and parameter_count(d) < size]
    def order(d):  # ties: the name sharing the longest prefix with the target's (llama-3.1-8b for llama-3.1-70b)
        return parameter_count(d), -len(os.path.commonprefix([d.name, config.name])), d.name
    return min(drafts, key=order, default=None)


def _speculation(config, hw, precision, inputs) -> dict:
    """Speculative decoding (roofline.serving.speculation) at α = ACCEPTANCE and the best lookahead γ at each batch."""
    batches, draft = inputs["batch"], draft_model(config)
    drafted = MTP_COST if draft is None else draft
    who = (f"MTP-style draft head at {MTP_COST:g} of a target decode step (assumed: no smaller bundled model "
           f"shares the vocabulary)" if draft is None else
           f"draft {draft.name} (the smallest bundled {config.family} model with V = {config.vocab_size})")
    tpot, picked = [], []
    for b in batches:
        args = {"batch": b, "prompt": inputs["prompt"]}
        target = Deployment(config, hw, precision)
        probe = speculate(target, drafted, 1, ACCEPTANCE, **args)
        best = probe.best_gamma  # 0: plain decoding is fastest, and speculate needs γ >= 1
        tpot.append(speculate(target, drafted, best, ACCEPTANCE, **args).tpot_s if best else probe.baseline_tpot_s)
        cap = ", the search cap: a longer one may be faster" if probe.best_gamma_is_search_cap else ""
        picked.append(f"B={b} γ={best} ({probe.best_speedup:.2f}x{cap})" if best else f"B={b} γ=0 (plain decoding)")
    metrics = pd.DataFrame({"tpot_s": tpot, "tokens_per_s": np.asarray(batches) / np.asarray(tpot), "gpus": 1})
    note = (f"α = {ACCEPTANCE} assumed; best γ: {', '.join(picked)}; the draft's weights and KV cache are not "
            "counted in memory")
    return _whatif_row("speculative decoding", f"{who}, α = {ACCEPTANCE}, best γ", metrics, batches, note)


def whatifs(config, hw, precision, analysis, inputs) -> pd.DataFrame:
    batches = inputs["batch"]
    experts = f", {precision.experts} routed experts" if precision.experts else ""
    rows = [_whatif_row("baseline", f"{precision.weights} weights{experts}, {precision.kv} KV", analysis.metrics,
                        batches)]
    for name, change, overrides, changes in WHATIFS:
        note = _whatif_note(config, name, overrides)
        if note or overrides is None:
            rows.append(_whatif_row(name, change, None, batches, note))
            continue
        what = replace(precision, **changes)
        metrics = analyze(config, hw, batch=batches, prompt=inputs["prompt"], gen=inputs["gen"], precision=what,
                          **overrides).metrics
        rows.append(_whatif_row(name, change, metrics, batches))
    rows += [_tensor_parallel(config, hw, precision, inputs, tp) for tp in TP_DEGREES]
    rows.append(_speculation(config, hw, precision, inputs))
    return pd.DataFrame(rows)
