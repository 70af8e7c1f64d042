"""Inference metrics for batches of sequences: memory, TTFT, TPOT, E2E, throughput, napkin.

Definitions (stated in every output):
  TTFT  prefill of the prompt (P tokens, T = S = P): the time to the first token.
  TPOT  one decode step of the whole batch with P tokens already cached (S = P + 1 keys);
        it excludes the first token.
  E2E   TTFT + the G - 1 decode steps, each at its own context P + j (KV growth integrated).
  throughput = B / TPOT tokens/s.  napkin = the lecture's (weights + KV at P) bytes / bandwidth.
Memory = weights + KV cache at P + G tokens + activation workspace, and the largest batch that fits
follows in closed form. The workspace is that of one prefill chunk, as serving engines schedule it
(vLLM's max_num_batched_tokens, SGLang's chunked_prefill_size): at most `prefill_chunk` prompt
tokens at a time (default 8192), i.e. min(B, chunk // P) whole prompts, or one chunk-long piece of a
longer prompt; each piece's workspace is its largest prefill op's activations. prefill_chunk=None
prefills the whole batch's prompts at once. TTFT still prices the whole batch's prefill in one step.
"""
from __future__ import annotations

import numpy as np

from .bounds import IDEAL, Calibration, Roofs, step_times, to_shape, total
from .evaluate import CompiledModel
from .hardware import Hardware
from .precision import Precision

DEFAULT_PREFILL_CHUNK = 8192  # tokens per prefill step: vLLM's default max_num_batched_tokens for chunked prefill
E2E_NODES = 33  # trapezoid nodes over the decode steps: exact wherever TPOT is linear in context


def _widths(precision: Precision) -> tuple:
    return precision.weight_bytes, precision.activation_bytes, precision.kv_bytes


def check_prefill_chunk(prefill_chunk) -> None:
    if prefill_chunk is not None and (isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, (int, np.integer))
                                      or prefill_chunk < 1):
        raise ValueError(f"prefill_chunk: must be a whole number of tokens >= 1 (or None: the whole batch at once), "
                         f"got {prefill_chunk!r}; fix: use e.g. {DEFAULT_PREFILL_CHUNK}")


def workspace(cm: CompiledModel, widths, batch, prompt, prefill_chunk=DEFAULT_PREFILL_CHUNK):
    """(bytes of one piece's workspace, pieces in a chunk at most): a chunk holds min(B, chunk // P) whole
    prompts, or one chunk-long piece of a longer prompt (its largest prefill op's activations)."""
    check_prefill_chunk(prefill_chunk)
    piece = prompt if prefill_chunk is None else np.minimum(prompt, float(prefill_chunk))
    per_piece = cm.prefill.parts(1.0, piece, widths)  # activations scale with the sequences: one piece
    bytes_per_piece = np.max(np.broadcast_arrays(
        *((act_read + act_write) / count for (_, _, act_read, act_write, _, _), count
          in zip(per_piece, cm.prefill.counts))), axis=0)
    pieces = np.inf if prefill_chunk is None else np.maximum(np.floor(prefill_chunk / prompt), 1.0)
    return bytes_per_piece, pieces


