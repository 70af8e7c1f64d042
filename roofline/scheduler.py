"""The serving policy an engine runs by default: its token budget a step and its cap on running sequences.

A continuous-batching engine fills each step with one token of every running sequence plus prefill chunks, up
to a token budget (vLLM max_num_batched_tokens, SGLang chunked_prefill_size, TensorRT-LLM max_num_tokens), and
runs at most max_sequences at once (vLLM max_num_seqs, SGLang max_running_requests, TensorRT-LLM
max_batch_size). These are the engine's defaults, each with its source (data/engines/*.yaml `scheduler:`);
the load model (roofline.serving.load.Policy) takes them. Not fitted: a default is read, not measured.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .sharding import whole
from .userfile import sourced_section

KEYS = ("token_budget", "max_sequences")


@dataclass(frozen=True)
class Scheduler:
    token_budget: int = 8192  # prefill + decode tokens a step
    max_sequences: int = 256  # running sequences at once
    sources: dict = field(default_factory=dict)  # key -> where its value comes from

    def __post_init__(self):
        for name in KEYS:
            whole(f"scheduler.{name}", getattr(self, name))
        if self.token_budget <= self.max_sequences:
            raise ValueError(f"scheduler.token_budget: {self.token_budget} tokens cannot carry max_sequences "
                             f"{self.max_sequences} decoders and a prefill chunk; fix: a budget above max_sequences")

    def as_document(self) -> dict:
        return {name: {"value": getattr(self, name), "source": self.sources.get(name, "")} for name in KEYS}


DEFAULT_SCHEDULER = Scheduler(sources={
    "token_budget": "an assumption: vLLM's default max_num_batched_tokens on an H100-class GPU (engines without a "
                    "`scheduler:` section)",
    "max_sequences": "an assumption: vLLM's default max_num_seqs before v0.10 on smaller GPUs"})


def scheduler_from_document(raw, where: str) -> Scheduler:
    """The `scheduler:` section of an engine file (absent: DEFAULT_SCHEDULER)."""
    if raw is None:
        return DEFAULT_SCHEDULER
    values, sources = sourced_section(raw, where, "scheduler", KEYS)
    try:
        return Scheduler(sources=sources, **values)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
