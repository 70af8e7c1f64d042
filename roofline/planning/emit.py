"""The launch command of a planned deployment for vLLM, SGLang or TensorRT-LLM: one replica's parallelism, its
running-sequence cap (the capacity batch), token budget (the prefill chunk), KV-cache dtype, weight quantization,
memory fraction and longest request. Returned as text (the CLI prints it).

Every flag is checked against the engine's documented CLI:
  vLLM          https://docs.vllm.ai/en/latest/models/engine_args.html (`vllm serve` engine arguments:
                --tensor-parallel-size, --pipeline-parallel-size, --max-num-seqs, --max-num-batched-tokens,
                --kv-cache-dtype {auto,fp8}, --quantization fp8, --gpu-memory-utilization, --max-model-len)
  SGLang        https://docs.sglang.io/advanced_features/server_arguments.html (--model-path, --tp,
                --max-running-requests, --chunked-prefill-size, --kv-cache-dtype fp8_e4m3, --quantization fp8,
                --mem-fraction-static, --context-length)
  TensorRT-LLM  https://nvidia.github.io/TensorRT-LLM/0.18.2/commands/trtllm-serve.html (--tp_size, --pp_size,
                --max_batch_size, --max_num_tokens, --max_seq_len) and, for the KV pool's dtype and fraction in
                a --config YAML (kv_cache_config: dtype, free_gpu_memory_fraction),
                https://nvidia.github.io/TensorRT-LLM/examples/deepseek_r1_reasoning_parser.html (also --ep_size)
Disaggregated (launch_pools): each pool's workers are launched as above with the pool's tp and cap, plus
  TensorRT-LLM  https://nvidia.github.io/TensorRT-LLM/latest/features/disagg-serving.html and its
                examples/disaggregated/README.md: the --config YAML's cache_transceiver_config (backend: UCX,
                max_tokens_in_buffer), disable_overlap_scheduler: true on context servers, and
                `trtllm-serve disaggregated -c disagg_config.yaml` (context_servers / generation_servers:
                num_instances, urls)
  vLLM          https://docs.vllm.ai/en/stable/features/nixl_connector_usage.html (--kv-transfer-config
                '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' on both pools)
  SGLang        https://docs.sglang.io/advanced_features/pd_disaggregation.html (--disaggregation-mode
                prefill|decode, --disaggregation-transfer-backend nixl; the router's --pd-disaggregation)
Memory fraction: 0.9, each engine's documented default and the share the plan's KV rule assumed
(data/engines/tensorrt-llm-1.yaml, memory.fraction). Left out: flags not checked (SGLang's pipeline and
expert parallelism, vLLM's expert parallelism: refused rather than guessed), and int4/int8 weights, whose
quantization flag follows the checkpoint (AWQ, GPTQ, ...): a comment says so.
"""
from __future__ import annotations

import math

TARGETS = ("vllm", "sglang", "trtllm")
MEMORY_FRACTION = 0.9


def _quantization_note(weights: str) -> str:
    return (f"# {weights} weights: serve a {weights} checkpoint (AWQ, GPTQ, ...); its quantization is read from it\n"
            if weights in ("int4", "int8") else "")


