"""Disaggregated serving: x prefill workers and y decode workers, each pool its own layout, the prompt's KV moved
between them once a request.

A request waits for and runs its prefill on a prefill worker, its KV cache crosses the link to a decode worker,
and the decode worker generates the rest (TensorRT-LLM's and Dynamo's disaggregated serving; DistServe, Zhong
et al. 2024). With prompt P, output G, rate λ split evenly over the workers:
  TTFT  = the prefill pool at λ / x a worker: the prompt's prefill S (the one pricer's prefill step, the whole
          prompt), the wait for the prompts ahead, M/D/1 (Pollaczek-Khinchine: ρ S / 2(1 − ρ), ρ = λ S / x; a
          prefill step is compute-bound, so prompts sharing a step save little), the engine's per-request cost,
          + the engine's handoff (disagg_handoff_s: routing, the transfer's setup and handshake, the decode
          worker's admission; fitted to TTFT at low load, roofline.fitting.disagg_handoff) + the KV transfer
  KV transfer = latency + max(bytes a prefill GPU holds, bytes a decode GPU holds) / link bandwidth: every GPU
          sends or receives its own shard on its own link (kv_cache of each pool's shard: KV heads split by tp,
          an MLA latent whole on every GPU). The link: NVLink when both pools fit one node (gpus_per_node), else
          the network (hardware file: network, e.g. one 400 Gb/s InfiniBand NDR port a GPU)
  TPOT  = the decode pool's steady state at λ / y: the decode step at the batch a request sees, n + 1 (itself
          and the Poisson mean of the others; closed loop: n), with n = λ/y (G − 1) TPOT decoders (Little),
          solved for TPOT; every step is decode alone (no prefill chunks ride in it: disaggregation's point)
  E2E   = TTFT + (G − 1) TPOT.
Saturation: the prefill pool at ρ = 1, or the decode pool past its running-sequence cap or KV pool.
Closed loop (C in flight): the rate where λ E2E(λ) = C, bisected (near the prefill pool's saturation E2E grows
without bound: past the knee each request adds 1 / throughput to TTFT), the prefill wait scaled by 1 − 1/n for the
n in flight (a request never waits behind itself: none at n = 1, M/D/1's as n grows; an approximation of the finite
population's queue); past the most both pools hold, the rest queue and TTFT grows by (C − held) / λ, as in
roofline.serving.load.
Left out: the decode worker's first step after the transfer (the token comes from the prefill worker), link
contention between requests (a transfer is a few ms beside a prefill), an unsourced link latency (taken as 0),
uneven routing (the workers share the rate evenly).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..deployment import Deployment
from ..model import DECODE, PREFILL, decode_context
from .load import check_concurrency, check_rate

BISECTIONS = 60  # halvings of a bracket: the TPOT a rate sees, the rate a concurrency holds


@dataclass(frozen=True)
class Link:
    """The path a request's KV takes between the pools."""
    name: str
    bandwidth: float  # bytes/s per direction, per GPU
    latency: float  # s (0 where the hardware file sources none)


def transfer_link(hardware, gpus: int) -> Link:
    """NVLink when `gpus` (both pools) fit one node, else the network; one error naming the missing field."""
    per_node = hardware.gpus_per_node
    if (per_node is None or gpus <= per_node) and hardware.interconnect_bandwidth:
        return Link("nvlink" if per_node else "interconnect", hardware.interconnect_bandwidth,
                    hardware.interconnect_latency or 0.0)
    if hardware.network_bandwidth:
        return Link("network", hardware.network_bandwidth, hardware.network_latency or 0.0)
    raise ValueError(f"hardware {hardware.id!r}: {gpus} GPUs span more than one node of {per_node} and the file has "
                     "no network bandwidth to move KV between them; fix: add network.bytes_per_s to the hardware file")


def kv_bytes_per_gpu(d: Deployment, prompt: float) -> float:
    """Bytes of one request's KV one GPU of the deployment holds after its prefill (its shard of the cache)."""
    return float(d.compiled.kv_cache(1.0, float(prompt), d.precision.kv_bytes))


def kv_transfer_s(prefill: Deployment, decode: Deployment, prompt: float, link: Link) -> float:
    """One request's KV over the link: each GPU moves its own shard on its own port, the larger side binds."""
    return link.latency + max(kv_bytes_per_gpu(prefill, prompt), kv_bytes_per_gpu(decode, prompt)) / link.bandwidth


