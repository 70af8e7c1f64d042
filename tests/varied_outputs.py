"""The simulator's closed loop of requests whose outputs vary (a benchmark's --random-range-ratio 0.8 of 200 tokens):
the oracle that roofline.serving.steady_loop's random arrivals are checked against (tests/test_load.py,
tests/test_prefill_first.py)."""
import numpy as np

from roofline.serving.batching import StepCost, Workload, simulate_continuous

REQUESTS, WARM = 3000, 300  # the first and last WARM requests see an emptier server: left out of the means


def varied_outputs_simulated(d, clients: int, chunk: int, mixed: bool, prompt: int = 3000) -> tuple:
    """(mean TTFT, mean TPOT, mean output) of `clients` closed-loop clients, outputs drawn uniformly in [160, 200],
    past the first and last WARM requests."""
    outputs = np.random.default_rng(3).integers(160, 201, REQUESTS)
    work = Workload(np.zeros(REQUESTS), np.full(REQUESTS, prompt), outputs)
    sim = simulate_continuous(work, StepCost(d), 256, chunk_tokens=chunk, clients=clients, mixed=mixed,
                              request_overhead_s=d.engine.request_overhead_s)
    middle = slice(WARM, REQUESTS - WARM)
    return float(np.mean(sim.ttft_s[middle])), float(np.nanmean(sim.tpot_s[middle])), int(round(outputs.mean()))
