"""The kernel an engine's tensor-parallel all-reduce runs, and what one costs: t GPUs, a message of m bytes on each, a
link of β bytes/s each way, a latency L (Deployment.allreduce_latency: the engine's, growing with the group).

  ring      L + 2(t − 1)/t · m / β      NCCL's reduce-scatter then all-gather: 2(t − 1) steps of m / t bytes each
  one-shot  L + (t − 1) · m / sβ        each GPU reads its t − 1 peers' whole messages and reduces them itself
  two-shot  2L + 2(t − 1)/t · m / sβ    a one-shot reduce-scatter of m / t slices, then an all-gather: twice the
                                        latency, the ring's traffic

TensorRT-LLM and vLLM run their own kernel over NVLink (TensorRT-LLM's AllReduceStrategy.AUTO, vLLM's
custom_all_reduce): one shot up to a message size M, two shots past it, each one pass through the peers' buffers
at a share s of the link. NVIDIA's profile of TensorRT-LLM's own kernel (AIConfigurator 0.12.0,
systems/data/{h100_sxm,h200_sxm}/comm/trtllm/{1.2.0rc5,1.3.0rc10,1.3.0rc20}/custom_allreduce_perf.parquet: 414
bf16 points, 2-8 GPUs, 256 B-1 GB) follows it with M = 4 MiB, L = 3.1 us + 0.17 us a doubling of the group past 2
and s = 0.73 of the 450 GB/s link: 7.9% off at the median, 33% at p90 (validation/allreduce_fit.py). The one shot
holds far past where the faster of the two would turn (at 8 GPUs, ~200 KB): a decode step's 0.1-4 MB of
activations reads all its peers. NCCL's ring on the same cards takes 6-16 us for a small message.
Works on numbers, arrays and sympy symbols alike.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy as sp

RING, ONE_OR_TWO_SHOT = "ring", "one-or-two-shot"
ALGORITHMS = (RING, ONE_OR_TWO_SHOT)
KEYS = ("algorithm", "bandwidth_share", "one_shot_max_bytes", "source")  # an engine file's `allreduce:` section


def ring_time(message, gpus, link_bandwidth, latency):
    """L + 2(t − 1)/t · m / β: the ring's reduce-scatter then all-gather."""
    return latency + 2 * (gpus - 1) / gpus * message / link_bandwidth


def one_shot_time(message, gpus, bandwidth, latency):
    """L + (t − 1) · m / B: every GPU reads each peer's whole message."""
    return latency + (gpus - 1) * message / bandwidth


def two_shot_time(message, gpus, bandwidth, latency):
    """2L + 2(t − 1)/t · m / B: a reduce-scatter and an all-gather, each one pass over the peers' slices."""
    return 2 * latency + 2 * (gpus - 1) / gpus * message / bandwidth


@dataclass(frozen=True)
class AllReduceKernel:
    algorithm: str = RING
    bandwidth_share: float = 1.0  # of the link's bandwidth its traffic moves at (the ring: all of it)
    one_shot_max_bytes: float = 0.0  # the largest message it reduces in one shot (the ring: none)
    source: str = ""

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"allreduce.algorithm: unknown kernel {self.algorithm!r}; fix: one of "
                             f"{', '.join(ALGORITHMS)}")
        share, largest = self.bandwidth_share, self.one_shot_max_bytes
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise ValueError(f"allreduce.bandwidth_share: must be a fraction in (0, 1] of the link, got {share!r}")
        if isinstance(largest, bool) or not isinstance(largest, (int, float)) or not 0 <= largest < math.inf:
            raise ValueError(f"allreduce.one_shot_max_bytes: must be a finite number of bytes >= 0, got {largest!r}")

    def shot(self, message: float):
        """The formula a message of `message` bytes takes under this kernel: one shot up to its largest, two past it."""
        return one_shot_time if message <= self.one_shot_max_bytes else two_shot_time

    def seconds(self, message, gpus, link_bandwidth, latency):
        """One all-reduce of `message` bytes a GPU over `gpus` GPUs (the module docstring's formulas)."""
        if self.algorithm == RING:
            return ring_time(message, gpus, link_bandwidth, latency)
        bandwidth = self.bandwidth_share * link_bandwidth  # the one and the two shots alike
        one = one_shot_time(message, gpus, bandwidth, latency)
        two = two_shot_time(message, gpus, bandwidth, latency)
        if isinstance(message, sp.Basic):
            return sp.Piecewise((one, message <= self.one_shot_max_bytes), (two, True))
        return np.where(np.asarray(message) <= self.one_shot_max_bytes, one, two)

    def as_document(self) -> dict:
        return {"algorithm": self.algorithm, "bandwidth_share": self.bandwidth_share,
                "one_shot_max_bytes": self.one_shot_max_bytes, "source": self.source}


RING_KERNEL = AllReduceKernel()


def allreduce_from_document(raw, where: str) -> AllReduceKernel:
    """The `allreduce:` section of an engine file (absent: NCCL's ring)."""
    if raw is None:
        return RING_KERNEL
    fix = (f"fix: allreduce: {{algorithm: {ONE_OR_TWO_SHOT}, bandwidth_share: 0.73, one_shot_max_bytes: 4194304, "
           "source: where the kernel and its numbers come from}")
    if not isinstance(raw, dict) or set(raw) != set(KEYS) or not str(raw.get("source") or "").strip():
        raise ValueError(f"{where}: allreduce must hold exactly {', '.join(KEYS)}; {fix}")
    try:
        return AllReduceKernel(raw["algorithm"], raw["bandwidth_share"], raw["one_shot_max_bytes"], str(raw["source"]))
    except ValueError as error:
        raise ValueError(f"{where}: {error}; {fix}") from None
