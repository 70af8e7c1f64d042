"""How many requests a serving row's benchmark run sent, where its numbers say so: the client's fingerprint.

serving-hopper.csv gives a run's concurrency C, not its length N, and a closed loop's mean TTFT depends on it: the C
requests sent together at t = 0 are C / N of the run (roofline.serving.first_wave). Where nothing says, a run is taken
to be 10 C (published_serving.RUN_REQUESTS_PER_CLIENT). The NVIDIA-collected files (source_file=<model>.csv, no
`measured=` date: a dump of AIConfigurator's internal benchmark database, its docs/design/
prediction_regression_gate_design.md L144-145) name no client, but their digits do. genai-perf stamps each request in
whole nanoseconds and rounds each request's inter-token latency to whole nanoseconds
(github:triton-inference-server/perf_analyzer at 263c5f6e,
genai-perf/genai_perf/profile_data_parser/llm_profile_data_parser.py: TTFT = first response − request time, L165-170;
ITL = round((latency − TTFT) / (output tokens − 1)), L187-192), so a row's mean TTFT and mean TPOT, times the run's N,
are both whole nanoseconds. aiperf keeps ITL a float, and the engines' own bench clients time in float seconds:
neither leaves both whole. The smallest N that makes both whole, per (backend, version, file) and C (`run_length`,
tests/test_clients.py over the file): N = 20 C, at most 2000, in TensorRT-LLM 1.0.0rc3's three files (Llama-3.1-8B,
Qwen3-32B, Qwen3-235B-A22B-FP8 on H100: 80, 160, 320, 640, 1280 and 2000 requests at C = 4 to 128) and SGLang
0.5.1.post1's and 0.5.8.post1's Qwen3-32B; N = 10 C in vLLM 0.12.0's Qwen3-32B (the Dynamo / AIConfigurator genai-perf
recipe, `--request-count C*10 --warmup-request-count C*2`: github:ai-dynamo/aiconfigurator at c0a88170,
src/aiconfigurator/eval/benchmarks/genai_perf_runner.py L190-229). A chance fit is 2 x 2e-3 = 0.4% a quantity
(WHOLE_NS_TOLERANCE); a quarter of the 20 C rows also fit 10 C (both sums even), as whole numbers over an even N
should. The H200 files of the same dump are rounded to 0.01 ms and the Dynamo (`gtl_`) rows fit no N: their N stays
the assumption. Not known: whether a warm-up ran first (genai-perf leaves warm-up requests out of its statistics; the
first wave then still opens the measured run only if the warm-up drained first): the first wave stays in the run, as
before, now at its measured length.
"""
from __future__ import annotations

from dataclasses import dataclass

from .serving_rows import concurrency, source_file

WHOLE_NS_TOLERANCE = 2e-3  # ns: a float mean of whole-ns values over N, printed to the file's digits


@dataclass(frozen=True)
class ClientRun:
    """A client's run length: `per_client` requests a request in flight, at most `at_most` (None: no cap)."""
    per_client: int
    at_most: int | None = None

    def requests(self, clients: int) -> int:
        n = self.per_client * clients
        return n if self.at_most is None else min(n, self.at_most)


# (backend, backend_version, source file): the run the fingerprint gives (the module docstring)
RUNS = {("trtllm", "1.0.0rc3", "meta-llama_Llama-3.1-8B-Instruct.csv"): ClientRun(20, 2000),
        ("trtllm", "1.0.0rc3", "Qwen_Qwen3-32B.csv"): ClientRun(20, 2000),
        ("trtllm", "1.0.0rc3", "Qwen_Qwen3-235B-A22B-FP8.csv"): ClientRun(20, 2000),
        ("sglang", "0.5.1.post1", "Qwen_Qwen3-32B.csv"): ClientRun(20, 2000),
        ("sglang", "0.5.8.post1", "Qwen_Qwen3-32B.csv"): ClientRun(20, 2000),
        ("vllm", "0.12.0", "Qwen_Qwen3-32B.csv"): ClientRun(10)}


def run_requests(raw: dict) -> int | None:
    """The requests of a row's run where its client is known (RUNS), else None."""
    run = RUNS.get((raw.get("backend"), (raw.get("backend_version") or "").strip(), source_file(raw)))
    return None if run is None else run.requests(concurrency(raw))


def whole_ns(mean_ms: float, requests: int) -> bool:
    """Whether `requests` whole-nanosecond values can average to `mean_ms` milliseconds."""
    total = mean_ms * 1e6 * requests
    return abs(total - round(total)) < WHOLE_NS_TOLERANCE


def run_length(means_ms: list[tuple[float, float]], longest: int = 6000) -> tuple[int, int]:
    """(N, rows it fits): the smallest run length that leaves the most rows' mean TTFT and mean TPOT (ms) both whole
    nanoseconds (the module docstring); N from 1 to `longest`."""
    best = (0, 0)
    for n in range(1, longest + 1):
        hits = sum(whole_ns(ttft, n) and whole_ns(tpot, n) for ttft, tpot in means_ms)
        if hits > best[1]:
            best = (n, hits)
    return best