class PrefillPool:
    """One prefill worker: prompts served one after another (M/D/1), each its prefill step. Under expert
    parallelism each of its ep GPUs prefills its own prompt (data-parallel attention), the step pricing ep
    prompts at once: ep servers, each its share of the rate (a random split: no better than M/D/ep). The published
    rows read such a worker as one server at the same throughput (roofline.fitting.disagg_load: DeepSeek-V3, 8192
    tokens, tp 8 and ep 8 workers alike); kept per rank: one server prefilling one prompt at a time on its busiest
    rank (Deployment.busiest_rank_sequences: the prompt's dense work on one rank) holds 0.92 and 8.3 requests/s at 8192
    and 1024 tokens where the rows held 2.85 and 33.4, and the rows' TTFT misses 42% -> 58% median; the ep-prompt step
    (one prompt a rank) holds 5.02 and 45.5."""

    def __init__(self, d: Deployment, prompt: int):
        self.d, self.P, self.servers = d, int(prompt), d.ep
        self.service_s = float(np.ravel(d.step(PREFILL, float(d.ep), float(prompt)).total_s)[0])

    def at_rate(self, rate) -> dict:
        """TTFT before the transfer at `rate` requests/s a worker: the wait, the prefill, the request cost."""
        rate = np.asarray(rate, dtype=float)
        busy = rate / self.servers * self.service_s
        ok = busy < 1
        with np.errstate(divide="ignore", invalid="ignore"):
            wait = np.where(ok, busy * self.service_s / (2 * (1 - busy)), np.nan)
        prefill = np.where(ok, self.service_s + self.d.request_s, np.nan)
        return {"ttft_s": wait + prefill, "ttft_queue_s": wait, "ttft_prefill_s": prefill, "saturated": ~ok,
                "busy": busy}

    def saturation(self) -> float:
        """Requests/s a worker holds: one prefill at a time on each of its servers."""
        return self.servers / self.service_s


class DecodePool:
    """One decode worker's steady state: decode steps alone, priced by the one pricer at the mean context."""

    def __init__(self, d: Deployment, prompt: int, gen: int, max_batch: int, kv_sequences: float = math.inf,
                 batches: np.ndarray | None = None, step_s: np.ndarray | None = None):
        self.d, self.P, self.G = d, int(prompt), int(gen)
        self.cap = int(min(max_batch, kv_sequences)) if math.isfinite(kv_sequences) else int(max_batch)
        if batches is None:  # the search hands its own grid in (the same steps); otherwise price them here
            batches = np.arange(1.0, max(self.cap, 1) + 1)
            step = d.step(DECODE, batches, decode_context(self.P + self.G / 2))
            step_s = np.broadcast_to(step.total_s, batches.shape)
        self.batches, self.step_s = np.asarray(batches, dtype=float), np.asarray(step_s, dtype=float)

    def step(self, batch) -> np.ndarray:
        """The decode step at `batch` sequences (at least one), interpolated on the priced grid."""
        return np.interp(np.maximum(batch, 1.0), self.batches, self.step_s)

    def at_rate(self, rate, closed_loop: bool = False) -> dict:
        """TPOT and decoders a worker holds at `rate` requests/s: TPOT = t(λ (G − 1) TPOT + seen), bisected."""
        rate = np.asarray(rate, dtype=float)
        seen = 0.0 if closed_loop else 1.0
        per_request = max(self.G - 1, 1e-9)
        low = np.full(rate.shape, float(self.step(1.0 + seen)))
        high = np.maximum((self.cap - seen) / (rate * per_request), low)  # the cap's TPOT bound at this rate
        ok = (self.cap >= 1) & (self.step(rate * per_request * high + seen) <= high)
        lo, hi = low, high
        for _ in range(BISECTIONS):
            mid = (lo + hi) / 2
            above = self.step(rate * per_request * mid + seen) > mid
            lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
        decoders = rate * per_request * hi
        return {"tpot_s": np.where(ok, hi, np.nan), "decoders": np.where(ok, decoders, np.nan), "saturated": ~ok}


