"""The CUDA path: graphed decode steps compute what eager ones do, timing and out-of-memory work.

Skipped without CUDA. Run on an H100 (torch 2.11, CUDA 13.0): all pass (validation/README.md).
"""
import io
import json
from pathlib import Path

import pytest
import torch

from validation import records, sweep
from validation.ceilings import measure_bandwidth, measure_ceilings
from validation.cli import PRESETS
from validation.decoder import build_decoder
from validation.timing import time_cuda

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_a_cuda_graph_replay_of_the_decode_step_matches_the_eager_step():
    model = build_decoder(PRESETS["tiny"], "bf16", "cuda")
    model.allocate_cache(4, 65)
    tokens = torch.randint(0, 256, (4, 1), device="cuda")
    with torch.inference_mode():
        eager = model(tokens, start=64).clone()
        graph = torch.cuda.CUDAGraph()
        model(tokens, start=64)  # warm-up before capture
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            static = model(tokens, start=64)
        graph.replay()
        torch.cuda.synchronize()
    torch.testing.assert_close(static, eager)


def test_bf16_on_the_gpu_matches_fp32_on_the_cpu_within_bf16_precision():
    cpu = build_decoder(PRESETS["tiny"], "fp32", "cpu", seed=5)
    gpu = build_decoder(PRESETS["tiny"], "bf16", "cuda", seed=5)
    tokens = torch.randint(0, 256, (2, 9))
    with torch.inference_mode():
        cpu.allocate_cache(2, 10)
        gpu.allocate_cache(2, 10)
        cpu(tokens[:, :8])
        gpu(tokens[:, :8].cuda())
        expected, got = cpu(tokens[:, 8:], start=8), gpu(tokens[:, 8:].cuda(), start=8).float().cpu()
    torch.testing.assert_close(got, expected, atol=0.1, rtol=0.05)


def test_graphed_timing_and_ceilings_are_positive_and_plausible():
    x = torch.ones(2**24, device="cuda")
    timing = time_cuda(lambda: x.mul_(1.0), repeats=20)
    assert timing.method == "cuda-graph+events" and 0 < timing.median_s < 0.01
    ceilings = measure_ceilings("cuda", ("bf16",), size="quick")
    assert ceilings.copy_bandwidth > 1e11 and ceilings.matmul_flops["bf16"] > 1e12


def test_a_gpu_sweep_point_that_runs_out_of_memory_is_recorded_not_raised(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "free_memory", lambda device: float("inf"))  # force an attempt
    config = PRESETS["tiny"].with_overrides(n_layers=2, n_kv_heads=4, head_dim=1024)
    spec = sweep.SweepSpec(device="cuda", model=config, dtypes=("bf16",), batches=(1, 10**6), contexts=(4096,),
                           steps=5, prefill_token_limit=1)
    ceilings = measure_ceilings("cuda", ("bf16",), size="quick")
    sweep.run_sweep(spec, tmp_path / "m.csv", ceilings, sweep.Progress(1, io.StringIO()))
    rows = {r["batch"]: r for r in records.read_rows(tmp_path / "m.csv")}
    assert rows["1"]["status"] == records.OK and rows["1"]["timing_method"] == "cuda-graph+events"
    assert rows[str(10**6)]["status"] == records.DOES_NOT_FIT


@pytest.mark.skipif(not torch.cuda.is_available() or "H100" not in torch.cuda.get_device_name(), reason="needs an H100")
def test_the_bandwidth_probes_agree_with_the_independent_h100_floors_within_5_percent():
    floor = json.loads((Path(__file__).parents[1] / "data/measurements/cuda-h100-floor.json").read_text())
    copy, read = measure_bandwidth("cuda", 4 * 2**30, 20)
    assert abs(copy / (floor["copy_rw_GBps"] * 1e9) - 1) < 0.05
    assert abs(read / (floor["sum_read_GBps"] * 1e9) - 1) < 0.05
