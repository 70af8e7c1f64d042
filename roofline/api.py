"""The two entry points: `analyze` (one configuration, several batches) and `sweep` (a grid)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from .bounds import BOUNDS, COMMUNICATION, to_shape
from .compiled import COMPONENTS
from .models.config import ModelConfig, check_context
from .cost import BYTE_CATEGORIES
from .deployment import COLLECTIVE_GROUPS, OVERHEAD_GROUP, Deployment
from .engine import Engine
from .evaluate import evaluate
from .hardware import Hardware
from .model import DECODE, PREFILL, Options, decode_context
from .memory import DEFAULT_PREFILL_CHUNK
from .serving.gap import decode_gap
from .precision import Precision

METRIC_DEFINITIONS = {
    "ttft_s": "time to first token: the prefill of the whole batch",
    "tpot_s": "time per output token: one decode step of the whole batch with prompt_len tokens cached "
              "(excludes the first token)",
    "e2e_s": "TTFT + gen_len - 1 decode steps at their growing contexts",
    "tokens_per_s": "replicas · batch / tpot_s",
    "engine": "the engine profile the times are for (data/engines); 'ideal' is the roofline bound",
    "ideal_ttft_s": "ttft_s at the ideal roofline bound (no engine), beside the engine's",
    "ideal_tpot_s": "tpot_s at the ideal roofline bound (no engine), beside the engine's",
    "ideal_e2e_s": "e2e_s at the ideal roofline bound (no engine), beside the engine's",
    "napkin_tokens_per_s": "replicas · batch / napkin_tpot_s",
    "napkin_tpot_s": "the lecture's napkin: (weight bytes + KV bytes at prompt_len) / memory bandwidth, an MoE's "
                     "weights counting only the min(batch x top_k, experts) routed experts a step can read",
    "decode_bound": "what most of the decode step's roofline time waits on (all-reduces count as communication)",
    "decode_bound_s": "seconds of the decode step spent waiting on its binding resource (before communication)",
    "napkin_memory_bytes": "the lecture's memory: weight bytes + KV bytes at prompt_len (no workspace)",
    "memory_bytes": "weights + KV cache at prompt_len + gen_len tokens + activation workspace of one chunked-prefill "
                    "step (prefill_chunk tokens, default 8192: min(batch, chunk // prompt_len) prompts, or one chunk of "
                    "a longer prompt; its largest prefill op); the lecture's memory figure counts KV at prompt_len and "
                    "no workspace",
    "max_batch": "largest batch whose weights, KV cache at prompt_len + gen_len and one prefill chunk's workspace fit "
                 "in memory",
    "workspace_bytes": "activations of one chunked-prefill step: its largest prefill op, for min(batch, prefill_chunk // "
                       "prompt_len) prompts or one prefill_chunk-token piece of a longer prompt",
    "params_per_gpu": "parameters one GPU holds (its tensor-parallel shard; `params` is the same figure)",
    "params_total": "parameters of the model (each replica holds them all, once)",
    "weight_bytes_total": "weight bytes over every GPU of every replica (the model's weights x replicas)",
    "memory_bytes_per_gpu": "memory one GPU needs (`memory_bytes` is the same figure)",
    "memory_bytes_total": "memory over every GPU of every replica",
}


def _check_positive(name: str, values) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.size == 0 or not np.all(np.isfinite(array)) or np.any(array <= 0) or np.any(array != np.round(array)):
        raise ValueError(f"{name}: must be positive whole numbers, got {values!r}")
    return array


@dataclass(frozen=True)
class Analysis:
    """The metrics of one deployment at each batch size, and the per-op detail behind them."""
    deployment: Deployment
    metrics: pd.DataFrame  # one row per batch size
    prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK  # tokens per prefill step behind the workspace (None: all)
    prompt: int = 1024  # tokens each sequence's prompt holds
    gen: int = 128  # tokens each sequence generates

    config = property(lambda self: self.deployment.config)
    hardware = property(lambda self: self.deployment.hardware)
    precision = property(lambda self: self.deployment.precision)
    options = property(lambda self: self.deployment.options)
    engine = property(lambda self: self.deployment.engine)
    compiled = property(lambda self: self.deployment.compiled)

    def at(self, batch) -> Analysis:
        """The same deployment, workload and prefill chunk at other batch sizes."""
        return analysis_of(self.deployment, batch, self.prompt, self.gen, self.prefill_chunk)

    def what_if(self, **changes) -> Analysis:
        """The analysis of dataclasses.replace(deployment, **changes) at the same batches and workload."""
        return analysis_of(replace(self.deployment, **changes), self.metrics["batch"].to_numpy(), self.prompt,
                           self.gen, self.prefill_chunk)

    def records(self) -> list[dict]:
        rows = self.metrics.to_dict(orient="records")
        return [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()} for row in rows]

    def op_table(self, batch: int, prompt: int) -> pd.DataFrame:
        """Per op of prefill and decode (collectives and fixed overheads included, as their own rows):
        FLOPs, bytes by category, intensity, compute, memory and time at the calibrated corner, bound."""
        frames = []
        for phase, context in ((PREFILL, prompt), (DECODE, decode_context(prompt))):
            step = self.deployment.step(phase, float(batch), float(context))
            model_ops = len(step.components)
            counts = np.array([[float(np.ravel(v)[0]) for v in op] for op in step.components])
            counts = np.vstack([counts, np.zeros((len(step.ops) - model_ops, len(COMPONENTS)))])
            frame = pd.DataFrame(counts, columns=COMPONENTS)
            frame.insert(0, "op", [str(op) for op in step.ops])
            frame.insert(0, "phase", phase)
            frame["group"] = [op.group for op in step.ops]
            frame["term"] = [op.term for op in step.ops]
            frame["count"] = step.counts
            frame["bytes"] = frame[list(BYTE_CATEGORIES)].sum(axis=1)
            frame["intensity"] = frame["flops"] / frame["bytes"].where(frame["bytes"] > 0)
            first = lambda values: np.array([float(np.ravel(v)[0]) for v in values])  # noqa: E731
            compute, memory = first(step.compute_s), first(step.memory_s)
            frame["compute_s"], frame["memory_s"], frame["time_s"] = compute, memory, first(step.time_s)
            bound = np.where(compute >= memory, "compute", "memory")
            fixed = np.arange(len(step.ops)) >= model_ops
            frame["bound"] = np.where(fixed, [BOUNDS[COMMUNICATION] if op.group in COLLECTIVE_GROUPS else OVERHEAD_GROUP
                                              for op in step.ops], bound)
            frames.append(frame)
        return pd.concat(frames, ignore_index=True)

    def decode_terms(self, batch: int, prompt: int) -> pd.Series:
        """Seconds of one decode step per term (op name without its layer group; collectives and the
        engine's fixed overheads are terms of their own): the terms add up to the TPOT."""
        ops = self.op_table(batch, prompt)
        decode = ops[ops["phase"] == DECODE]
        return decode.groupby("term", sort=False)["time_s"].sum()

    def engine_gap(self, batch: int, prompt: int) -> pd.Series:
        """Seconds of one decode step the engine adds to the ideal bound, by named term (roofline.serving.gap)."""
        return decode_gap(self.deployment, batch, prompt)


def analyze(model: str | ModelConfig = "llama-2-13b", hardware: str | Hardware = "h100-sxm", batch=(1,),
            prompt: int = 1024, gen: int = 128, precision: Precision | None = None, options: Options | None = None,
            tp: int = 1, replicas: int = 1, engine: str | Engine | None = None,
            allow_beyond_window: bool = False, prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK,
            expert_tp: int | None = None, **overrides) -> Analysis:
    """Prefill, decode, memory and E2E metrics of one model on one device at each batch size.

    tp, replicas: tensor-parallel degree and model copies (roofline.deployment): with tp > 1 the
    memory figures are per GPU and the step times include the all-reduces (comm_s).
    expert_tp: of the tp GPUs, how many split each routed expert (Deployment.expert_tp; None: all tp).
    engine: a profile (data/engines name, YAML path or Engine): the times are that engine's estimate,
    and ideal_ttft_s, ideal_tpot_s, ideal_e2e_s keep the roofline bound beside them.
    overrides: architecture what-ifs applied to the config (n_kv_heads=8, cla_factor=2, ...).
    prompt + gen beyond the model's context window is refused unless allow_beyond_window.
    prefill_chunk: prompt tokens per prefill step, which sizes the activation workspace (None: the whole batch).
    """
    deployment = Deployment.of(model, hardware, precision=precision, options=options, tp=tp,
                               replicas=replicas, engine=engine, expert_tp=expert_tp, **overrides)
    prompt = _check_positive("prompt", prompt)
    gen = _check_positive("gen", gen)
    check_context(deployment.config, prompt + gen, allow=allow_beyond_window)
    return analysis_of(deployment, batch, prompt, gen, prefill_chunk)


def analysis_of(deployment: Deployment, batch, prompt, gen, prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK
                ) -> Analysis:
    """`analyze` of a Deployment already built: its metrics at each batch (the context window is the caller's)."""
    batches = _check_positive("batch", np.atleast_1d(batch))
    prompt, gen = _check_positive("prompt", prompt), _check_positive("gen", gen)
    if not deployment.compiled.params < MAX_PARAMS:
        raise ValueError(f"model {deployment.config.name!r}: {float(deployment.compiled.params):.3g} parameters; fix: "
                         "check hidden_size, intermediate_size, vocab_size and the expert counts (sizes this large are "
                         "typos)")
    values = with_ideal(deployment, evaluate(deployment, batches, prompt, gen, parallel_columns=True,
                                             prefill_chunk=prefill_chunk),
                        lambda d: evaluate(d, batches, prompt, gen, parallel_columns=True, prefill_chunk=prefill_chunk))
    metrics = _frame(_with_scopes(values, deployment), integers=True)
    return Analysis(deployment, metrics, prefill_chunk, int(prompt), int(gen))


@dataclass(frozen=True)
class EngineName:
    """The engine column before it is a column: one name over the points' shape (a sweep's million
    points would otherwise build a million strings; _frame makes it a categorical)."""
    name: str
    shape: tuple


def with_ideal(deployment: Deployment, values: dict, evaluate_at) -> dict:
    """The engine's name and the ideal bound's TTFT, TPOT and E2E beside its estimate (the same numbers
    when the engine is the ideal one; priced again, once, when it is not)."""
    ideal = values if deployment.engine.is_ideal else evaluate_at(replace(deployment, engine=Engine()))
    out = {**values, "engine": EngineName(deployment.engine.name, np.shape(values["tpot_s"]))}
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        if name in ideal:
            out[f"ideal_{name}"] = ideal[name]
    return out


def _with_scopes(values: dict, d: Deployment) -> dict:
    """Each size figure twice, labelled by scope: on one GPU (`params`, `weight_bytes` and `memory_bytes` are
    that shard's, as before) and over the whole deployment (every GPU of every replica)."""
    shape = np.shape(values["tpot_s"])
    params_total, routed_total = d.whole_model_params
    if d.precision.experts is None:
        routed_total = 0  # b_e = b_w: no separate expert bytes
    scoped = {"params_per_gpu": values["params"], "params_total": params_total,
              "weight_bytes_per_gpu": values["weight_bytes"],
              "weight_bytes_total": d.precision.held_weight_bytes(params_total, routed_total) * d.replicas,
              "memory_bytes_per_gpu": values["memory_bytes"], "memory_bytes_total": values["memory_bytes"] * d.gpus}
    return {**values, **{name: to_shape(value, shape) for name, value in scoped.items()}}


MAX_PARAMS = 1e18  # parameter counts are reported as 64-bit integers; no model comes within 10^5 of this
INTEGER_COLUMNS = ("batch", "prompt_len", "gen_len", "params", "params_per_gpu", "params_total", "max_batch", "tp",
                   "replicas", "gpus")


BOUND_NAMES = np.asarray(BOUNDS, dtype=object)


def _frame(values: dict, integers: bool) -> pd.DataFrame:
    """Flatten to one row per point; bound codes become names (and counts integers for analyze).

    Names are plain strings for a few rows and categoricals for a sweep's many (memory, not speed).
    """
    columns = {}
    for name, value in values.items():
        if isinstance(value, EngineName):
            size = int(np.prod(value.shape))
            columns[name] = (pd.Categorical.from_codes(np.zeros(size, dtype=np.int8), [value.name]) if size >= 10_000
                             else np.full(size, value.name, dtype=object))
            continue
        flat = np.ravel(value)
        if name in ("decode_bound", "prefill_bound"):
            many = flat.size >= 10_000
            flat = pd.Categorical.from_codes(flat, categories=list(BOUNDS)) if many else BOUND_NAMES[flat]
        elif integers and name in INTEGER_COLUMNS:
            flat = flat.astype(np.int64)
        columns[name] = flat
    return pd.DataFrame(columns, copy=False)  # the arrays are fresh: no need to copy them into one block


def sweep(model: str | ModelConfig, hardware: str | Hardware, batch=(1,), context=(1024,), gen=(128,),
          weights=("bf16",), kv=("bf16",), activations=("bf16",), options: Options | None = None,
          e2e: bool = True, prefill: bool = True, tp: int = 1, replicas: int = 1,
          engine: str | Engine | None = None, prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK,
          experts: str | None = None, **overrides) -> pd.DataFrame:
    """Every batch with every context (and every gen length and precision given): one row per point.

    Columns are those of `analyze` (context is `prompt_len`) plus the precision names (`experts`: the routed
    experts' format, one for every point; None: each point's weights format);
    prefill=False gives a decode-only sweep (no TTFT/E2E), e2e=False skips E2E only; tp and
    replicas and engine as in `analyze`.
    """
    base = Deployment.of(model, hardware, options=options, tp=tp, replicas=replicas,
                         engine=engine, **overrides)
    batches = _check_positive("batch", np.atleast_1d(batch))
    contexts = _check_positive("context", np.atleast_1d(context))
    gens = _check_positive("gen", np.atleast_1d(gen))
    frames = []
    columns_b, rows_s, depth_g = batches[:, None, None], contexts[None, :, None], gens[None, None, :]
    for w, k, a in itertools.product(np.atleast_1d(weights), np.atleast_1d(kv), np.atleast_1d(activations)):
        precision = Precision(weights=str(w), kv=str(k), activations=str(a), experts=experts)
        deployment = replace(base, precision=precision)
        # one GPU's sweep stays free of the parallel columns (and fast)
        values = with_ideal(deployment, evaluate(deployment, columns_b, rows_s, depth_g, e2e, prefill,
                                                 prefill_chunk=prefill_chunk),
                            lambda d: evaluate(d, columns_b, rows_s, depth_g, e2e, prefill, prefill_chunk=prefill_chunk))
        frame = _frame(values, integers=False)
        frame["weights"], frame["kv"], frame["activations"] = precision.weights, precision.kv, precision.activations
        frame["experts"] = precision.expert_format
        frames.append(frame)
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
