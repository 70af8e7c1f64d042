"""How the serving rows' engines were launched, where the launch script is public: data/published/serving-launches.csv.

serving-hopper.csv states a row's weight formats and layout but not its KV-cache format or the engine flags it ran
under. Its InferenceMAX / InferenceX rows (those with a `measured=` date in silicon_data_source) were launched by
public scripts (github:SemiAnalysisAI/InferenceX, benchmarks/), and those scripts say what the row ran with. Each line
of the launch file is one (backend, model_path, system, measured date) group, read at the last commit that touched its
script on or before that date: the KV-cache format (TensorRT-LLM's `kv_cache_config: dtype`, vLLM's and SGLang's
`--kv-cache-dtype`; blank where the script sets none: the engine's default, 16-bit for these checkpoints), the memory
fraction (TensorRT-LLM `free_gpu_memory_fraction`, vLLM `--gpu-memory-utilization`, SGLang `--mem-fraction-static`:
the fraction of the engine's own rule, roofline.kv_memory; blank: the profile's default), the token budget
(TensorRT-LLM `--max_num_tokens`, vLLM `max-num-batched-tokens`, SGLang `--chunked-prefill-size`; a number, or the
DeepSeek-R1 scripts' rule "C+P+64 in 64s[, at least N]", (C + P + 64) rounded up to a multiple of 64; blank: the
profile's), the output tokens a streamed chunk and the post-processing workers (TensorRT-LLM's `stream_interval` and
`num_postprocess_workers`: every InferenceX TensorRT-LLM script sets 10, or 20 with 4 workers for gpt-oss; blank: the
engine's defaults, 1 and 0; they set the load on the server's front end, roofline.serving.front_end), the batch wait
(TensorRT-LLM's batch_wait_timeout_iters and batch_wait_max_tokens_ratio, "T steps or r of the budget[ at ISL/OSL
below tp N]", the script's condition on the stated lengths and tp; blank: off, its default;
roofline.serving.batch_wait), the steps the scheduler batches ahead of the one running (vLLM's async scheduling: 1
where the script sets `async-scheduling: true` or its image is v0.14.0 or later, whose default it is, vLLM PR #27614
and the v0.14.0 release notes; a request arriving during step n then joins step n + 2; blank: the profile's,
roofline.scheduler), why a group is left out (a launch that is not what the row states), the client's length
ratio, the script, the commit and the lines that say so. The length ratio r is InferenceX's `--random-range-ratio`
(0.8 in every sweep): its client (utils/bench_serving/benchmark_serving.py, sample_uniform; kimbochen/bench_serving's
the same before it) draws each request's input and output lengths uniformly over the whole numbers in [⌊r L⌋, L], and
`--ignore-eos` holds the output to its draw. A row's `isl` and `osl` are then the largest lengths, not every
request's: such a row is priced at the mean, (⌊r L⌋ + L) / 2 (921.5 tokens for 1024, 7,372.5 for 8192), to the nearest
whole token. The ratio's sources: `random-range-ratio: 0.8` in .github/workflows/full-sweep-tmpl.yml (e06929c70,
9596d23d7), the default of benchmark-tmpl.yml (25506e87c) and `RANDOM_RANGE_RATIO: 0.8` from e28c038f8 on; the
sampling, sample_uniform in utils/bench_serving/benchmark_serving.py (d053ae24e).

Why it matters: the KV pool holds twice the sequences in fp8. TensorRT-LLM reserves a request's prompt and output
blocks when it admits it (GUARANTEED_NO_EVICT), so past the pool the rest queue: Llama-3.3-70B fp8 on one H200, 1024
in / 8192 out, measures TTFT 0.45 s at C = 32, 80 s at 64 and 369 s at 128 with TPOT 30.4-30.5 ms at both 64 and 128
(the running batch capped). A closed loop of C clients over N running slots waits (C / N − 1) x E2E: 80 s and 369 s
give N ~ 47 and ~ 48 at the client's mean lengths (below), the pool of an fp8 cache (51 sequences of 922 + 7,373
tokens here), not a 16-bit one's 25 (tests/test_launches.py). A row whose group is not in the file keeps the 16-bit
cache, the profile's defaults and its stated lengths.
"""
from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from ..engine import Engine
from ..hardware import DATA_DIR
from ..precision import BITS

LAUNCHES = DATA_DIR / "published" / "serving-launches.csv"
COLUMNS = ("backend", "model_path", "system", "measured", "kv_cache_dtype", "memory_fraction", "token_budget",
           "stream_interval", "postprocess_workers", "batch_wait", "overlap_steps", "left_out", "length_ratio", "script",
           "commit", "evidence")
