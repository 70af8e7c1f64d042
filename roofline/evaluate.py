"""`evaluate`: the inference metrics of a Deployment for batches of sequences, as thin functions of its steps.

Definitions (stated in every output):
  TTFT  prefill of the prompt (P tokens, T = S = P): the time to the first token.
  TPOT  one decode step of the whole batch with P tokens already cached (S = P + 1 keys);
        it excludes the first token.
  E2E   TTFT + the G - 1 decode steps, each at its own context P + j (KV growth integrated).
  throughput = replicas · B / TPOT tokens/s.  napkin = the lecture's (weights + KV at P) bytes / bandwidth,
        MoE weights counting min(B·top_k, E) of each layer's E routed experts (those B tokens can read).
Memory (per GPU) = weights + KV cache at P + G tokens (in the engine's whole blocks) + one prefill chunk's
activation workspace, and the largest batch that fits, on the bytes the device shows the runtime (CUDA's total
where sourced) less a runtime reserve, of which the engine's KV rule takes its fraction: roofline.memory, the
one memory model (roofline.kv_memory: the rule). TTFT still prices the whole batch's prefill in one step. Step
times include the
collectives (comm_s, prefill_comm_s). Pipeline and expert parallelism have their own results
(roofline.serving.pipeline, roofline.serving.expert_parallel): their memory is per stage and per expert shard.
"""
from __future__ import annotations

import numpy as np

from .bounds import to_shape, total
from .deployment import Deployment
from .memory import DEFAULT_PREFILL_CHUNK, memory
from .model import DECODE, PREFILL, decode_context


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
    held = memory(d, batch, prompt, gen, prefill_chunk)
    del held["stage_memory_bytes"]  # one stage: memory_bytes
    out = {"batch": batch, "prompt_len": prompt, "gen_len": gen, **held,
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
                    # the engine's per-request cost (tokenizing, the first pass's dispatch) is paid once, before the first token
                    "ttft_s": pre.total_s + d.request_s, "prefill_no_overlap_s": pre.no_overlap_s,
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