def evaluate(cm: CompiledModel, hw: Hardware, precision: Precision, batch, prompt, gen,
             calibration: Calibration = IDEAL, e2e: bool = True, prefill: bool = True,
             prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK) -> dict[str, np.ndarray]:
    """Every metric for broadcastable arrays of batch, prompt length and generated tokens.

    Arrays keep their own shapes (batch (nB, 1) with prompt (1, nS) evaluates a grid cheaply);
    prefill=False skips TTFT and E2E (a decode-only sweep); prefill_chunk sets the workspace.
    """
    batch, prompt, gen = (np.asarray(x, dtype=float) for x in (batch, prompt, gen))
    widths = _widths(precision)
    roofs = Roofs.of(hw, precision, calibration, cm.config.n_layers)
    decode = cm.decode.parts(batch, prompt + 1, widths)
    dec_t = step_times(decode, cm.decode, roofs)

    weight_bytes = cm.params * widths[0]
    kv_per_token = cm.kv_cache(1.0, 1.0, widths[2])
    kv_per_sequence = cm.kv_cache(1.0, prompt + gen, widths[2])
    per_piece, pieces = workspace(cm, widths, batch, prompt, prefill_chunk)
    free = np.maximum(hw.memory_bytes - weight_bytes, 0.0)
    # Below `pieces` sequences each brings its own workspace; past it the chunk's workspace is fixed.
    few = np.floor(free / (kv_per_sequence + per_piece))
    many = np.floor(np.maximum(free - np.minimum(pieces, 1e300) * per_piece, 0.0) / kv_per_sequence)
    max_batch = np.where(few < pieces, few, many)
    kv_bytes = batch * kv_per_sequence
    workspace_bytes = np.minimum(batch, pieces) * per_piece
    memory = weight_bytes + kv_bytes + workspace_bytes
    shape = np.broadcast_shapes(batch.shape, prompt.shape, gen.shape)

    out = {
        "batch": batch, "prompt_len": prompt, "gen_len": gen, "params": float(cm.params), "weight_bytes": weight_bytes,
        "kv_bytes_per_token": kv_per_token, "kv_bytes": kv_bytes, "workspace_bytes": workspace_bytes,
        "memory_bytes": memory,
        "fits": memory <= hw.memory_bytes, "max_batch": max_batch,
        "decode_flops": total(op[0] for op in decode), "decode_bytes": total(sum(op[1:]) for op in decode),
        "tpot_s": dec_t.roofline_s, "decode_no_overlap_s": dec_t.no_overlap_s, "decode_bound": dec_t.bound,
        "decode_bound_s": dec_t.bound_s,
    }
    out["napkin_kv_bytes"] = batch * cm.kv_cache(1.0, prompt, widths[2])  # the lecture: KV at S = prompt
    out["napkin_memory_bytes"] = weight_bytes + out["napkin_kv_bytes"]
    out["napkin_tpot_s"] = out["napkin_memory_bytes"] / hw.memory_bandwidth
    out["tokens_per_s"] = batch / out["tpot_s"]
    out["decode_intensity"] = out["decode_flops"] / out["decode_bytes"]
    if prefill:
        pre = cm.prefill.parts(batch, prompt, widths)
        pre_t = step_times(pre, cm.prefill, roofs)
        out.update({"prefill_flops": total(op[0] for op in pre), "prefill_bytes": total(sum(op[1:]) for op in pre),
                    "ttft_s": pre_t.roofline_s, "prefill_no_overlap_s": pre_t.no_overlap_s, "prefill_bound": pre_t.bound})
        out["prefill_intensity"] = out["prefill_flops"] / out["prefill_bytes"]
        if e2e:
            out["e2e_s"] = out["ttft_s"] + decode_time_sum(cm, roofs, widths, batch, prompt, gen)
    return {name: to_shape(value, shape) for name, value in out.items()}


def decode_time_sum(cm: CompiledModel, roofs: Roofs, widths, batch, prompt, gen) -> np.ndarray:
    """Sum of TPOT over decode steps j = 1 .. G-1 at contexts P + j (trapezoid, end-corrected).

    The trapezoid nodes ride on a trailing axis, so every point's steps are one evaluation.
    """
    steps = np.maximum(gen - 1, 0)
    spans = np.maximum(steps - 1, 0)
    nodes = np.linspace(0.0, 1.0, E2E_NODES)

    def tpot(u):
        return step_times(cm.decode.parts(batch, prompt + 1 + u * spans, widths), cm.decode, roofs).roofline_s

    shape = np.broadcast_shapes(np.shape(batch), np.shape(prompt), np.shape(spans))
    if np.prod(shape) < 4096:  # small: every node in one call, on a leading axis
        times = list(np.broadcast_to(tpot(nodes.reshape((-1,) + (1,) * len(shape))), (E2E_NODES,) + shape))
    else:  # large grids: node by node keeps memory at one grid
        times = [tpot(u) for u in nodes]
    ends = (times[0] + times[-1]) / 2
    summed = (total(times[1:-1]) + ends) / (E2E_NODES - 1) * spans + ends
    summed = np.where(steps == 1, times[0], summed)
    return np.where(steps == 0, 0.0, summed)