# a file without them: the engine's defaults
OPTIONAL_COLUMNS = ("stream_interval", "postprocess_workers", "batch_wait", "overlap_steps")
MEASURED = re.compile(r"measured=(\d{4}-\d{2}-\d{2})")
BUDGET_RULE = re.compile(r"C\+P\+(\d+) in (\d+)s(?:, at least (\d+))?")
BATCH_WAIT_RULE = re.compile(r"(\d+) steps or ([0-9.]+) of the budget(?: at (\d+)/(\d+) below tp (\d+))?")


@dataclass(frozen=True)
class BatchWait:
    """A launch's batch wait (TensorRT-LLM batch_wait_timeout_iters `steps`, batch_wait_max_tokens_ratio `ratio`;
    roofline.serving.batch_wait), set for every row, or only at stated lengths `isl`/`osl` below tp `below_tp`."""
    steps: int
    ratio: float
    isl: int | None = None
    osl: int | None = None
    below_tp: int | None = None

    def at(self, isl: int, osl: int, tp: int) -> tuple[int, float]:
        """(steps, ratio) for a row of these stated lengths and tp; (0, 0.0) where the script's condition fails."""
        if self.isl is not None and (isl, osl) != (self.isl, self.osl) or self.below_tp is not None and tp >= self.below_tp:
            return 0, 0.0
        return self.steps, self.ratio


@dataclass(frozen=True)
class TokenBudget:
    """A launch's token budget: `fixed` tokens, or (C + P + plus) rounded up to `multiple`, at least `floor`."""
    fixed: int | None = None
    plus: int = 0
    multiple: int = 1
    floor: int = 0

    def tokens(self, concurrency: int, prompt: int) -> int:
        if self.fixed is not None:
            return self.fixed
        return max(self.floor, math.ceil((concurrency + prompt + self.plus) / self.multiple) * self.multiple)


@dataclass(frozen=True)
class Launch:
    kv_cache_dtype: str | None  # None: not set, the engine's default (16-bit for these checkpoints)
    memory_fraction: float | None  # None: the profile's
    token_budget: TokenBudget | None  # None: the profile's
    left_out: str  # "" or why the group's rows are not what they state
    length_ratio: float | None  # the client's: lengths uniform in [⌊r L⌋, L]; None: every request L
    script: str  # path@commit of the launch script
    stream_interval: int = 1  # output tokens a streamed chunk (TensorRT-LLM's stream_interval; blank: its default 1)
    postprocess_workers: int = 0  # TensorRT-LLM's num_postprocess_workers (blank: its default 0)
    batch_wait: BatchWait | None = None  # prompts held to run together (TensorRT-LLM's batch wait); None: off
    overlap_steps: int | None = None  # steps the engine batches ahead of the one running (vLLM's async scheduling)

    def batch_wait_at(self, isl: int, osl: int, tp: int) -> tuple[int, float]:
        """(steps, ratio) of the batch wait a row of these stated lengths and tp ran under; (0, 0.0): none."""
        return (0, 0.0) if self.batch_wait is None else self.batch_wait.at(isl, osl, tp)

    def engine(self, engine: Engine) -> Engine:
        """`engine` with the launch's memory fraction (its own rule's) and the steps its scheduler batches ahead, each
        where the launch set one."""
        if self.memory_fraction is not None:
            engine = replace(engine, memory=replace(engine.memory, fraction=self.memory_fraction))
        if self.overlap_steps is not None:
            engine = replace(engine, scheduler=replace(engine.scheduler, overlap_steps=self.overlap_steps))
        return engine

    @property
    def lengths_vary(self) -> bool:
        """Whether the client drew each request's lengths at random (a ratio below 1), not one length for all."""
        return self.length_ratio is not None and self.length_ratio < 1

    def mean_length(self, stated: int) -> int:
        """The mean of a request's length the row states as `stated` (its largest where the client spreads them)."""
        if self.length_ratio is None:
            return stated
        return int(math.floor((math.floor(self.length_ratio * stated) + stated) / 2 + 0.5))

    def budget(self, concurrency: int, stated_prompt: int) -> int | None:
        """The token budget the row ran with (the script's rule at the row's concurrency and stated input length);
        None: the profile's."""
        return None if self.token_budget is None else self.token_budget.tokens(concurrency, stated_prompt)


def measured_date(raw: dict) -> str:
    """The row's `measured=` date (YYYY-MM-DD) in silicon_data_source, "" where not stated."""
    found = MEASURED.search(raw.get("silicon_data_source") or "")
    return found.group(1) if found else ""


def _budget(text: str, where: str) -> TokenBudget | None:
    if not text:
        return None
    if text.isdigit() and int(text) >= 2:
        return TokenBudget(fixed=int(text))
    rule = BUDGET_RULE.fullmatch(text)
    if rule is None:
        raise ValueError(f"{where}: field 'token_budget' {text!r} is neither a number of tokens nor a rule; fix: e.g. "
                         "8192, or 'C+P+64 in 64s' ((C + P + 64) rounded up to 64), or blank for the profile's")
    return TokenBudget(plus=int(rule.group(1)), multiple=int(rule.group(2)), floor=int(rule.group(3) or 0))


