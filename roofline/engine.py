"""Engine profiles: the roofs a stack actually reaches on a device, as named physical parameters.

One concept for every achievable roof: a serving engine fitted to published rows (`roofline fit-engine`)
and this project's own harness fitted to its measurements (`roofline fit`) both write one of these.
An engine turns the ideal roofline into its own estimate through terms a reader can check:
- the fraction of the device's bandwidth its weight GEMVs stream at, and of its peak its GEMMs reach, and how that
  rate falls as a GEMM narrows or shallows (a tp slice: roofline.gemm_shape, read off a profile of its kernels);
- how much slower its dequantizing GEMVs stream each quantized weight format (int8, int4, q4_0, ...);
- how much slower its MoE grouped GEMMs stream the routed experts' weights than its dense GEMVs (a few tokens
  an expert over many small weight slices), and how far below its dense GEMMs' FLOP/s they compute at prefill
  (each expert a few hundred rows, block-scaled, behind a permute), by the experts' weight format where its kernels
  differ (fp8 block-scaled against mxfp4 or int4 dequantized in the mainloop);
- the floor each MoE layer adds to a step whatever the batch (routing, top-k, permute, two grouped GEMMs,
  unpermute: a chain of small latency-bound kernels);
- the fraction of bandwidth its decode attention reads the cache at, and how often its attention kernels
  read a GQA group's shared K/V again (once per group, or once per query head);
- how sharply its kernels turn the roofline's corner (compute and memory overlapped, or not);
- its fixed cost per layer (kernels a layer x the latency of a launch), per step (the host), per running
  sequence per step (the scheduler's work for each request) and per request (tokenizing, and the host dispatching
  its prompt's first pass op by op: paid once, in TTFT);
- the latency of one of its all-reduces (tensor parallelism: two a layer) over 2 GPUs, and what each doubling of
  the group adds to it.

Each parameter has a unit, a physical range and a note of the rows that pin it (`data/engines/*.yaml`).

On other devices and formats. `roofs:` says what the efficiencies are fractions of. `datasheet` (the harness
fits, `ideal`): of the device's datasheet roofs (`hardware:` names the device a profile was fitted on;
`measured`: of the ceilings the harness measured beside each point). `kernel` (the serving engines): of the
device's kernel roofs for the dtype being run (roofline/kernel_roofs.py: its GEMMs' fraction of the peak at
M tokens, its GEMVs' per weight format, its attention's), so an engine fitted on A100 fp16 rows prices an
H100 fp8 GEMM at the H100's fp8 roof times the engine's own factor, not at its A100 fraction of the fp8 peak.
A factor may pass 1 (an engine's kernel beating the device's profiled one; at most FRACTION_HIGH_KERNEL), the
product never passes the datasheet. Latencies (launch, host, request, all-reduce) transfer as seconds.
An engine prices through the one step pricer: it is the field of `Deployment` that sets the achievable
roofs (bounds.Roofs.of), the fixed costs and the all-reduce latency; nothing here computes a step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path


from .allreduce import RING_KERNEL, AllReduceKernel, allreduce_from_document
from .gemm_shape import NO_SHAPE, GemmShape, gemm_shape_from_document
from .hardware import DATA_DIR, bundled_hardware
from .kv_memory import IDEAL_MEMORY, KvMemory, memory_from_document
from .scheduler import DEFAULT_SCHEDULER, Scheduler, scheduler_from_document
from .userfile import parse_yaml

ENGINES_DIR = DATA_DIR / "engines"
MEASURED = "measured"  # `hardware:` of a harness fit on a machine without a datasheet: its measured ceilings
DATASHEET, KERNEL = "datasheet", "kernel"  # `roofs:` what the efficiencies are fractions of
EFFICIENCIES = ("bandwidth_efficiency", "flops_efficiency", "attention_bandwidth_efficiency",
                "attention_flops_efficiency")
# An engine's factor over the device's kernel roof: past 2x the profiled kernel is a typo or a missing roof.
FRACTION_HIGH_KERNEL = 2.0

# name -> (unit, lower bound, upper bound, what it is). The latencies' upper bounds are what no working
# stack comes near (a 10 ms launch per layer, a second of host work per step): a value there is a typo
# or a fit standing in for a missing term, not a measurement.
PARAMETERS = {
    "bandwidth_efficiency": ("fraction", 0.0, 1.0, "of the datasheet bandwidth its 16-bit weight GEMVs stream at"),
    "flops_efficiency": ("fraction", 0.0, 1.0, "of the datasheet peak its large GEMMs reach"),
    "attention_bandwidth_efficiency": ("fraction", 0.0, 1.0, "of the datasheet bandwidth decode attention reads at"),
    "attention_flops_efficiency": ("fraction", 0.0, 1.0, "of the datasheet peak prefill attention reaches"),
    # A routed expert's grouped GEMM at decode multiplies a few tokens by each of many small weight slices (under
    # tp a GPU holds a 1/tp slice of every expert): shorter streams and a routing gather, below a dense GEMV's rate.
    "expert_bandwidth_efficiency": ("fraction", 0.0, 1.0, "of its weight GEMVs' bandwidth efficiency its routed "
                                    "experts' weights stream at (grouped GEMMs over small expert slices)"),
    # At prefill a routed expert's grouped GEMM multiplies tokens x top_k / E rows (a few hundred) by its slice,
    # fp8 with a scale per 128-block, gathered by a permute: below a dense GEMM's share of the peak.
    "expert_flops_efficiency": ("fraction", 0.0, 1.0, "of its GEMMs' flops efficiency its routed experts' grouped "
                                "GEMMs compute at (a few hundred rows an expert, block-scaled, permuted)"),
    # Under tp each GPU computes a d_expert / tp slice of every expert: a fused MoE's grouped GEMM over N columns an
    # expert loses throughput as N shrinks (fewer output tiles an expert, the scales and epilogue per expert, the
    # activations re-read per slice), a saturation N / (N + N_half). NVIDIA's profile of the engines' own kernels
    # (AIConfigurator 0.12.0; validation/expert_slice_fit.py) puts N_half at ~1200 columns for TensorRT-LLM's
    # block-scaled fp8 CUTLASS MoE and 300-460 for SGLang's and vLLM's Triton fused_moe; 64k is past any expert.
    "expert_slice_half_columns": ("columns", 0.0, 65536.0, "the width of the slice of one expert a GPU computes "
                                  "(d_expert over the GPUs splitting it) at which its grouped GEMMs reach half their "
                                  "wide-slice FLOP/s (0: no loss with narrow slices)"),
    # Each MoE layer runs ~6-8 dependent small kernels whatever the batch (router GEMM, top-k, align/permute, two
    # grouped GEMMs whose tiles wait on the longest expert, unpermute/reduce): 1 ms a layer is a typo.
    "expert_layer_overhead_s": ("s", 0.0, 1e-3, "per MoE layer per step: its routing and grouped-GEMM kernel chain's "
                                "latency floor, not divided by tp"),
    "layer_overhead_s": ("s", 0.0, 1e-2, "per layer per step: kernels a layer x launch latency, not overlapped"),
    # Each kernel of a step pays a fixed time beyond its bytes and FLOPs (its launch inside a CUDA graph, the ramp
    # to full occupancy, the tail): a layer of more ops (a MoE layer's router and top-k, MLA's extra projections)
    # pays more. The smallest kernel NVIDIA profiled on H100/H200 (TensorRT-LLM's all-reduce of 256 B) takes ~3 us;
    # 1 ms an op is a typo.
    "op_overhead_s": ("s", 0.0, 1e-3, "per op of the step's graph per step: each kernel's fixed time beyond its "
                      "bytes and FLOPs (launch, ramp, tail), not overlapped"),
    "step_overhead_s": ("s", 0.0, 1.0, "per step: host work (sampling, scheduling, Python)"),
    # A scheduler in Python walks its running requests every step (bookkeeping, batch metadata, one token
    # detokenized each): tens of microseconds a request. A millisecond a request is a typo or a missing term.
    "sequence_overhead_s": ("s", 0.0, 1e-3, "per running sequence per step: host work the scheduler does for each "
                            "request in the step"),
    "request_overhead_s": ("s", 0.0, 10.0, "per request, once, in TTFT"),
    # The server's front end is one process outside the GPUs (roofline.serving.front_end): each request's parsing and
    # tokenizing, each streamed chunk's detokenizing and sending, one after another. What it can pass caps the
    # server, and past it requests queue before the engine sees them. A second of it a request, or 10 ms a chunk,
    # is a typo: no Python server nears either.
    "frontend_request_s": ("s", 0.0, 1.0, "per request, of the server's serial front end: parsing, tokenizing, "
                           "handing it to the engine (its capacity and queue, not a latency)"),
    "frontend_chunk_s": ("s", 0.0, 1e-2, "per streamed chunk of output, of the server's serial front end: "
                         "detokenizing, formatting, sending"),
    # A prompt's first pass runs outside the CUDA graphs a decode step replays: the host dispatches its ops' kernels
    # one by one, in Python, and the request's first token waits for it. NVIDIA's AIConfigurator prices it as 0.8 ms
    # a layer on vLLM, "CPU-side Python dispatch across all layers", once a request, in TTFT (github:ai-dynamo/
    # aiconfigurator PR #1166, vllm_backend._prefill_dispatch_overhead_ms): ~0.1 ms an op of a Llama layer's 8.
    # Counted by op, not by layer: a MoE layer (router, top-k, the experts' chain) or an MLA one dispatches more than
    # a dense one, and the floors TensorRT-LLM's rows show follow the ops (README, "A prompt's first pass"). 1 ms an
    # op (8 ms a Llama layer, ten times AIConfigurator's) is a typo.
    "request_op_overhead_s": ("s", 0.0, 1e-3, "per request per op of the model's graph, once, in TTFT: the host "
                              "dispatching its prompt's first pass op by op, beside the graphed steps"),
    # Disaggregated serving only: what a request's move from a prefill worker to a decode worker costs beyond its
    # KV bytes on the link (routing to two workers, the transfer's setup and completion handshake, the decode
    # worker's admission); pinned by TTFT at low load, where no queue hides it. 10 s: no working handoff nears it.
    "disagg_handoff_s": ("s", 0.0, 10.0, "per request, once, in a disaggregated TTFT: the prefill-to-decode handoff "
                         "beyond the KV bytes"),
    "allreduce_latency_s": ("s", 0.0, 1e-2, "one all-reduce's fixed latency over 2 GPUs (two a layer under tp)"),
    # An expert-parallel all-to-all (a MoE layer's dispatch, then its combine) is a kernel of its own, not the link's
    # one hop: a layout pass (which rank gets which rows), a handshake between every pair of ranks, the rows' copies.
    # DeepEP's low-latency kernels, written for decode, take 77 us to dispatch and 114 us to combine 128 tokens over
    # 8 ranks (H800; github:deepseek-ai/DeepEP docs/legacy.md); 10 ms is a typo.
    "alltoall_overhead_s": ("s", 0.0, 1e-2, "per expert-parallel all-to-all (a dispatch or a combine), beyond the "
                            "link's latency and its rows' bytes"),
    # A small all-reduce's latency grows with its group: vLLM's custom all-reduce on H100 takes 8.7 / 9.2 / 11.8 us
    # at 32 KB and 12.9 / 20.6 / 24.1 us at 256 KB over 2 / 4 / 8 GPUs (sglang PR #2904); 1 ms a doubling is a typo.
    "allreduce_doubling_s": ("s", 0.0, 1e-3, "what each doubling of the tensor-parallel group past 2 GPUs adds to "
                             "one all-reduce's latency (more peers to signal and read)"),
    # Near the ridge a kernel neither streams at the bandwidth roof nor computes at the FLOP/s roof:
    # an op takes (c^p + m^p)^(1/p) (p = 1: compute and memory never overlap; inf: the sharp roofline).
    "corner": ("p", 1.0, math.inf, "sharpness of the roofline corner: an op takes (compute^p + memory^p)^(1/p)"),
    "attention_corner": ("p", 1.0, math.inf, "the attention kernels' own corner sharpness (absent: corner's)"),
    # A kernel with one thread block per query head (TensorRT-LLM's masked MHA before XQA) reads a GQA
    # group's K/V once per query head, unless L2 catches the repeats; flash-decoding and XQA read it once.
    "gqa_rereads": ("share", 0.0, 1.0, "of a GQA group's other query heads whose attention reads the group's K/V "
                    "again (0: once per group; 1: once per query head)"),
}
# Absent from a file: the hardware's link latency; the sharp roofline (attention: the weight GEMMs');
# no re-reads; no disaggregation handoff (no disaggregated rows pin it); no per-sequence host work; no fixed time
# an op beyond the per-layer one; no per-layer dispatch of a prompt; an all-reduce as slow over 8 GPUs as over 2,
# an all-to-all that costs its link's latency and bytes alone; routed experts streaming and computing as fast as
# the dense weights, and no MoE layer floor; a front end that costs nothing.
OPTIONAL = ("allreduce_latency_s", "allreduce_doubling_s", "alltoall_overhead_s", "corner", "attention_corner",
            "gqa_rereads", "disagg_handoff_s", "sequence_overhead_s", "request_op_overhead_s", "op_overhead_s",
            "frontend_request_s", "frontend_chunk_s", "expert_bandwidth_efficiency", "expert_flops_efficiency",
            "expert_layer_overhead_s", "expert_slice_half_columns")
NONE_ALLOWED = ("allreduce_latency_s", "attention_corner")  # None: the hardware's link latency; `corner`
QUANTIZED = "quantized_efficiency"  # weight format -> fraction of bandwidth_efficiency its GEMV reaches
EXPERT_FLOPS_BY_FORMAT = "expert_flops_efficiency_by_format"  # experts' format -> its grouped GEMMs' share
KV_ATTENTION_BY_FORMAT = "attention_bandwidth_efficiency_by_kv"  # KV cache's format -> its decode attention's share
FLOPS_BY_DTYPE = "flops_efficiency_by_dtype"  # a GEMM's input dtype -> its share of flops_efficiency
# Shares keyed by a weight format, each fitted as "PREFIX.FORMAT": prefix -> (the Engine field and YAML key holding
# them, what one is, the share a format not listed takes). The experts' grouped GEMMs differ by format as kernels do:
# fp8 block-scaled (DeepGEMM, CUTLASS) against mxfp4 and int4 dequantized to 16-bit in the mainloop (matmul_ogs,
# Marlin); a format not listed takes the scalar expert_flops_efficiency.
# Decode attention is keyed by the KV cache's format the same way: a cache in fp8 is read by another kernel (or the
# same one dequantizing in its loads), whose rate need not be the 16-bit one's; a format not listed takes 1.
# The dense GEMMs are keyed by the dtype they multiply in (Precision.weight_matmul_dtype): an fp8 GEMM is another
# kernel, scaled per tensor or per 128-block, and may reach a smaller fraction of its doubled peak than a 16-bit one
# of its own (the project's H100 profile: fp8 _scaled_mm 0.34-0.37 of the fp8 peak, cuBLAS bf16 0.71-0.73 of the
# bf16 one; data/kernel_roofs.json). A dtype not listed takes 1; at most 1. The routed experts' grouped GEMMs keep
# their own share by format (expert_flops_efficiency.FORMAT), not this one.
FORMAT_SHARES = {QUANTIZED: (QUANTIZED, "of bandwidth_efficiency a {} GEMV streams at", None),
                 "expert_flops_efficiency": (EXPERT_FLOPS_BY_FORMAT, "of flops_efficiency a routed expert's grouped "
                                             "GEMM over {} weights computes at (absent: expert_flops_efficiency)",
                                             "expert_flops_efficiency"),
                 "attention_bandwidth_efficiency": (KV_ATTENTION_BY_FORMAT, "of attention_bandwidth_efficiency decode "
                                                    "attention over a {} KV cache streams at (absent: 1)", None),
                 "flops_efficiency": (FLOPS_BY_DTYPE, "of flops_efficiency a dense GEMM multiplying in {} computes "
                                      "at (absent: 1)", None)}
# What a file may hold besides the parameters: who it is, what its fit saw, and how close it came.
DOCUMENT_KEYS = ("name", "framework", "hardware", "roofs", "fit", "priors", "prior_sources", "accuracy", "harness_fit",
                 "memory", "scheduler", "serving_accuracy", QUANTIZED, EXPERT_FLOPS_BY_FORMAT, KV_ATTENTION_BY_FORMAT,
                 FLOPS_BY_DTYPE, "gemm_shape", "allreduce")
ENTRY_KEYS = ("value", "unit", "bounds", "what", "pinned_by", "range_68", "weakly_pinned")


@dataclass(frozen=True)
class Engine:
    name: str = "ideal"
    bandwidth_efficiency: float = 1.0
    flops_efficiency: float = 1.0  # every matmul dtype: the GEMMs it runs, whatever their format
    attention_bandwidth_efficiency: float = 1.0
    attention_flops_efficiency: float = 1.0
    expert_bandwidth_efficiency: float = 1.0  # share of the weight GEMVs' efficiency routed experts stream at
    expert_flops_efficiency: float = 1.0  # share of the GEMMs' flops efficiency routed experts compute at
    expert_layer_overhead_s: float = 0.0  # per MoE layer per step (a row of the step: Deployment.fixed_rows)
    expert_slice_half_columns: float = 0.0  # an expert slice's width at which its grouped GEMMs reach half rate
    layer_overhead_s: float = 0.0
    op_overhead_s: float = 0.0  # per op of the step's graph per step (a row of the step: Deployment.fixed_rows)
    step_overhead_s: float = 0.0
    sequence_overhead_s: float = 0.0  # per running sequence per step (a row of the step: Deployment.fixed_rows)
    request_overhead_s: float = 0.0
    request_op_overhead_s: float = 0.0  # per request per op of the model's graph, once (Deployment.request_s)
    frontend_request_s: float = 0.0  # per request, of the serial front end (roofline.serving.front_end)
    frontend_chunk_s: float = 0.0  # per streamed chunk, of the serial front end
    disagg_handoff_s: float = 0.0  # absent from a file: no disaggregated rows pin it
    allreduce_latency_s: float | None = None  # None: the hardware file's (or the assumed default)
    allreduce_doubling_s: float = 0.0  # added to the all-reduce latency per doubling of the group past 2 GPUs
    alltoall_overhead_s: float = 0.0  # per expert-parallel all-to-all, beyond the link (Deployment.collectives)
    corner: float = math.inf
    attention_corner: float | None = None  # None: `corner`
    gqa_rereads: float = 0.0
    quantized_efficiency: dict = field(default_factory=dict)  # e.g. {"int4": 0.6}; missing formats: 1
    # e.g. {"fp8": 0.3, "mxfp4": 0.8}: the experts' grouped GEMMs' share by their weights' format; missing formats:
    # expert_flops_efficiency
    expert_flops_efficiency_by_format: dict = field(default_factory=dict)
    # e.g. {"fp8": 0.4}: decode attention's share of attention_bandwidth_efficiency by the KV cache's format; missing: 1
    attention_bandwidth_efficiency_by_kv: dict = field(default_factory=dict)
    # e.g. {"fp8": 0.6}: a GEMM's share of flops_efficiency by the dtype it multiplies in; missing: 1
    flops_efficiency_by_dtype: dict = field(default_factory=dict)
    pinned_by: dict = field(default_factory=dict)  # parameter -> the rows or measurement that pin it
    framework: str = ""  # the published rows' `framework` prefix this engine is fitted to
    fit: tuple = ()  # the parameters `roofline fit-engine` fits; the others keep their values
    priors: dict = field(default_factory=dict)  # fitted parameter -> its value before any row was seen
    prior_sources: dict = field(default_factory=dict)  # fitted parameter -> where its prior comes from
    hardware: str = ""  # the device it was fitted on (a bundled id, or MEASURED); "": published rows' own
    harness_fit: dict = field(default_factory=dict)  # a harness fit's record: sources, ceilings, held-out errors
    memory: KvMemory = IDEAL_MEMORY  # how it sizes its KV pool (roofline.kv_memory); not fitted
    scheduler: Scheduler = DEFAULT_SCHEDULER  # its default token budget and running cap (roofline.scheduler)
    roofs: str = DATASHEET  # the efficiencies' reference: the datasheet's roofs, or the device's kernel roofs
    gemm_shape: GemmShape = NO_SHAPE  # its dense GEMMs' rate against their shape (either roofs); not fitted
    allreduce: AllReduceKernel = RING_KERNEL  # the kernel its tp all-reduces run (roofline.allreduce); not fitted

    def __post_init__(self):
        validate(f"engine {self.name!r}", {n: getattr(self, n) for n in PARAMETERS}, self.format_shares(),
                 self.hardware, self.roofs)

    @property
    def fraction_high(self) -> float:
        """The largest value an efficiency may take: 1 of a datasheet roof, FRACTION_HIGH_KERNEL of a kernel roof."""
        return FRACTION_HIGH_KERNEL if self.roofs == KERNEL else 1.0

    @property
    def is_ideal(self) -> bool:
        return (all(getattr(self, n) == getattr(IDEAL, n) for n in PARAMETERS) and not any(self.format_shares().values())
                and self.roofs == DATASHEET)

    def prior(self) -> Engine:
        """This engine as it was before fitting: every fitted parameter back at its prior (for leave-one-out)."""
        return with_values(self, list(self.priors), list(self.priors.values()))

    def weight_bandwidth_efficiency(self, weights: str) -> float:
        """The fraction of the bandwidth GEMVs over weights stored as `weights` stream at."""
        return self.bandwidth_efficiency * self.quantized_efficiency.get(weights, 1.0)

    def gemm_share(self, dtype: str) -> float:
        """The share of flops_efficiency its dense GEMMs multiplying in `dtype` reach (1 where none is listed); the
        routed experts' grouped GEMMs have their own by format (expert_gemm_efficiency)."""
        return self.flops_efficiency_by_dtype.get(dtype, 1.0)

    def gemm_efficiency(self, dtype: str) -> float:
        """The fraction of the `dtype` peak its dense GEMMs multiplying in `dtype` reach."""
        return self.flops_efficiency * self.gemm_share(dtype)

    def kv_attention_efficiency(self, kv: str) -> float:
        """The fraction of the bandwidth decode attention over a cache stored as `kv` streams at: attention's
        efficiency times the format's own share (1 where none is listed)."""
        return self.attention_bandwidth_efficiency * self.attention_bandwidth_efficiency_by_kv.get(kv, 1.0)

    def expert_weight_bandwidth_efficiency(self, experts: str) -> float:
        """The fraction of the bandwidth routed experts stored as `experts` stream at: a GEMV's over that format,
        times the experts' own share (1: as fast as the dense weights)."""
        return self.weight_bandwidth_efficiency(experts) * self.expert_bandwidth_efficiency

    def expert_gemm_efficiency(self, experts: str) -> float:
        """The share of the GEMMs' flops efficiency routed experts stored as `experts` compute at: that format's own
        share, else expert_flops_efficiency."""
        return self.expert_flops_efficiency_by_format.get(experts, self.expert_flops_efficiency)

    def expert_slice_share(self, columns: float) -> float:
        """The share of their wide-slice FLOP/s a GPU's grouped GEMMs reach over `columns` columns of each expert
        (Deployment.expert_columns): N / (N + N_half), 1 where the engine states no loss."""
        half = self.expert_slice_half_columns
        return 1.0 if not half or not columns else columns / (columns + half)

    def format_shares(self) -> dict:
        """Its shares keyed by a weight format: prefix (FORMAT_SHARES) -> {format: value}."""
        return {prefix: getattr(self, key) for prefix, (key, _, _) in FORMAT_SHARES.items()}

    def format_share(self, name: str) -> float:
        """A keyed share by its fit name "PREFIX.FORMAT": the format's value, else what an unlisted format takes."""
        prefix, fmt = name.split(".", 1)
        key, _, fallback = FORMAT_SHARES[prefix]
        return getattr(self, key).get(fmt, 1.0 if fallback is None else getattr(self, fallback))

    def kv_reads(self, group: int) -> float:
        """Times softmax attention reads the K/V it needs, for `group` query heads a K/V head: 1 + r (group - 1)."""
        return 1 + self.gqa_rereads * (group - 1)

    def parameters(self) -> dict:
        """Its physical parameters alone: name -> value (a share keyed by a format as PREFIX.FORMAT, FORMAT_SHARES)."""
        return {**{n: getattr(self, n) for n in PARAMETERS},
                **{f"{prefix}.{fmt}": v for prefix, shares in self.format_shares().items() for fmt, v in shares.items()}}

    def as_document(self) -> dict:
        document = {"name": self.name, "framework": self.framework, "fit": list(self.fit)}
        if self.hardware:
            document["hardware"] = self.hardware
        if self.roofs != DATASHEET:
            document["roofs"] = self.roofs
        if self.priors:
            document["priors"] = dict(self.priors)
        if self.prior_sources:
            document["prior_sources"] = dict(self.prior_sources)
        for name, (unit, low, high, what) in PARAMETERS.items():
            document[name] = {"value": getattr(self, name), "unit": unit, "bounds": [low, high], "what": what,
                              "pinned_by": self.pinned_by.get(name, "the ideal bound" if getattr(self, name) ==
                                                              getattr(IDEAL, name) else "a prior: nothing fitted")}
        for name in EFFICIENCIES:
            document[name]["bounds"] = [0.0, self.fraction_high]
            if self.roofs == KERNEL:
                document[name]["what"] = document[name]["what"].replace("the datasheet", "the device's kernel roof:")
        for prefix, (key, _, _) in FORMAT_SHARES.items():
            shares = getattr(self, key)
            if shares or key == QUANTIZED:  # quantized_efficiency is always written; a newer key only when held
                high = self.fraction_high if key == QUANTIZED else PARAMETERS[prefix][2]
                document[key] = {fmt: {"value": v, "unit": "fraction", "bounds": [0.0, high],
                                       "pinned_by": self.pinned_by.get(f"{prefix}.{fmt}", "")}
                                 for fmt, v in shares.items()}
        if self.harness_fit:
            document["harness_fit"] = dict(self.harness_fit)
        if self.memory != IDEAL_MEMORY:
            document["memory"] = self.memory.as_document()
        if self.scheduler != DEFAULT_SCHEDULER:
            document["scheduler"] = self.scheduler.as_document()
        if self.gemm_shape != NO_SHAPE:
            document["gemm_shape"] = self.gemm_shape.as_document()
        if self.allreduce != RING_KERNEL:
            document["allreduce"] = self.allreduce.as_document()
        return document


