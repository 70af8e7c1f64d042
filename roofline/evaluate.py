"""`evaluate`: the inference metrics of a Deployment for batches of sequences, as thin functions of its steps.

Definitions (stated in every output):
  TTFT  prefill of the prompt (P tokens, T = S = P): the time to the first token.
  TPOT  one decode step of the whole batch with P tokens already cached (S = P + 1 keys);
        it excludes the first token.
  E2E   TTFT + the G - 1 decode steps, each at its own context P + j (KV growth integrated).
  throughput = replicas · B / TPOT tokens/s.  napkin = the lecture's (weights + KV at P) bytes / bandwidth,
        MoE weights counting min(B·top_k, E) of each layer's E routed experts (those B tokens can read).
Memory (per GPU) = weights + KV cache at P + G tokens + activation workspace, and the largest batch that
fits follows in closed form. The workspace is that of one prefill chunk, as serving engines schedule it
(vLLM's max_num_batched_tokens, SGLang's chunked_prefill_size): at most `prefill_chunk` prompt tokens at
a time (default 8192), i.e. min(B, chunk // P) whole prompts, or one chunk-long piece of a longer
prompt; each piece's workspace is its largest prefill op's activations. prefill_chunk=None prefills
the whole batch's prompts at once. TTFT still prices the whole batch's prefill in one step. Step times include the
collectives (comm_s, prefill_comm_s). Pipeline and expert parallelism have their own results
(roofline.serving.pipeline, roofline.serving.expert_parallel): their memory is per stage and per expert shard.
"""
from __future__ import annotations

import numpy as np

from .bounds import to_shape, total
from .deployment import Deployment
from .model import DECODE, PREFILL, decode_context


DEFAULT_PREFILL_CHUNK = 8192  # tokens per prefill step: vLLM's default max_num_batched_tokens for chunked prefill


def check_prefill_chunk(prefill_chunk) -> None:
    if prefill_chunk is not None and (isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, (int, np.integer))
                                      or prefill_chunk < 1):
        raise ValueError(f"prefill_chunk: must be a whole number of tokens >= 1 (or None: the whole batch at once), "
                         f"got {prefill_chunk!r}; fix: use e.g. {DEFAULT_PREFILL_CHUNK}")


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


def memory(d: Deployment, batch, prompt, gen, prefill_chunk=DEFAULT_PREFILL_CHUNK) -> dict[str, np.ndarray]:
    """Bytes one GPU holds: its weights, the batch's cache at prompt + gen tokens (attention KV growing with
    the tokens, plus the constant state of SSM / linear-attention layers once per sequence), one prefill
    chunk's workspace."""
    cm, kv = d.compiled, d.precision.kv_bytes
    weight_bytes = d.weight_bytes
    kv_per_sequence = cm.kv_cache(1.0, prompt + gen, kv)
    per_piece, pieces = workspace(d, prompt, prefill_chunk)
    free = np.maximum(d.hardware.memory_bytes - weight_bytes, 0.0)
    # Below `pieces` sequences each brings its own workspace; past it the chunk's workspace is fixed.
    few = np.floor(free / (kv_per_sequence + per_piece))
    many = np.floor(np.maximum(free - np.minimum(pieces, 1e300) * per_piece, 0.0) / kv_per_sequence)
    out = {"params": float(cm.params), "weight_bytes": weight_bytes, "kv_bytes_per_token": cm.kv_per_token(kv),
           "state_bytes_per_sequence": cm.state_bytes(kv),
           "kv_bytes": batch * kv_per_sequence, "workspace_bytes": np.minimum(batch, pieces) * per_piece,
           "max_batch": np.where(few < pieces, few, many)}
    out["memory_bytes"] = weight_bytes + out["kv_bytes"] + out["workspace_bytes"]
    out["fits"] = out["memory_bytes"] <= d.hardware.memory_bytes
    out["napkin_kv_bytes"] = batch * cm.kv_cache(1.0, prompt, kv)  # the lecture: KV at S = prompt
    out["napkin_memory_bytes"] = weight_bytes + out["napkin_kv_bytes"]
    return out


