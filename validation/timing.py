"""Timing one callable the way the device wants it, returning the median over many runs.

GPU: warm-up, then the step captured once in a CUDA graph (Python and launch overhead out of the
number, as pytorch-labs/gpt-fast does) and replayed between CUDA events. CPU: perf_counter
around each call, median over repeats; the thread count is recorded by the caller.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    median_s: float
    p10_s: float
    p90_s: float
    n: int
    method: str


def summarize(samples: list[float], method: str) -> Timing:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return Timing(statistics.median(ordered), pick(0.1), pick(0.9), len(ordered), method)


def time_cpu(fn, repeats: int, warmup: int = 1, warmup_s: float = 0.0, clock=time.perf_counter) -> Timing:
    """warmup_s: keep warming up this long at least (a process's first copies ran at ~55% of the usual bandwidth)."""
    start = clock()
    for _ in range(warmup):
        fn()
    while clock() - start < warmup_s:
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return summarize(samples, "perf_counter")


def time_cuda(fn, repeats: int, warmup: int = 3, graph: bool = True, warmup_s: float = 0.0) -> Timing:
    """fn must be graph-safe when graph=True: fixed shapes, static buffers, no host sync inside.
    warmup_s: keep warming up this long at least (clocks settle; a cold card measured slow)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up on a side stream, as capture requires
        for _ in range(warmup):
            fn()
        start = time.perf_counter()
        while time.perf_counter() - start < warmup_s:
            fn()
            torch.cuda.synchronize()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    step = fn
    if graph:
        cuda_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cuda_graph):
            fn()
        step = cuda_graph.replay
        step()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for start, end in zip(starts, ends):
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]
    return summarize(samples, "cuda-graph+events" if graph else "cuda-events")


def time_on(device: str, fn, repeats: int, warmup: int = 1, graph: bool = True, warmup_s: float = 0.0) -> Timing:
    if device == "cuda":
        return time_cuda(fn, repeats, max(warmup, 3), graph, warmup_s)
    return time_cpu(fn, repeats, warmup, warmup_s)
