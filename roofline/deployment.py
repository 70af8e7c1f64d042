"""The one step pricer: a model on a device at a precision, under an engine, split tp × pp × ep, replicated.

`Deployment.step` prices one step of one replica as a table of ops: every model op one GPU runs
(times its layer count), then the collectives (tensor-parallel all-reduces, pipeline hand-offs,
expert all-to-alls) and the engine's fixed overheads as rows of their own. The step's
time is the sum of the table (the roofs carry no fixed time); its binding resource is what the largest
share waits on (the collectives when they take longer than any other wait). `Deployment.of` is the one
place names and files become objects; every estimate takes a Deployment first and none builds roofs or
shards itself.

The achievable roofs are one field, `engine` (roofline/engine.py: the efficiencies its kernels reach, its
launch and host latencies, its quantized GEMVs, its all-reduce latency; a harness fit is one too): its roofs
come through `roofs`, its fixed costs (per step, per running sequence, per layer) are overhead rows beside the
collectives, its all-reduce latency prices the collectives, and its per-request cost is in TTFT (roofline.evaluate).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from .bounds import COMMUNICATION, Roofs, StepTimes, step_times, total
from .ops import ATTENTION_MATMUL
from .compiled import CompiledModel, CompiledPhase, compile_model, compile_queries
from .models.config import MOE, ModelConfig, load_model
from .engine import IDEAL, KERNEL, Engine, load_engine
from .gemm_shape import NO_SHAPE
from .hardware import Hardware, load_hardware
from .model import (DECODE, PREFILL, QUERIES, OpName, Options, decode_context, parameter_count,
                    routed_parameter_count)
from .precision import FP4_ACTIVATIONS, Precision
from .sharding import (ALLREDUCES_PER_LAYER, ALLTOALLS_PER_MOE_LAYER, alltoall_send_bytes, is_routed,
                       link, shard, stage_layers, stage_memory_bytes, whole)

E2E_NODES = 33  # trapezoid nodes over the decode steps: exact wherever TPOT is linear in context
COLLECTIVE_GROUPS = ("tp", "pp", "ep")
OVERHEAD_GROUP = "overhead"
SEQUENCES_OP = "sequences"  # the overhead row priced per running sequence (the others per step or per layer)


@dataclass(frozen=True)
class Step:
    """One step of one replica, op by op: the model's ops, then collectives and fixed overheads."""
    phase: str
    ops: tuple  # OpName per row
    counts: tuple  # per row: times it runs in the step (layers, all-reduces, stages)
    reads_context: tuple  # per row: whether its cost depends on the keys cached (attention)
    components: object  # per model op (flops, weights, act_read, act_write, kv_read, kv_write): a list, or one array
    compute_s: list  # per row (0 for collectives and overheads)
    memory_s: list  # per row (0 for collectives and overheads)
    time_s: list  # per row: compute and memory at the engine's corner, or the collective's time
    total_s: np.ndarray  # the step: sum of time_s
    no_overlap_s: np.ndarray  # each model op compute + memory, plus the same collectives and overheads
    bound: np.ndarray  # index into bounds.BOUNDS
    bound_s: np.ndarray  # seconds the model ops wait on their binding resource (collectives aside)
    communication_s: np.ndarray  # the collectives' share of total_s


@dataclass(frozen=True)
class Ceilings:
    """Roofs measured on the device (bandwidth, GEMM FLOP/s per dtype), in place of its datasheet's."""
    bandwidth: object  # bytes/s: a number, or an array of one per point
    peak_flops: dict  # dtype -> FLOP/s

    @classmethod
    def measured(cls, read_bandwidth, copy_bandwidth, matmul_flops: dict) -> Ceilings:
        """The roofs from what a harness measured: a decode step mostly reads (weights and cache) and writes next
        to nothing, so the bandwidth roof is the read stream; where none was measured (0, NaN, an older file),
        the copy stream (read + written)."""
        read, copy = np.asarray(read_bandwidth, dtype=float), np.asarray(copy_bandwidth, dtype=float)
        bandwidth = np.where(np.isfinite(read) & (read > 0), read, copy)
        return cls(float(bandwidth) if bandwidth.ndim == 0 else bandwidth, dict(matmul_flops))