def _batch_wait(text: str, where: str) -> BatchWait | None:
    if not text:
        return None
    rule = BATCH_WAIT_RULE.fullmatch(text)
    ratio = float(rule.group(2)) if rule and re.fullmatch(r"\d+(\.\d+)?", rule.group(2)) else math.nan
    if rule is None or not 0 < ratio <= 1 or int(rule.group(1)) < 1:
        raise ValueError(f"{where}: field 'batch_wait' {text!r} is no batch wait; fix: e.g. '20 steps or 0.9 of the "
                         "budget' (batch_wait_timeout_iters, batch_wait_max_tokens_ratio), optionally followed by "
                         "' at 1024/1024 below tp 8' (the script's condition), or blank where the script sets none")
    condition = [None if g is None else int(g) for g in rule.group(3, 4, 5)]
    return BatchWait(int(rule.group(1)), ratio, *condition)


def _overlap(text: str, where: str) -> int | None:
    """The steps a launch's scheduler batches ahead: 0 or 1, None where blank (the profile's)."""
    if not text:
        return None
    if text not in ("0", "1"):
        raise ValueError(f"{where}: field 'overlap_steps' must be 0 or 1, got {text!r}; fix: 1 where the engine schedules "
                         "the next step while one runs (vLLM's async scheduling), 0 where it does not, blank for the "
                         "profile's")
    return int(text)


def _fraction(text: str, where: str, field: str, blank: str) -> float | None:
    """A column holding a fraction in (0, 1], None where blank (`blank` says what that means)."""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise ValueError(f"{where}: field {field!r} must be in (0, 1], got {text!r}; fix: the launch's value, or "
                         f"blank {blank}")
    return value


def _count(text: str, where: str, field: str, low: int, default: int) -> int:
    """A column holding a whole number >= low, `default` where blank (the engine's own)."""
    if not text:
        return default
    if not (text.isdigit() and int(text) >= low):
        raise ValueError(f"{where}: field {field!r} must be a whole number >= {low}, got {text!r}; fix: the launch's "
                         f"value, or blank for the engine's default ({default})")
    return int(text)


def _launch(raw: dict, where: str) -> Launch:
    kv = raw["kv_cache_dtype"].strip() or None
    if kv is not None and kv not in BITS:
        raise ValueError(f"{where}: field 'kv_cache_dtype' {kv!r} is no format; fix: one of {', '.join(sorted(BITS))}, "
                         "or blank where the script sets none")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw["measured"].strip()):
        raise ValueError(f"{where}: field 'measured' must be YYYY-MM-DD, got {raw['measured']!r}")
    if not (raw["script"].strip() and re.fullmatch(r"[0-9a-f]{40}", raw["commit"].strip()) and raw["evidence"].strip()):
        raise ValueError(f"{where}: a launch needs its script, commit (40 hex digits) and evidence; fix: cite the "
                         "script's lines at the commit")
    return Launch(kv, _fraction(raw["memory_fraction"].strip(), where, "memory_fraction", "for the profile's"),
                  _budget(raw["token_budget"].strip(), where), raw["left_out"].strip(),
                  _fraction(raw["length_ratio"].strip(), where, "length_ratio",
                            "where every request has the stated lengths (the client's --random-range-ratio)"),
                  f"{raw['script'].strip()}@{raw['commit'].strip()}",
                  _count((raw.get("stream_interval") or "").strip(), where, "stream_interval", 1, 1),
                  _count((raw.get("postprocess_workers") or "").strip(), where, "postprocess_workers", 0, 0),
                  _batch_wait((raw.get("batch_wait") or "").strip(), where),
                  _overlap((raw.get("overlap_steps") or "").strip(), where))


@lru_cache(maxsize=None)
def read_launches(path: Path = LAUNCHES) -> dict:
    """{(backend, model_path, system, measured): Launch}; a line that does not read raises naming the file, the
    line and the field."""
    table = {}
    with Path(path).open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ()) and c not in OPTIONAL_COLUMNS]
        if missing:
            raise ValueError(f"{str(path)!r}: no column {', '.join(missing)}; fix: the header is {','.join(COLUMNS)}")
        for line, raw in enumerate(reader, start=2):
            where = f"{str(path)!r}: line {line}"
            key = tuple(raw[c].strip() for c in COLUMNS[:4])
            if key in table:
                raise ValueError(f"{where}: group {key} given twice; fix: keep one line a group")
            table[key] = _launch(raw, where)
    return table


def launch_of(raw: dict, path: Path = LAUNCHES) -> Launch | None:
    """The launch of a serving-hopper.csv row's group, None where the file does not hold it."""
    key = (raw.get("backend", ""), raw.get("model_path", ""), raw.get("system", ""), measured_date(raw))
    return read_launches(path).get(key) if key[3] else None