def with_values(engine: Engine, names: list[str], values) -> Engine:
    """`engine` with the named parameters set (a share keyed by format as "PREFIX.FORMAT", FORMAT_SHARES): the
    one setter the fit and the priors share."""
    keyed = {key: dict(getattr(engine, key)) for key, _, _ in FORMAT_SHARES.values()}
    plain = {}
    for name, value in zip(names, values):
        if is_format_share(name):
            prefix, fmt = name.split(".", 1)
            keyed[FORMAT_SHARES[prefix][0]][fmt] = float(value)
        else:
            plain[name] = float(value)
    return replace(engine, **keyed, **plain)


def is_format_share(name: str) -> bool:
    """Whether a fit name is a share keyed by a format ("quantized_efficiency.int4", "expert_flops_efficiency.fp8",
    "attention_bandwidth_efficiency.fp8": a KV cache's)."""
    return "." in name and name.split(".", 1)[0] in FORMAT_SHARES


def validate(who: str, values: dict, shares: dict, hardware: str, roofs: str = DATASHEET) -> None:
    """Every parameter a number in its physical range; `hardware` a device the project knows."""
    if roofs not in (DATASHEET, KERNEL):
        raise ValueError(f"{who}: roofs {roofs!r} is unknown; use '{KERNEL}' (efficiencies of the device's kernel "
                         f"roofs, data/kernel_roofs.json) or '{DATASHEET}' (of its datasheet)")
    high = FRACTION_HIGH_KERNEL if roofs == KERNEL else 1.0
    for name, value in values.items():
        if value is None and name in NONE_ALLOWED:
            continue
        unit, low, top, what = PARAMETERS[name]
        check(who, name, value, unit, low, high if name in EFFICIENCIES else top, what)
    for prefix, by_format in shares.items():  # a share of another efficiency: bounded as its scalar, if it has one
        top = PARAMETERS[prefix][2] if prefix in PARAMETERS else high
        for fmt, value in by_format.items():
            check(who, f"{prefix}.{fmt}", value, "fraction", 0.0, top, FORMAT_SHARES[prefix][1].format(fmt))
    known = bundled_hardware()
    if not isinstance(hardware, str) or hardware not in ("", MEASURED, *known):
        raise ValueError(f"{who}: hardware {hardware!r} is not a bundled device; use one of {', '.join(known)}, "
                         f"'{MEASURED}' (the harness's measured ceilings) or leave it out")


