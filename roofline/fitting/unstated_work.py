"""Files whose measured rates need more prefill than any Hopper GEMM delivers: their prompts were not the stated work.

A closed loop of C requests completes C / E2E of them a second (E2E = TTFT + (G − 1) TPOT, from the row), and each
brought a prompt of P tokens to prefill. Prefilling them takes at least (C / E2E) t_P of the GPUs' time, t_P one
prompt's prefill at the datasheet peaks (`prefill_floor`: the ideal engine, compute-bound past a few hundred tokens).
That share is a floor on the rate the GEMMs sustained, before any decode step, attention over the cache or host
work. The fastest GEMM published for Hopper is DeepGEMM's fp8, up to 1550 TFLOPS on an H800
(github:deepseek-ai/DeepGEMM, README, April 2025), 0.78 of its 1979 TFLOPS dense fp8 peak, the H100 SXM's and the
H200's own (FASTEST_GEMM_SHARE). A row whose floor passes it did not prefill the prompts it states: its client sent
shorter ones, or repeated ones that the engine's prefix cache served (genai-perf draws from 100 dataset entries by
default, `--num-dataset-entries`; vLLM, SGLang and TensorRT-LLM cache prefixes by default). Nothing says which or
how much, so the file, one client setup, is left out whole by reason "work".

Over serving-hopper.csv's rows (tests/test_unstated_work.py derives it): vLLM 0.12.0's
nvidia_Llama-3.1-8B-Instruct-FP8.csv on H200 needs 0.62-0.96 of the fp8 peak for its prompts alone (median 0.71,
9 of 21 rows past 0.78; e.g. C 64, 4000 in, 100 out, tp 4: TTFT 125 ms, TPOT 7.5 ms, 0.96); no other file's row needs
more than 0.59 (Qwen3-32B bf16 at C 128 and 4k prompts). The genai-perf files whose run length their digits give
(roofline.fitting.clients: up to 2000 requests, 20 draws of each of 100 entries had they kept genai-perf's default)
show no cache: their TPOT under prompt-heavy load matches the full prompts' prefill at every C.
"""
from __future__ import annotations

FASTEST_GEMM_SHARE = 1550 / 1979  # DeepGEMM's fp8 TFLOPS on an H800 over the dense fp8 peak (the docstring)

# (backend, backend_version, source file, system): files a row of which needs more than FASTEST_GEMM_SHARE
UNSTATED = frozenset({("vllm", "0.12.0", "nvidia_Llama-3.1-8B-Instruct-FP8.csv", "h200_sxm")})


def unstated_work(backend: str, version: str, source: str, system: str) -> bool:
    """Whether a row of this backend, version, source file and system measured other prompts than it states."""
    return (backend, version.strip(), source, system) in UNSTATED


def prefill_floor(concurrency: int, ttft_s: float, tpot_s: float, gen: int, prompt_s: float) -> float:
    """The share of the GPUs' time the row's prompts need at the datasheet peaks: requests completed a second,
    C / E2E, times one prompt's prefill at the peaks, `prompt_s`."""
    return concurrency / (ttft_s + (gen - 1) * tpot_s) * prompt_s