def unread_expert_bytes(d: Deployment, batch):
    """Routed-expert bytes a decode step leaves unread, napkin-style: B tokens pick top_k experts each, so at
    most min(B·k, E) of a layer's E experts are read (the roofline counts the expected distinct experts)."""
    config = d.config
    if not config.n_experts:
        return 0.0
    read_share = np.minimum(batch * config.top_k, config.n_experts) / config.n_experts
    return d.compiled.routed_params * d.precision.expert_bytes * (1.0 - read_share)


def evaluate(d: Deployment, batch, prompt, gen, e2e: bool = True, prefill: bool = True,
             parallel_columns: bool | None = None, prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK
             ) -> dict[str, np.ndarray]:
    """Every metric for broadcastable arrays of batch (per replica), prompt length and generated tokens.

    Arrays keep their own shapes (batch (nB, 1) with prompt (1, nS) evaluates a grid cheaply);
    prefill=False skips TTFT and E2E (a decode-only sweep); parallel_columns (default: when split or
    replicated) adds tp, replicas, gpus, per_gpu_memory_bytes, comm_s, prefill_comm_s, link_latency_assumed;
    prefill_chunk sets the workspace (None: every prompt of the batch prefilled at once).
    """
    if d.pp > 1 or d.ep > 1:
        raise ValueError("pp, ep: a pipeline's or expert split's metrics are roofline.serving.pipeline.analyze_pipeline "
                         "and roofline.serving.expert_parallel.analyze_expert_parallel; use pp=ep=1 here")
    batch, prompt, gen = (np.asarray(x, dtype=float) for x in (batch, prompt, gen))
    decode = d.step(DECODE, batch, decode_context(prompt))
    out = {"batch": batch, "prompt_len": prompt, "gen_len": gen, **memory(d, batch, prompt, gen, prefill_chunk),
           "decode_flops": total(op[0] for op in decode.components),
           "decode_bytes": total(sum(op[1:]) for op in decode.components),
           "tpot_s": decode.total_s, "decode_no_overlap_s": decode.no_overlap_s, "decode_bound": decode.bound,
           "decode_bound_s": decode.bound_s}
    out["napkin_tpot_s"] = (out["napkin_memory_bytes"] - unread_expert_bytes(d, batch)) / d.hardware.memory_bandwidth
    out["tokens_per_s"] = d.replicas * batch / out["tpot_s"]
    out["napkin_tokens_per_s"] = d.replicas * batch / out["napkin_tpot_s"]
    out["decode_intensity"] = out["decode_flops"] / out["decode_bytes"]
    if prefill:
        pre = d.step(PREFILL, batch, prompt)
        out.update({"prefill_flops": total(op[0] for op in pre.components),
                    "prefill_bytes": total(sum(op[1:]) for op in pre.components),
                    # the engine's per-request cost (tokenizing, scheduling) is paid once, before the first token
                    "ttft_s": pre.total_s + d.engine.request_overhead_s, "prefill_no_overlap_s": pre.no_overlap_s,
                    "prefill_bound": pre.bound})
        out["prefill_intensity"] = out["prefill_flops"] / out["prefill_bytes"]
        if e2e:
            out["e2e_s"] = out["ttft_s"] + d.decode_seconds(batch, prompt, gen, decode)
    if parallel_columns or (parallel_columns is None and d.gpus > 1):
        out.update(tp=d.tp, replicas=d.replicas, gpus=d.gpus, per_gpu_memory_bytes=out["memory_bytes"],
                   comm_s=decode.communication_s, link_latency_assumed=d.link_latency_assumed)
        if prefill:
            out["prefill_comm_s"] = pre.communication_s
    shape = np.broadcast_shapes(batch.shape, prompt.shape, gen.shape)
    return {name: to_shape(value, shape) for name, value in out.items()}