@dataclass(frozen=True)
class Deployment:
    """What runs where: the model, the device, the dtypes, modelling options, the engine and the split."""
    config: ModelConfig
    hardware: Hardware
    precision: Precision = Precision()
    options: Options = Options()
    # What the stack reaches: its roofs, its latencies as step rows (a harness fit or a serving engine).
    engine: Engine = IDEAL
    tp: int = 1  # tensor-parallel degree
    pp: int = 1  # pipeline stages
    ep: int = 1  # expert-parallel GPUs (data-parallel attention, routed experts split)
    # GPUs of the tp group each routed expert's columns are split over (None: all tp); the rest hold whole experts
    # (expert parallelism inside the tp group: vLLM's --enable-expert-parallel, TensorRT-LLM's moe_ep_size). A GPU
    # reads and multiplies the same expected bytes and FLOPs either way; its grouped GEMMs run over slices of
    # d_expert / expert_tp columns, whose width sets their rate (Engine.expert_slice_half_columns).
    expert_tp: int | None = None
    replicas: int = 1  # model copies; a batch is per replica
    # Measured roofs standing in for the datasheet's (numbers, or arrays of one per point: the fit).
    ceilings: Ceilings | None = None

    @classmethod
    def of(cls, model: str | ModelConfig, hardware: str | Hardware, *, weights: str | None = None,
           kv: str | None = None, activations: str | None = None, experts: str | None = None,
           precision: Precision | None = None, engine: str | Engine | None = None,
           options: Options | None = None, tp: int = 1, pp: int = 1, ep: int = 1, replicas: int = 1,
           ceilings: Ceilings | None = None, expert_tp: int | None = None, **overrides) -> Deployment:
        """The one place names and files become objects: a bundled name or path for the model, the device
        and the engine; dtype names for the formats (bf16 unless given), or a whole `precision`; architecture
        what-ifs as `overrides` (n_kv_heads=8, ...). A what-if on the result is dataclasses.replace(d, ...)."""
        formats = {"weights": weights, "kv": kv, "activations": activations, "experts": experts}
        given = {name: value for name, value in formats.items() if value is not None}
        if precision is not None and given:
            raise ValueError(f"{', '.join(given)}: given beside precision={precision!r}; give the formats by name "
                             "or as one Precision, not both")
        config = load_model(model)
        if overrides:
            config = config.with_overrides(**overrides)
        return cls(config, load_hardware(hardware), precision or Precision(**given), options or Options(),
                   load_engine(engine), tp=tp, pp=pp, ep=ep, expert_tp=expert_tp, replicas=replicas,
                   ceilings=ceilings)

    def __post_init__(self):
        for name, kind, fix in (("config", ModelConfig, "load_model(name)"), ("hardware", Hardware, "load_hardware(id)"),
                                ("precision", Precision, "Precision(weights=..., kv=...)"),
                                ("options", Options, "Options(...)"),
                                ("engine", Engine, "load_engine(name)")):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name}: expected a {kind.__name__}, got {type(getattr(self, name)).__name__}; "
                                 f"build one with {fix}")
        for name in ("tp", "pp", "ep", "replicas"):
            whole(name, getattr(self, name))
        if self.precision.experts is not None and MOE not in self.config.layer_mlp:
            raise ValueError(f"experts: model {self.config.name!r} has no routed experts to store as "
                             f"{self.precision.experts}; leave experts unset (None) for a dense model")
        for dtype in {self.precision.weight_matmul_dtype, self.precision.expert_matmul_dtype} & set(FP4_ACTIVATIONS):
            self.hardware.peak_dtype(dtype)  # W4A4 needs FP4 tensor cores: refused here, never priced at another unit
        shard(self.config, self.tp)  # raises naming tp when it does not divide the heads
        stage_layers(self.config.n_layers, self.pp)
        if self.ep > 1:
            if MOE not in self.config.layer_mlp:
                raise ValueError(f"ep: model {self.config.name!r} has no MoE layers to spread; use ep=1")
            if self.config.n_experts % self.ep:
                raise ValueError(f"ep: {self.ep} does not divide the {self.config.n_experts} experts; use a divisor of "
                                 f"{self.config.n_experts}")
            if self.tp > 1 or self.pp > 1:
                raise ValueError("ep: expert parallelism combined with tp or pp is not modelled; use tp=pp=1 with ep")
        if self.expert_tp is not None:
            whole("expert_tp", self.expert_tp)
            if MOE not in self.config.layer_mlp:
                raise ValueError(f"expert_tp: model {self.config.name!r} has no routed experts to split; leave it "
                                 "unset (--expert-tp is for MoE models)")
            if self.tp % self.expert_tp:
                raise ValueError(f"expert_tp: {self.expert_tp} GPUs splitting each routed expert must divide tp = "
                                 f"{self.tp}; use a divisor of {self.tp}, or leave it unset (all tp)")
        if self.gpus_per_replica > 1:
            link(self.hardware)  # raises naming the hardware when it has no interconnect

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp * self.ep

    @property
    def gpus(self) -> int:
        return self.gpus_per_replica * self.replicas

    @property
    def request_s(self) -> float:
        """What the engine spends on one request, once, in its TTFT and beside the steps: its request cost, and its
        host's dispatch of the prompt's first pass, each op of the model's graph (`prefill_ops`) in turn."""
        return self.engine.request_overhead_s + self.prefill_ops * self.engine.request_op_overhead_s

    @property
    def prefill_ops(self) -> int:
        """The ops a prompt's pass dispatches: every row of the prefill graph, once per layer it runs in (a pipeline's
        stages dispatch theirs one after another, and a tensor-parallel GPU runs every layer, so all count)."""
        return self.compiled.prefill.op_count

    @cached_property
    def local(self) -> ModelConfig:
        """The model one GPU of a tensor-parallel group holds and runs."""
        return shard(self.config, self.tp)

    @property
    def expert_columns(self) -> float | None:
        """The columns of each routed expert one GPU computes: d_expert over the GPUs that split it; None: dense."""
        if not self.config.n_experts:
            return None
        return self.config.d_expert / (self.tp if self.expert_tp is None else self.expert_tp)

    @cached_property
    def stages(self) -> list[range]:
        """Layer indices each pipeline stage runs."""
        return stage_layers(self.config.n_layers, self.pp)

    @cached_property
    def compiled(self) -> CompiledModel:
        return compile_model(self.local, self.options)

    @cached_property
    def roofs(self) -> Roofs:
        """The engine's roofs for these formats (its fixed costs are rows of the step: `fixed_rows`); on kernel
        roofs, at the curves' last points (large GEMMs, long reads): a step prices through `roofs_for`."""
        return self._roofs()

    def _roofs(self, tokens=None, kv_bytes=None, gemm_shapes: tuple = ()) -> Roofs:
        group = self.config.n_heads // self.config.n_kv_heads if self.config.has_kv_heads else 1
        measured = self.ceilings
        # a routed expert's GEMM sees top_k / E of the tokens (uniform routing)
        experts = (None if tokens is None or not self.config.n_experts
                   else np.maximum(tokens * self.config.top_k / self.config.n_experts, 1.0))
        return Roofs.of(self.hardware, self.precision, self.engine, group,
                        None if measured is None else measured.bandwidth, None if measured is None else measured.peak_flops,
                        tokens=tokens, expert_tokens=experts, kv_bytes=kv_bytes,
                        expert_columns=self.expert_columns, gemm_shapes=gemm_shapes)

    @cached_property
    def _shaped_roofs(self) -> dict:
        """gemm_shapes -> the roofs of a phase whose dense GEMMs run at their shapes' rates (datasheet engines)."""
        return {}

    def roofs_for(self, compiled: CompiledPhase, components, tokens) -> Roofs:
        """The roofs of one step: an engine on kernel roofs reaches its GEMMs' roof at the step's `tokens` rows and
        its attention's at the K/V bytes one layer's attention reads; any other engine's roofs are `roofs`, each dense
        GEMM at its shape's rate where the engine states one (Engine.gemm_shape)."""
        if self.engine.roofs != KERNEL:
            if self.engine.gemm_shape == NO_SHAPE:
                return self.roofs
            shapes = compiled.gemm_shapes
            if shapes not in self._shaped_roofs:
                self._shaped_roofs[shapes] = self._roofs(gemm_shapes=shapes)
            return self._shaped_roofs[shapes]
        rows = [i for i, kind in enumerate(compiled.matmul) if kind == ATTENTION_MATMUL]
        kv_bytes = None
        if rows and isinstance(components, np.ndarray):
            kv_bytes = components[rows, 4].max(axis=0)  # (ops, counts, *points): counts[4] is kv_read
        elif rows:
            kv_bytes = np.maximum.reduce([np.asarray(components[i][4], dtype=float) for i in rows])
        tokens = None if tokens is None else np.asarray(tokens, dtype=float)
        if isinstance(components, np.ndarray) and components.ndim == 2:  # one point (ops, counts): scalar roofs
            tokens = None if tokens is None else float(np.ravel(tokens)[0])
        return self._roofs(tokens, kv_bytes, compiled.gemm_shapes)

    @property
    def link_latency_assumed(self) -> bool:
        return self.gpus_per_replica > 1 and self.engine.allreduce_latency_s is None and link(self.hardware)[2]

    def link(self) -> tuple[float, float]:
        """(bandwidth, latency) of one collective hop: the engine's latency where its profile has one."""
        bandwidth, latency, _ = link(self.hardware)
        return bandwidth, latency if self.engine.allreduce_latency_s is None else self.engine.allreduce_latency_s

    def allreduce_latency(self, latency: float) -> float:
        """One tensor-parallel all-reduce's fixed time: `latency` over 2 GPUs, plus the engine's
        allreduce_doubling_s for each doubling of the group past 2 (log2(tp / 2) of them)."""
        return latency + self.engine.allreduce_doubling_s * math.log2(max(self.tp, 2) / 2)

    @property
    def whole_model_params(self) -> tuple[float, float]:
        """(parameters, routed-expert parameters) of the whole model, every shard together."""
        if self.tp == 1:
            return float(self.compiled.params), float(self.compiled.routed_params)
        return _whole_model_params(self.config)

    @property
    def weight_bytes(self) -> float:
        """Bytes of the weights one GPU of a tensor-parallel group holds (routed experts at b_e, the rest b_w)."""
        return self.precision.held_weight_bytes(self.compiled.params, self.compiled.routed_params)

    def memory_bytes(self, batch, tokens) -> list[float]:
        """Weights and KV cache (`batch` sequences per replica holding `tokens` tokens) one GPU holds: one
        entry per pipeline stage; under expert parallelism, a GPU's own sequences and 1/e of the experts."""
        if self.ep > 1:
            experts = self.compiled.routed_params
            weights = self.precision.held_weight_bytes(self.compiled.params - experts + experts / self.ep,
                                                       experts / self.ep)
            return [weights + float(self.compiled.kv_cache(batch / self.ep, tokens, self.precision.kv_bytes))]
        return stage_memory_bytes(self.local, self.config, self.pp, batch, tokens, self.precision, self.options)

    def phase(self, phase: str, queries=None) -> CompiledPhase:
        if phase == PREFILL:
            return self.compiled.prefill
        if phase == DECODE:
            return self.compiled.decode
        if phase == QUERIES:
            if queries is None:
                raise ValueError("queries: a step of phase 'queries' needs the query tokens per sequence")
            return compile_queries(self.local, self.options).phase(queries)
        raise ValueError(f"phase: unknown phase {phase!r}; use '{PREFILL}', '{DECODE}' or '{QUERIES}'")

    def step(self, phase: str, batch, context, queries=None) -> Step:
        """One step of `batch` sequences (per replica) at `context` keys; decode sees decode_context(prompt).

        prefill: T = S = context; decode: T = 1; queries: T = `queries` tokens per sequence.
        """
        compiled = self.phase(phase, queries)
        per_sequence = {PREFILL: context, DECODE: 1.0, QUERIES: queries}[phase]
        sequences = np.asarray(batch, dtype=float)
        rank_tokens = self.busiest_rank_sequences(sequences, per_sequence) * per_sequence
        return self.price(compiled, self.components(compiled, batch, context, per_sequence),
                          sequences * per_sequence, sequences, rank_tokens)

    def price(self, compiled: CompiledPhase, components, tokens, sequences, rank_tokens=None) -> Step:
        """The step of counts already taken (`components`, or their stacked array), over `tokens` = B·T rows from
        `sequences` = B sequences; `rank_tokens` the rows the busiest expert-parallel rank sends to the all-to-all
        (default its mean-field share, B·T/e)."""
        times = step_times(components, compiled, self.roofs_for(compiled, components, tokens))
        return _with_fixed(compiled.phase, compiled, components, times, self.collectives(tokens, rank_tokens),
                           self.fixed_rows(sequences, compiled))

    def busiest_rank_sequences(self, batch, queries):
        """Sequences the busiest attention data-parallel rank runs in a step of `batch` sequences of `queries`
        tokens each (ep = e ranks). A sequence lives on the one rank that holds its cache, so its attention,
        dense layers, shared experts and router run there alone, and every rank waits for the slowest at each
        MoE layer's all-to-all: a step of n prompts or prefill chunks (queries > 1) costs ⌈n/e⌉ of them (one whole
        prompt when n < e, e times the even share). Decoders (one token each) are many and balance: B/e, the mean
        field. Routed experts stay 1/e of the whole batch (the all-to-all spreads their tokens; `components`)."""
        batch = np.asarray(batch, dtype=float)
        if self.ep == 1:
            return batch
        return np.where(np.asarray(queries, dtype=float) > 1, np.ceil(batch / self.ep), batch / self.ep)

    def components(self, compiled: CompiledPhase, batch, context, queries=None) -> list[tuple]:
        """Per op the counts one GPU sees: under expert parallelism the busiest rank's own sequences
        (`busiest_rank_sequences`; `queries` tokens each, default a prefill's context or one decode token), and
        1/e of the whole batch's routed-expert work (uniform routing)."""
        widths = self.precision.byte_widths
        if self.ep == 1 and np.size(batch) == 1 and np.size(context) == 1:  # one point: a (ops, counts) array
            return compiled.point(float(np.ravel(batch)[0]), float(np.ravel(context)[0]), widths)
        if self.ep == 1:
            return compiled.parts(batch, context, widths)
        if queries is None:
            queries = context if compiled.phase == PREFILL else 1.0
        own = compiled.parts(self.busiest_rank_sequences(batch, queries), context, widths)
        whole_batch = compiled.parts(batch, context, widths)
        return [tuple(v / self.ep for v in w) if is_routed(name) else o
                for name, o, w in zip(compiled.ops, own, whole_batch)]

    def collectives(self, tokens, rank_tokens=None) -> list[tuple[OpName, int, np.ndarray]]:
        """Collectives of one step over `tokens` = B·T activation rows: (name, count, seconds of all); under expert
        parallelism the busiest rank sends its `rank_tokens` rows (default B·T/e)."""
        if self.gpus_per_replica == 1:
            return []
        bandwidth, latency = self.link()
        row_bytes = self.config.d_model * self.precision.activation_bytes
        out = []
        if self.tp > 1:
            count = ALLREDUCES_PER_LAYER * self.config.n_layers
            out.append((OpName("tp", "all-reduce"), count,
                        count * self.engine.allreduce.seconds(tokens * row_bytes, self.tp, bandwidth,
                                                               self.allreduce_latency(latency))))
        if self.pp > 1:  # each stage hands its activations to the next
            out.append((OpName("pp", "send"), self.pp - 1, (self.pp - 1) * (latency + tokens * row_bytes / bandwidth)))
        if self.ep > 1:  # the busiest GPU sends its own tokens' k rows, less those staying on it
            count = ALLTOALLS_PER_MOE_LAYER * self.config.layer_mlp.count(MOE)
            own = tokens / self.ep if rank_tokens is None else rank_tokens
            sent = alltoall_send_bytes(own, self.config.top_k, row_bytes, self.ep)
            out.append((OpName("ep", "all-to-all"), count,
                        count * (latency + self.engine.alltoall_overhead_s + sent / bandwidth)))
        return out

    def fixed_rows(self, sequences, compiled: CompiledPhase) -> list[tuple[OpName, int, object]]:
        """The engine's fixed times as rows of the step, only when it has them: a step overhead on each pipeline
        stage's GPU, the scheduler's work for each of the step's `sequences` (once a step, on the host: a
        pipeline's stages do not repeat it; under expert parallelism each attention rank schedules its own B/e,
        side by side), a launch overhead per layer and one per op of the step's graph (`compiled`: every row once
        per layer it runs in; a tensor-parallel GPU runs them all, so the split does not divide it), and a floor
        per MoE layer (its routing and grouped-GEMM chain)."""
        cal, rows = self.engine, []
        if cal.step_overhead_s:
            rows.append((OpName(OVERHEAD_GROUP, "step"), self.pp, self.pp * cal.step_overhead_s))
        if cal.sequence_overhead_s:
            per_rank = np.asarray(sequences, dtype=float) / self.ep
            rows.append((OpName(OVERHEAD_GROUP, SEQUENCES_OP), 1, per_rank * cal.sequence_overhead_s))
        if cal.layer_overhead_s:
            rows.append((OpName(OVERHEAD_GROUP, "layers"), self.config.n_layers,
                         self.config.n_layers * cal.layer_overhead_s))
        if cal.op_overhead_s:
            ops = compiled.op_count
            rows.append((OpName(OVERHEAD_GROUP, "ops"), ops, ops * cal.op_overhead_s))
        moe_layers = self.config.layer_mlp.count(MOE)
        if cal.expert_layer_overhead_s and moe_layers:  # every GPU runs every MoE layer's chain: not divided by tp
            rows.append((OpName(OVERHEAD_GROUP, "moe layers"), moe_layers, moe_layers * cal.expert_layer_overhead_s))
        return rows

    def decode_seconds(self, batch, prompt, gen, step: Step) -> np.ndarray:
        """Sum of the G − 1 decode steps after the first token, step j at context P + j (trapezoid,
        end-corrected). `step` is the decode step at the prompt: its ops that do not read the cache
        cost the same at every step; only those that do are integrated, on a trailing node axis."""
        cm = self.compiled
        steps = np.maximum(gen - 1, 0)
        spans = np.maximum(steps - 1, 0)
        rows = [i for i, reads in enumerate(step.reads_context) if reads]
        fixed = step.total_s - total([step.time_s[i] for i in rows]) if rows else step.total_s
        if not rows:
            return steps * fixed
        # one sequence, scaled back by B below, where the cache's ops are linear in B: not on kernel roofs, whose
        # attention roof depends on the bytes all B sequences read
        per_sequence = cm.decode_context_per_sequence and self.engine.roofs != KERNEL
        sequences = 1.0 if per_sequence else batch
        nodes = np.linspace(0.0, 1.0, E2E_NODES)

        def context_s(u):
            counts = cm.decode_context.parts(sequences, decode_context(prompt) + u * spans, self.precision.byte_widths)
            return step_times(counts, cm.decode_context, self.roofs_for(cm.decode_context, counts, batch)).roofline_s

        shape = np.broadcast_shapes(np.shape(sequences), np.shape(prompt), np.shape(spans))
        if np.prod(shape) < 4096:  # small: every node in one call, on a leading axis
            times = list(np.broadcast_to(context_s(nodes.reshape((-1,) + (1,) * len(shape))), (E2E_NODES,) + shape))
        else:  # large grids: node by node keeps memory at one grid
            times = [context_s(u) for u in nodes]
        ends = (times[0] + times[-1]) / 2
        summed = (total(times[1:-1]) + ends) / (E2E_NODES - 1) * spans + ends
        summed = np.where(steps == 1, times[0], summed)
        summed = np.where(steps == 0, 0.0, summed)
        if per_sequence:
            summed = summed * batch
        return steps * fixed + summed