def check(who: str, name: str, value, unit: str, low: float, high: float, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{who}: {name} must be a number ({unit}, {what}), got {value!r}")
    if not (low < value <= high if unit == "fraction" else low <= value <= high):
        bound = f"in ({low:g}, {high:g}]" if unit == "fraction" else f"in [{low:g}, {high:g}]"
        raise ValueError(f"{who}: {name} = {value!r} is out of its physical range: it must be {bound} {unit} ({what})")


IDEAL = Engine()


def known_engines() -> list[str]:
    return sorted(p.stem for p in ENGINES_DIR.glob("*.yaml"))


def _entry(raw, name: str, who: str) -> tuple:
    """(value, pinned_by) of a parameter written as a number or as {value, pinned_by, ...}."""
    if not isinstance(raw, dict):
        return raw, None
    unknown = sorted(set(raw) - set(ENTRY_KEYS))
    if unknown:
        raise ValueError(f"{who}: {name} has unknown keys {unknown}; an entry holds {', '.join(ENTRY_KEYS)}")
    if "value" not in raw:
        raise ValueError(f"{who}: {name} has no 'value'; write {name}: {{value: NUMBER, pinned_by: ...}}")
    return raw["value"], raw.get("pinned_by")


def _mapping(raw: dict, key: str, who: str, what: str) -> dict:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{who}: {key} must be a mapping of {what}, got {value!r}")
    return value


def _reads_as_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def engine_from_document(raw, who: str, default_name: str = "engine") -> Engine:
    """An Engine from a profile's YAML body; `who` names the file in every refusal."""
    if not isinstance(raw, dict):
        raise ValueError(f"{who}: expected a mapping of parameters, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in set(raw) - set(PARAMETERS) - set(DOCUMENT_KEYS))
    if unknown:
        raise ValueError(f"{who}: unknown keys {unknown}; a profile holds the parameters {', '.join(PARAMETERS)} "
                         f"and {', '.join(DOCUMENT_KEYS)}")
    values, pinned = {}, {}
    for name in PARAMETERS:
        if name not in raw:
            if name in OPTIONAL:
                continue
            unit, low, high, what = PARAMETERS[name]
            raise ValueError(f"{who}: parameter {name!r} is missing ({what}); add it with its value in "
                             f"[{low:g}, {high:g}] {unit} and what pins it")
        values[name], note = _entry(raw[name], name, who)
        if note:
            pinned[name] = note
    shares = {}
    for prefix, (key, _, _) in FORMAT_SHARES.items():
        shares[prefix] = {}
        for fmt, entry in _mapping(raw, key, who, "weight format -> fraction").items():
            shares[prefix][str(fmt)], note = _entry(entry, f"{prefix}.{fmt}", who)
            if note:
                pinned[f"{prefix}.{fmt}"] = note
    hardware = raw.get("hardware") or ""
    roofs = raw.get("roofs") or DATASHEET
    validate(who, values, shares, hardware, roofs)
    fit = raw.get("fit") or []
    if not isinstance(fit, list) or [n for n in fit if n not in PARAMETERS and not is_format_share(str(n))]:
        raise ValueError(f"{who}: fit must list parameters to fit, among {', '.join(PARAMETERS)} or "
                         f"{' or '.join(f'{prefix}.FORMAT' for prefix in FORMAT_SHARES)}; got {fit!r}")
    priors = _mapping(raw, "priors", who, "fitted parameter -> value")
    if set(priors) - set(fit):
        raise ValueError(f"{who}: priors must map fitted parameters (those in fit) to their values; "
                         f"{sorted(set(priors) - set(fit))} are not in fit")
    sources = _mapping(raw, "prior_sources", who, "parameter -> where its prior comes from")
    if set(sources) - set(priors):
        raise ValueError(f"{who}: prior_sources must map parameters in priors to where each prior comes from")
    name = raw.get("name") or default_name
    if not isinstance(name, str) or _reads_as_number(name):  # `name: 1.0`, `name: nan`: a slip, shown as a number
        raise ValueError(f"{who}: name must be a word, got {name!r}; fix: name the profile (e.g. its file's stem)")
    return Engine(name=name, quantized_efficiency=shares[QUANTIZED],
                  expert_flops_efficiency_by_format=shares["expert_flops_efficiency"],
                  attention_bandwidth_efficiency_by_kv=shares["attention_bandwidth_efficiency"],
                  flops_efficiency_by_dtype=shares["flops_efficiency"], pinned_by=pinned,
                  framework=str(raw.get("framework") or ""), fit=tuple(fit), priors=dict(priors),
                  prior_sources={str(k): str(v) for k, v in sources.items()}, hardware=hardware,
                  harness_fit=_mapping(raw, "harness_fit", who, "what the harness fit saw"),
                  memory=memory_from_document(raw.get("memory"), who),
                  scheduler=scheduler_from_document(raw.get("scheduler"), who), roofs=roofs,
                  gemm_shape=gemm_shape_from_document(raw.get("gemm_shape"), who),
                  allreduce=allreduce_from_document(raw.get("allreduce"), who), **values)


def load_engine(name_or_path: str | Engine | None) -> Engine:
    """A bundled engine by name (data/engines/NAME.yaml), or a user's YAML path; None: ideal."""
    if name_or_path is None or isinstance(name_or_path, Engine):
        return name_or_path or IDEAL
    text = str(name_or_path)
    if text in known_engines() and not Path(text).is_file():
        return _bundled(text)
    return _load_path(text)


@lru_cache(maxsize=None)
def _bundled(name: str) -> Engine:
    """A bundled profile, parsed once: every sweep asks for its engine by name."""
    return _load_path(str(ENGINES_DIR / f"{name}.yaml"))


def read_engine_file(path: Path) -> dict:
    """A profile's YAML body, as written (the harness's record and the accuracy block included)."""
    try:
        content = Path(path).read_bytes()
    except OSError as err:
        raise ValueError(f"engine file {str(path)!r}: cannot be read ({err.strerror}); fix: check the path") from None
    return parse_yaml(content, f"engine file {str(path)!r}", "correct the file (see data/engines/*.yaml)")


def _load_path(text: str) -> Engine:
    path = Path(text) if text.endswith((".yaml", ".yml")) or Path(text).is_file() else ENGINES_DIR / f"{text}.yaml"
    if not path.is_file():
        raise ValueError(f"engine {text!r}: unknown; use one of {', '.join(known_engines())} or a YAML file path")
    return engine_from_document(read_engine_file(path), f"engine file {str(path)!r}", path.stem)


def harness_profiles() -> dict[str, Engine]:
    """The bundled profiles a harness fit wrote (`roofline fit`): name -> Engine."""
    return {name: engine for name in known_engines() if (engine := load_engine(name)).harness_fit}


def transfer_profile(device_name: str, measurements_file: str) -> Engine | None:
    """A bundled harness fit of the same device, as fractions of its measured ceilings, that did not see
    this file: what predicts the file out of sample (None where there is none)."""
    for engine in harness_profiles().values():
        fit = engine.harness_fit
        if (engine.hardware == MEASURED and fit.get("device_name") == device_name
                and measurements_file not in (fit.get("sources") or [])):
            return engine
    return None
