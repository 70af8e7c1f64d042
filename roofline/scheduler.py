"""The serving policy an engine runs by default: its token budget a step, its cap on running sequences, and whether
a step mixes prompts with the running sequences' decode tokens.

A continuous-batching engine fills each step up to a token budget (vLLM max_num_batched_tokens, SGLang
chunked_prefill_size, TensorRT-LLM max_num_tokens) and runs at most max_sequences at once (vLLM max_num_seqs, SGLang
max_running_requests, TensorRT-LLM max_batch_size). How a step is filled, `step_policy`:
  mixed          one token of every running sequence plus prefill chunks in the rest of the budget (vLLM's
                 chunked prefill, TensorRT-LLM's in-flight batching);
  prefill_first  a step with prompts waiting carries prompt tokens alone, up to the budget, and the running
                 sequences pause for it; decode steps carry the decoders alone (SGLang's default: its scheduler
                 runs a new prefill batch whenever one can be formed, get_next_batch_to_run, and mixes decode tokens
                 into it only under --enable-mixed-chunk, off by default; data/engines/sglang.yaml gives the source).
overlap_steps: steps a new request waits beyond today's admission because the engine schedules step n + 1 on the
host while step n runs on the GPU (TensorRT-LLM's overlap scheduler, on unless disable_overlap_scheduler): a request
that arrives during step n missed step n + 1's batch and joins step n + 2. 0 (absent): admitted at the next step.
attention_dp_balance_steps: under attention data parallelism (Deployment.ep), the steps a prompt is held at most until
every rank holds one, so that all ranks run their chunks in the same step (TensorRT-LLM attention_dp_config
enable_balance with timeout_iters; roofline.serving.attention_dp gives the rule and its wait). 0 (absent): each rank
runs its own prompts as they come, the step waiting for the busiest (TensorRT-LLM's default, vLLM's, SGLang's).
These are the engine's defaults, each with its source (data/engines/*.yaml `scheduler:`); the load model
(roofline.serving.load.Policy) takes them. Not fitted: a default is read, not measured.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .sharding import whole
from .userfile import sourced_section

MIXED, PREFILL_FIRST = "mixed", "prefill_first"
STEP_POLICIES = (MIXED, PREFILL_FIRST)
COUNTS = ("token_budget", "max_sequences", "overlap_steps", "attention_dp_balance_steps")
OPTIONAL = ("overlap_steps", "attention_dp_balance_steps")  # 0 when absent from the file, and left out of it
KEYS = (*COUNTS, "step_policy")


@dataclass(frozen=True)
class Scheduler:
    token_budget: int = 8192  # prefill + decode tokens a step (prefill_first: prompt tokens a prefill step)
    max_sequences: int = 256  # running sequences at once
    overlap_steps: int = 0  # steps scheduled ahead of the one running: a new request waits that many more
    sources: dict = field(default_factory=dict)  # key -> where its value comes from
    step_policy: str = MIXED  # how a step is filled (the module docstring)
    attention_dp_balance_steps: int = 0  # steps a prompt waits at most for every data-parallel rank to hold one

    def __post_init__(self):
        fixes = {"overlap_steps": "0 or 1 (1: the engine schedules the next step while one runs)",
                 "attention_dp_balance_steps": "0 (no balancing) or TensorRT-LLM's attention_dp_config.timeout_iters"}
        for name in COUNTS:
            whole(f"scheduler.{name}", getattr(self, name), low=0 if name in OPTIONAL else 1, fix=fixes.get(name, ""))
        if self.step_policy not in STEP_POLICIES:
            raise ValueError(f"scheduler.step_policy: unknown policy {self.step_policy!r}; fix: one of "
                             f"{', '.join(STEP_POLICIES)}")
        if self.token_budget <= self.max_sequences and self.step_policy == MIXED:
            raise ValueError(f"scheduler.token_budget: {self.token_budget} tokens cannot carry max_sequences "
                             f"{self.max_sequences} decoders and a prefill chunk; fix: a budget above max_sequences")

    def as_document(self) -> dict:
        # absent from the file, as engines without one read: overlap_steps 0, attention_dp_balance_steps 0, mixed
        shown = [n for n in KEYS if not (n in OPTIONAL and not getattr(self, n))
                 and not (n == "step_policy" and self.step_policy == MIXED and n not in self.sources)]
        return {name: {"value": getattr(self, name), "source": self.sources.get(name, "")} for name in shown}


DEFAULT_SCHEDULER = Scheduler(sources={
    "token_budget": "an assumption: vLLM's default max_num_batched_tokens on an H100-class GPU (engines without a "
                    "`scheduler:` section)",
    "max_sequences": "an assumption: vLLM's default max_num_seqs before v0.10 on smaller GPUs"})


def scheduler_from_document(raw, where: str) -> Scheduler:
    """The `scheduler:` section of an engine file (absent: DEFAULT_SCHEDULER; no step_policy: mixed)."""
    if raw is None:
        return DEFAULT_SCHEDULER
    values, sources = sourced_section(raw, where, "scheduler", KEYS)
    try:
        return Scheduler(sources=sources, **values)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