@dataclass
class Disaggregated:
    """x prefill workers of one Deployment, y decode workers of another, one workload (prompt P, output G)."""
    prefill: Deployment
    decode: Deployment
    prefill_workers: int
    decode_workers: int
    prompt: int
    gen: int
    decode_max_batch: int = 256
    decode_kv_sequences: float = math.inf

    def __post_init__(self):
        for name in ("prefill_workers", "decode_workers"):
            value = getattr(self, name)
            if not (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1):
                raise ValueError(f"{name}: must be a whole number of workers >= 1, got {value!r}")
        self.prefill_pool = PrefillPool(self.prefill, self.prompt)
        self.decode_pool = DecodePool(self.decode, self.prompt, self.gen, self.decode_max_batch,
                                      self.decode_kv_sequences)
        self.link = transfer_link(self.prefill.hardware, self.gpus)
        self.transfer_s = kv_transfer_s(self.prefill, self.decode, self.prompt, self.link)
        self.handoff_s = self.prefill.engine.disagg_handoff_s

    @property
    def gpus(self) -> int:
        return (self.prefill_workers * self.prefill.gpus_per_replica
                + self.decode_workers * self.decode.gpus_per_replica)

    def at_rate(self, rate, closed_loop: bool = False) -> dict:
        """Every figure at open-loop rates (requests/s, the whole deployment); NaN where a pool saturates."""
        rate = check_rate(rate)
        pre = self.prefill_pool.at_rate(rate / self.prefill_workers)
        dec = self.decode_pool.at_rate(rate / self.decode_workers, closed_loop=closed_loop)
        wait = pre["ttft_queue_s"]
        if closed_loop:  # n in flight: a request never queues behind itself (at n = 1 nothing waits)
            alone = pre["ttft_prefill_s"] + self.handoff_s + self.transfer_s + (self.gen - 1) * dec["tpot_s"]
            population = rate * (alone + wait)
            wait = wait * np.clip(1 - 1 / np.maximum(population, 1.0), 0.0, 1.0)
        ttft = pre["ttft_prefill_s"] + wait + self.handoff_s + self.transfer_s
        ok = ~pre["saturated"] & ~dec["saturated"]
        nan = lambda x: np.where(ok, x, np.nan)  # noqa: E731
        e2e = ttft + (self.gen - 1) * dec["tpot_s"]
        return {"rate": rate, "saturated": ~ok, "ttft_s": nan(ttft), "tpot_s": nan(dec["tpot_s"]),
                "e2e_s": nan(e2e), "in_flight": nan(rate * e2e), "decoders": nan(dec["decoders"]),
                "ttft_queue_s": nan(wait), "ttft_prefill_s": nan(pre["ttft_prefill_s"]),
                "kv_transfer_s": np.full(rate.shape, self.transfer_s),
                "handoff_s": np.full(rate.shape, self.handoff_s), "prefill_busy": nan(pre["busy"])}

    def saturation(self) -> float:
        """The largest rate both pools hold (requests/s): one prefill at a time a worker, the decode pool's cap."""
        prefill = self.prefill_pool.saturation() * self.prefill_workers
        cap = self.decode_pool.cap
        decode = cap / (max(self.gen - 1, 1) * float(self.decode_pool.step(cap))) * self.decode_workers
        return min(prefill, decode)

    def at_concurrency(self, concurrency) -> dict:
        """Closed loop: C requests in flight; the rate where λ E2E(λ) = C, bisected (λ E2E grows with λ: near the
        prefill pool's saturation the wait, and with it E2E, grows without bound), the rest queued before prefill."""
        concurrency = check_concurrency(concurrency)
        top = self.saturation() * (1 - 1e-9)
        most = float(self.at_rate(np.array([top]), closed_loop=True)["in_flight"][0])  # what the pools hold
        if not np.isfinite(most):
            raise ValueError("concurrency: no steady state at any rate; the pools hold no request")
        held = np.minimum(concurrency, most)
        low, high = np.zeros_like(held), np.full_like(held, top)
        for _ in range(BISECTIONS):
            mid = (low + high) / 2
            above = self.at_rate(mid, closed_loop=True)["in_flight"] > held
            low, high = np.where(above, low, mid), np.where(above, mid, high)
        rate = high
        out = self.at_rate(rate, closed_loop=True)
        queued = concurrency - held
        for name in ("ttft_s", "ttft_queue_s", "e2e_s"):
            out[name] = out[name] + queued / rate
        out.update(concurrency=concurrency, in_flight=held, queued=queued)
        return out
