"""How a serving engine sizes its KV cache: the device's usable bytes, a runtime reserve, the engine's fraction rule.

The device shows the runtime more than its datasheet's decimal gigabytes (an H100 80GB: 81,559 MiB =
85.5e9 bytes to CUDA; data/hardware.json `usable_memory_bytes`). Of that, the runtime keeps a reserve (the
CUDA context, cuBLAS and NCCL workspaces) and the engine takes a fraction for its KV pool, by one of two rules:
  total: the fraction of the device's bytes bounds weights + activations + KV (vLLM gpu_memory_utilization,
         default 0.9: KV = 0.9 x usable − weights − activations);
  free:  the fraction of what is free once weights, activations and the runtime are in (TensorRT-LLM
         KvCacheConfig.free_gpu_memory_fraction, default 0.9: KV = 0.9 x (usable − reserve − weights − activations)).
The pool holds whole blocks (vLLM 16 tokens, TensorRT-LLM 32): a sequence takes ⌈tokens / block⌉ blocks.
When a sequence takes them is the engine's admission rule:
  reserve:   its prompt's and output's blocks at admission, P + G tokens for its whole life (TensorRT-LLM's default
             capacity policy GUARANTEED_NO_EVICT: a request is scheduled only if its maximum blocks fit);
  on_demand: its prompt's at admission, then a block as its output reaches one (vLLM's KVCacheManager.allocate_slots
             each step; when none is free the scheduler preempts the newest running request, frees its blocks and
             recomputes it later). Sequences spread evenly over their output hold P + G / 2 tokens on average, so a
             steady stream of them fits in the pool at that size; the recomputation of the preempted is left out.
The ideal bound (no engine) keeps everything but the reserve, in one-token blocks, reserved.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .userfile import sourced_section

TOTAL, FREE = "total", "free"
RULES = (TOTAL, FREE)
RESERVE, ON_DEMAND = "reserve", "on_demand"
ADMISSIONS = (RESERVE, ON_DEMAND)
# The runtime's own bytes: the CUDA context alone is ~0.5 GiB on Hopper under CUDA 12 (it holds the kernels
# of every loaded library), and cuBLAS / NCCL keep workspaces beside it. A stated assumption, not measured here.
RUNTIME_RESERVE_BYTES = 1 << 30


@dataclass(frozen=True)
class KvMemory:
    """An engine's KV pool rule: which bytes its fraction applies to, the fraction, the block, the reserve."""
    rule: str = FREE
    fraction: float = 1.0  # of the rule's bytes the KV pool takes
    block_tokens: int = 1
    reserve_bytes: float = RUNTIME_RESERVE_BYTES
    admission: str = RESERVE  # when a sequence takes its blocks: all at admission, or as its tokens arrive
    sources: dict = field(default_factory=dict)  # parameter -> where its value comes from

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"memory.rule: unknown rule {self.rule!r}; use '{TOTAL}' (a fraction of the device, as vLLM) "
                             f"or '{FREE}' (a fraction of what is free after the weights, as TensorRT-LLM)")
        if isinstance(self.fraction, bool) or not isinstance(self.fraction, (int, float)) or not 0 < self.fraction <= 1:
            raise ValueError(f"memory.fraction: must be in (0, 1] (the share of memory the KV pool takes), got "
                             f"{self.fraction!r}")
        if isinstance(self.block_tokens, bool) or not isinstance(self.block_tokens, int) or self.block_tokens < 1:
            raise ValueError(f"memory.block_tokens: must be a whole number of tokens >= 1, got {self.block_tokens!r}; "
                             "vLLM uses 16, TensorRT-LLM 32")
        if not (isinstance(self.reserve_bytes, (int, float)) and 0 <= self.reserve_bytes < math.inf):
            raise ValueError(f"memory.reserve_bytes: must be a finite number of bytes >= 0, got {self.reserve_bytes!r}")
        if self.admission not in ADMISSIONS:
            raise ValueError(f"memory.admission: unknown rule {self.admission!r}; use '{RESERVE}' (prompt and output "
                             f"blocks held from admission, as TensorRT-LLM) or '{ON_DEMAND}' (a block as tokens arrive, "
                             "as vLLM)")

    def budget(self, usable_bytes: float, weight_bytes) -> tuple:
        """(room, share): the KV pool and the activations it makes room for satisfy KV + share x activations <= room
        on a device showing `usable_bytes` (the total rule counts activations whole, the free rule its fraction)."""
        if self.rule == TOTAL:
            return self.fraction * usable_bytes - weight_bytes, 1.0
        return self.fraction * (usable_bytes - self.reserve_bytes - weight_bytes), self.fraction

    def kv_room(self, usable_bytes: float, weight_bytes, activation_bytes=0.0):
        """Bytes the KV pool may take beside `activation_bytes` of activations (arrays broadcast); never below 0."""
        room, share = self.budget(usable_bytes, weight_bytes)
        return np.maximum(room - share * activation_bytes, 0.0)

    def blocks_tokens(self, tokens):
        """Tokens a sequence of `tokens` takes in whole blocks."""
        return np.ceil(np.asarray(tokens, dtype=float) / self.block_tokens) * self.block_tokens

    def resident_tokens(self, prompt, gen):
        """Tokens a sequence of `prompt` in and `gen` out holds in the pool, in whole blocks, over its life in a steady
        stream: P + G reserved, or P + G / 2 on average taken on demand (the admission rules above)."""
        held = np.asarray(gen, dtype=float) / 2 if self.admission == ON_DEMAND else np.asarray(gen, dtype=float)
        return self.blocks_tokens(np.asarray(prompt, dtype=float) + held)

    def as_document(self) -> dict:
        out = {"rule": self.rule, "fraction": {"value": self.fraction, "source": self.sources.get("fraction", "")},
               "block_tokens": {"value": self.block_tokens, "source": self.sources.get("block_tokens", "")},
               "reserve_bytes": {"value": self.reserve_bytes, "source": self.sources.get("reserve_bytes", "")}}
        if self.admission != RESERVE or "admission" in self.sources:  # absent from a file: reserve
            out["admission"] = {"value": self.admission, "source": self.sources.get("admission", "")}
        return out


IDEAL_MEMORY = KvMemory(sources={"fraction": "the ideal bound: every byte beside the weights and the reserve",
                                 "block_tokens": "the ideal bound: contiguous, one-token blocks"})


def memory_from_document(raw, where: str) -> KvMemory:
    """The `memory:` section of an engine file (absent: the ideal bound's)."""
    if raw is None:
        return IDEAL_MEMORY
    values, sources = sourced_section(raw, where, "memory", ("fraction", "block_tokens", "reserve_bytes", "admission"),
                                      plain=("rule",))
    try:
        return KvMemory(sources=sources, **values)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
