"""The serving policy an engine runs by default: its token budget a step and its cap on running sequences.

A continuous-batching engine fills each step with one token of every running sequence plus prefill chunks, up
to a token budget (vLLM max_num_batched_tokens, SGLang chunked_prefill_size, TensorRT-LLM max_num_tokens), and
runs at most max_sequences at once (vLLM max_num_seqs, SGLang max_running_requests, TensorRT-LLM
max_batch_size). These are the engine's defaults, each with its source (data/engines/*.yaml `scheduler:`);
the load model (roofline.serving.load.Policy) takes them. Not fitted: a default is read, not measured.
overlap_steps: steps a new request waits beyond today's admission because the engine schedules step n + 1 on the
host while step n runs on the GPU (TensorRT-LLM's overlap scheduler, on unless disable_overlap_scheduler): a request
that arrives during step n missed step n + 1's batch and joins step n + 2. 0 (absent): admitted at the next step.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .sharding import whole
from .userfile import sourced_section

KEYS = ("token_budget", "max_sequences", "overlap_steps")


@dataclass(frozen=True)
class Scheduler:
    token_budget: int = 8192  # prefill + decode tokens a step
    max_sequences: int = 256  # running sequences at once
    overlap_steps: int = 0  # steps scheduled ahead of the one running: a new request waits that many more
    sources: dict = field(default_factory=dict)  # key -> where its value comes from

    def __post_init__(self):
        for name in KEYS:
            whole(f"scheduler.{name}", getattr(self, name), low=0 if name == "overlap_steps" else 1,
                  fix="0 or 1 (1: the engine schedules the next step while one runs)" if name == "overlap_steps"
                  else "")
        if self.token_budget <= self.max_sequences:
            raise ValueError(f"scheduler.token_budget: {self.token_budget} tokens cannot carry max_sequences "
                             f"{self.max_sequences} decoders and a prefill chunk; fix: a budget above max_sequences")

    def as_document(self) -> dict:
        return {name: {"value": getattr(self, name), "source": self.sources.get(name, "")} for name in KEYS
                if name != "overlap_steps" or self.overlap_steps}  # absent: 0, as engines without one read


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
