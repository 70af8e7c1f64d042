"""Inference metrics for batches of sequences: memory, TTFT, TPOT, E2E, throughput, napkin.

Definitions (stated in every output):
  TTFT  prefill of the prompt (P tokens, T = S = P): the time to the first token.
  TPOT  one decode step of the whole batch with P tokens already cached (S = P + 1 keys);
        it excludes the first token.
  E2E   TTFT + the G - 1 decode steps, each at its own context P + j (KV growth integrated).
  throughput = B / TPOT tokens/s.  napkin = the lecture's (weights + KV at P) bytes / bandwidth.
Memory = weights + KV cache at P + G tokens + activation workspace (the largest prefill op's
activations), and the largest batch that fits follows in closed form.
"""
from __future__ import annotations

import numpy as np

from .bounds import BOUNDS, IDEAL, ACT_READ, ACT_WRITE, FLOPS, Calibration, Roofs, step_times
from .evaluate import CompiledModel
from .hardware import Hardware
from .precision import Precision

E2E_NODES = 33  # trapezoid nodes over the decode steps: exact wherever TPOT is linear in context


def _widths(precision: Precision) -> tuple:
    return precision.weight_bytes, precision.activation_bytes, precision.kv_bytes


def evaluate(cm: CompiledModel, hw: Hardware, precision: Precision, batch, prompt, gen,
             calibration: Calibration = IDEAL, e2e: bool = True) -> dict[str, np.ndarray]:
    """Every metric for broadcastable arrays of batch, prompt length and generated tokens."""
    batch, prompt, gen = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (batch, prompt, gen)))
    widths = _widths(precision)
    roofs = Roofs.of(hw, precision, calibration, cm.config.n_layers)
    prefill = cm.prefill(batch, prompt, widths)
    decode = cm.decode(batch, prompt + 1, widths)
    pre_t, dec_t = step_times(prefill, cm.prefill, roofs), step_times(decode, cm.decode, roofs)

    weight_bytes = cm.params * widths[0]
    kv_per_token = cm.kv_cache(1.0, 1.0, widths[2])
    kv_bytes = cm.kv_cache(batch, prompt + gen, widths[2])
    per_instance = np.reshape(cm.prefill.counts, (-1,) + (1,) * batch.ndim)
    workspace = ((prefill[:, ACT_READ] + prefill[:, ACT_WRITE]) / per_instance).max(axis=0)
    per_sequence = cm.kv_cache(1.0, prompt + gen, widths[2]) + workspace / batch
    max_batch = np.floor(np.maximum(hw.memory_bytes - weight_bytes, 0.0) / per_sequence)
    memory = weight_bytes + kv_bytes + workspace

    out = {
        "batch": batch, "prompt_len": prompt, "gen_len": gen,
        "params": np.full(batch.shape, float(cm.params)), "weight_bytes": np.full(batch.shape, weight_bytes),
        "kv_bytes_per_token": np.full(batch.shape, kv_per_token), "kv_bytes": kv_bytes,
        "workspace_bytes": workspace, "memory_bytes": memory, "fits": memory <= hw.memory_bytes,
        "max_batch": max_batch,
        "prefill_flops": prefill[:, FLOPS].sum(axis=0), "prefill_bytes": prefill[:, 1:].sum(axis=(0, 1)),
        "ttft_s": pre_t.roofline_s, "prefill_no_overlap_s": pre_t.no_overlap_s, "prefill_bound": pre_t.bound,
        "decode_flops": decode[:, FLOPS].sum(axis=0), "decode_bytes": decode[:, 1:].sum(axis=(0, 1)),
        "tpot_s": dec_t.roofline_s, "decode_no_overlap_s": dec_t.no_overlap_s, "decode_bound": dec_t.bound,
        "napkin_tpot_s": (weight_bytes + cm.kv_cache(batch, prompt, widths[2])) / hw.memory_bandwidth,
    }
    out["tokens_per_s"] = batch / out["tpot_s"]
    out["prefill_intensity"] = out["prefill_flops"] / out["prefill_bytes"]
    out["decode_intensity"] = out["decode_flops"] / out["decode_bytes"]
    if e2e:
        out["e2e_s"] = out["ttft_s"] + decode_time_sum(cm, roofs, widths, batch, prompt, gen)
    return out


def decode_time_sum(cm: CompiledModel, roofs: Roofs, widths, batch, prompt, gen) -> np.ndarray:
    """Sum of TPOT over decode steps j = 1 .. G-1 at contexts P + j (trapezoid, end-corrected)."""
    steps = np.maximum(gen - 1, 0)
    u = np.linspace(0.0, 1.0, E2E_NODES).reshape((-1,) + (1,) * batch.ndim)
    first = prompt + 1
    contexts = first + u * np.maximum(steps - 1, 0)
    times = step_times(cm.decode(batch[None], contexts, widths), cm.decode, roofs).roofline_s
    trapezoid = np.trapezoid(times, dx=1.0 / (E2E_NODES - 1), axis=0) * np.maximum(steps - 1, 0)
    total = trapezoid + (times[0] + times[-1]) / 2
    total = np.where(steps == 1, times[0], total)
    return np.where(steps == 0, 0.0, total)


def bound_names(codes: np.ndarray) -> np.ndarray:
    return np.asarray(BOUNDS, dtype=object)[codes]
