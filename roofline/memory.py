"""What one GPU holds, for any split, and the largest batch that fits: the one memory model every caller reads.

Per GPU = weights + the cache of its sequences at prompt + gen tokens (attention KV growing with the tokens,
the constant state of SSM / linear-attention layers once per sequence) + the activation workspace of one
prefill chunk. Under tensor parallelism a GPU holds its shard; under pipeline parallelism each stage's GPU
holds its layers (the fullest stage binds); under expert parallelism a GPU holds 1/e of the routed experts
and its own B/e sequences. The workspace is that of one prefill chunk, as serving engines schedule it
(vLLM's max_num_batched_tokens, SGLang's chunked_prefill_size): at most `prefill_chunk` prompt tokens at a
time (default 8192), i.e. min(B, chunk // P) whole prompts, or one chunk-long piece of a longer prompt; each
piece's workspace is its largest prefill op's activations (the whole model's, on every stage: an upper
estimate under pp). prefill_chunk=None prefills the whole batch's prompts at once. The largest batch follows
in closed form: below `pieces` sequences each brings its own workspace, past it the chunk's is fixed.
What fits: the bytes the device shows the runtime (Hardware.capacity_bytes: CUDA's total where sourced), less
the runtime reserve, of which the engine's KV rule gives the pool its fraction, in whole blocks
(roofline.kv_memory: vLLM's gpu_memory_utilization of the total, TensorRT-LLM's fraction of what is free).
Callers: evaluate (analyze, sweep), plan's search, the pipeline and expert-parallel what-ifs, the memory wall.
"""
from __future__ import annotations

import numpy as np

from .deployment import Deployment
from .sharding import whole

DEFAULT_PREFILL_CHUNK = 8192  # tokens per prefill step: vLLM's default max_num_batched_tokens for chunked prefill


def check_prefill_chunk(prefill_chunk) -> None:
    if prefill_chunk is not None:
        whole("prefill_chunk", prefill_chunk, note=" tokens (or None: the whole batch at once)",
              fix=f"use e.g. {DEFAULT_PREFILL_CHUNK}")


def workspace(d: Deployment, prompt, prefill_chunk=DEFAULT_PREFILL_CHUNK):
    """(bytes of one piece's workspace, pieces in a chunk at most): a chunk holds min(B, chunk // P) whole
    prompts, or one chunk-long piece of a longer prompt (its largest prefill op's activations)."""
    check_prefill_chunk(prefill_chunk)
    cm = d.compiled
    piece = prompt if prefill_chunk is None else np.minimum(prompt, float(prefill_chunk))
    # Activations scale with the sequences, so a piece's workspace is a prefill of one sequence.
    per_piece = (cm.prefill.point(1.0, float(np.ravel(piece)[0]), d.precision.byte_widths) if np.size(piece) == 1
                 else cm.prefill.parts(1.0, piece, d.precision.byte_widths))
    bytes_per_piece = np.max(np.broadcast_arrays(
        *((act_read + act_write) / count for (_, _, act_read, act_write, _, _), count
          in zip(per_piece, cm.prefill.counts))), axis=0)
    pieces = np.inf if prefill_chunk is None else np.maximum(np.floor(prefill_chunk / prompt), 1.0)
    return bytes_per_piece, pieces


def _held(d: Deployment, tokens) -> tuple[list, list]:
    """Per pipeline stage: (weight bytes, cache bytes of one sequence at `tokens`) on its GPU."""
    if d.pp == 1 and d.ep == 1:  # the common case, for arrays of tokens (a sweep's grid)
        return [d.weight_bytes], [d.compiled.kv_cache(1.0, tokens, d.precision.kv_bytes)]
    if d.ep > 1:  # Deployment.memory_bytes holds B/e sequences: one whole batch of e holds one each
        empty, one = d.memory_bytes(0.0, tokens), d.memory_bytes(float(d.ep), tokens)
    else:  # bytes are linear in the batch
        empty, one = d.memory_bytes(0.0, tokens), d.memory_bytes(1.0, tokens)
    return empty, [b - a for a, b in zip(empty, one)]


def memory(d: Deployment, batch, prompt, gen, prefill_chunk=DEFAULT_PREFILL_CHUNK) -> dict:
    """Bytes one GPU holds (the fullest stage's), each stage's GPU's (the deployment's total is their sum x tp x
    ep x replicas), and the largest batch (per replica) that fits; arrays of batch, prompt and gen broadcast
    under pp = ep = 1. The cache is counted in the engine's whole blocks, and what fits is the engine's KV rule
    on the bytes the device shows the runtime (roofline.kv_memory)."""
    cm, kv, pool = d.compiled, d.precision.kv_bytes, d.engine.memory
    weights, per_sequence = _held(d, pool.blocks_tokens(prompt + gen))
    per_piece, pieces = workspace(d, prompt, prefill_chunk)
    sequences = batch / d.ep if d.ep > 1 else batch  # on one GPU
    chunk = np.minimum(sequences, pieces) * per_piece
    stages = [w + sequences * c + chunk for w, c in zip(weights, per_sequence)]
    fullest = int(np.argmax([float(np.max(s)) for s in stages])) if len(stages) > 1 else 0
    fit, fits = [], True
    for w, c in zip(weights, per_sequence):
        # KV + share x workspace <= room: the engine's pool beside the activations it makes room for
        room, share = pool.budget(d.hardware.capacity_bytes, w)
        free = np.maximum(room, 0.0)
        few = np.floor(free / (c + share * per_piece))
        many = np.floor(np.maximum(free - np.minimum(pieces, 1e300) * share * per_piece, 0.0) / c)
        fit.append(np.where(few < pieces, few, many))
        fits = fits & (sequences * c + share * chunk <= room)
    out = {"params": float(cm.params), "weight_bytes": weights[fullest], "kv_bytes_per_token": cm.kv_per_token(kv),
           "state_bytes_per_sequence": cm.state_bytes(kv), "kv_bytes": sequences * per_sequence[fullest],
           "workspace_bytes": chunk, "stage_memory_bytes": stages, "memory_bytes": stages[fullest],
           "max_batch": np.minimum.reduce(fit) * d.ep if len(fit) > 1 else fit[0] * d.ep, "fits": fits}
    out["napkin_kv_bytes"] = batch * cm.kv_cache(1.0, prompt, kv)  # the lecture: KV at S = prompt
    out["napkin_memory_bytes"] = weights[fullest] + out["napkin_kv_bytes"]
    return out