def launch_command(row, target: str, model: str, longest_tokens: float) -> str:
    """The command (and for TensorRT-LLM its config file) that serves one replica of the row's deployment."""
    if target not in TARGETS:
        raise ValueError(f"--emit: {target!r} is not one of {', '.join(TARGETS)}")
    if row["kv"] not in ("bf16", "fp16", "fp8"):
        raise ValueError(f"--emit {target}: a {row['kv']} KV cache is not one of the engines' documented dtypes; "
                         "plan with --kv bf16 or fp8")
    tp, pp, ep = (int(row[k]) for k in ("tp", "pp", "ep"))
    cap, weights, kv = int(row["capacity_batch"]), row["weights"], row["kv"]
    chunk = row["prefill_chunk"]
    budget = int(chunk) if chunk == chunk and chunk is not None else int(longest_tokens) + cap
    longest = int(math.ceil(longest_tokens))
    replicas = int(row["replicas"])
    head = (f"# {replicas} replica{'s' if replicas != 1 else ''} of {tp * pp * ep} x {row['hardware']}; run this on "
            f"each, behind one load balancer\n") + _quantization_note(weights)
    if target == "trtllm":
        config = "kv_cache_config:\n" + (f"  dtype: {kv}\n" if kv == "fp8" else "") + \
            f"  free_gpu_memory_fraction: {MEMORY_FRACTION}\n"
        ep_flag = f" --ep_size {ep}" if ep > 1 else ""
        return (head + f"cat > config.yml <<EOF\n{config}EOF\n"
                f"trtllm-serve {model} --tp_size {tp} --pp_size {pp}{ep_flag} --max_batch_size {cap} "
                f"--max_num_tokens {budget} --max_seq_len {longest} --config config.yml")
    if ep > 1 or (target == "sglang" and pp > 1):
        raise ValueError(f"--emit {target}: its {'expert' if ep > 1 else 'pipeline'}-parallel flag is not checked "
                         "against its documentation; emit trtllm, or plan with --ep 1 --pp 1")
    quant = " --quantization fp8" if weights == "fp8" else ""
    if target == "vllm":
        return (head + f"vllm serve {model} --tensor-parallel-size {tp} --pipeline-parallel-size {pp} "
                f"--max-num-seqs {cap} --max-num-batched-tokens {budget} "
                f"--kv-cache-dtype {'fp8' if kv == 'fp8' else 'auto'}{quant} "
                f"--gpu-memory-utilization {MEMORY_FRACTION} --max-model-len {longest}")
    kv_flag = " --kv-cache-dtype fp8_e4m3" if kv == "fp8" else ""
    return (head + f"python -m sglang.launch_server --model-path {model} --tp {tp} --max-running-requests {cap} "
            f"--chunked-prefill-size {budget}{kv_flag}{quant} --mem-fraction-static {MEMORY_FRACTION} "
            f"--context-length {longest}")


NIXL = """'{"kv_connector":"NixlConnector","kv_role":"kv_both"}'"""


def launch_pools(row, target: str, model: str, longest_tokens: float) -> str:
    """The commands that serve a disaggregated deployment: each pool's workers, then what joins them."""
    prompts = max(1, min(int(row["prefill_max_batch"]), int(row["prefill_chunk"]) - 1 if row["prefill_chunk"] else 1))
    prefill = dict(row) | {"tp": int(row["prefill_tp"]), "ep": int(row["prefill_ep"]), "pp": 1,
                           "capacity_batch": prompts, "replicas": int(row["prefill_workers"])}
    decode = dict(row) | {"replicas": int(row["decode_workers"])}
    pools = []
    for role, pool in (("prefill", prefill), ("decode", decode)):
        text = launch_command(pool, target, model, longest_tokens).split("\n", 1)[1]  # its head says replicas
        gpus = pool["tp"] * pool["ep"]
        text = (f"# {role} pool, sized by {'TTFT' if role == 'prefill' else 'TPOT'}: {pool['replicas']} worker"
                f"{'s' if pool['replicas'] != 1 else ''} of {gpus} x {row['hardware']}, each run as\n" + text)
        if target == "vllm":
            text += f" --kv-transfer-config {NIXL}"
        elif target == "sglang":
            text += f" --disaggregation-mode {role} --disaggregation-transfer-backend nixl"
        else:
            extra = ("disable_overlap_scheduler: true\n" if role == "prefill" else "") + \
                f"cache_transceiver_config:\n  backend: UCX\n  max_tokens_in_buffer: {int(math.ceil(longest_tokens))}\n"
            text = text.replace("EOF\ntrtllm-serve", extra + "EOF\ntrtllm-serve").replace("config.yml", f"{role}.yml")
        pools.append(text)
    if target == "trtllm":
        join = ("# then the disaggregated server over both pools (each worker's --host/--port as you launch it)\n"
                "cat > disagg_config.yaml <<EOF\nhostname: localhost\nport: 8000\nbackend: pytorch\n"
                f"context_servers:\n  num_instances: {prefill['replicas']}\n  urls: [...]\n"
                f"generation_servers:\n  num_instances: {decode['replicas']}\n  urls: [...]\nEOF\n"
                "trtllm-serve disaggregated -c disagg_config.yaml")
    elif target == "sglang":
        join = ("# then the router over both pools\n"
                "python -m sglang_router.launch_router --pd-disaggregation --prefill http://PREFILL:PORT "
                "--decode http://DECODE:PORT")
    else:
        join = "# then a proxy that sends each request to a prefill worker, then to a decode worker (vLLM's examples)"
    return "\n".join(pools + [join])