@lru_cache(maxsize=64)
def _whole_model_params(config: ModelConfig) -> tuple[float, float]:
    """Counted once per model: a split deployment's shards do not add up to it (replicated norms, KV heads)."""
    return float(parameter_count(config)), float(routed_parameter_count(config))


def _with_fixed(phase: str, compiled: CompiledPhase, components: list, times: StepTimes, fixed: list,
                overheads: list) -> Step:
    """The model ops' times, then the collectives and the fixed overheads as rows of their own: the step's total
    is the sum of every row (the collectives bind when they wait longer than any resource)."""
    ops = compiled.ops + tuple(name for name, _, _ in fixed + overheads)
    counts = compiled.counts + tuple(count for _, count, _ in fixed + overheads)
    zeros = [0.0] * (len(fixed) + len(overheads))
    reads = compiled.reads_context + (False,) * len(zeros)
    total_s, no_overlap_s, bound, communication = times.roofline_s, times.no_overlap_s, times.bound, np.float64(0.0)
    if overheads:
        overhead = sum(seconds for _, _, seconds in overheads)
        total_s, no_overlap_s = total_s + overhead, no_overlap_s + overhead
    if fixed:  # one GPU's steps skip these passes over the grid
        communication = total([seconds for _, _, seconds in fixed])
        total_s, no_overlap_s = total_s + communication, no_overlap_s + communication
        bound = np.where(communication > times.bound_s, COMMUNICATION, times.bound)
    return Step(phase, ops, counts, reads, components, times.compute_s + zeros, times.memory_s + zeros,
                times.time_s + [seconds for _, _, seconds in fixed + overheads], total_s, no_overlap_s, bound,
                times.bound_s, np.asarray(communication, dtype=float))
