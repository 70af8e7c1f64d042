"""How one aggregated row of serving-hopper.csv reads: its bundled model, device, formats and layout, or why not.

Models: each `model_path` names a bundled config (data/models). DeepSeek-R1 is priced with `deepseek-v3`: R1 is
DeepSeek-V3-Base post-trained (its model card: "trained based on DeepSeek-V3-Base. For more details regarding the
model architecture, please refer to DeepSeek-V3 repository"; 671B total, 37B activated, as V3). The bundled
deepseek-v3 file is aiconfigurator's copy of deepseek-ai/DeepSeek-V3's config (data/models/PROVENANCE.md).
Qwen3-235B-A22B-FP8 and Llama-3.1-8B-Instruct-FP8 take their architecture's config and the row's fp8.
Formats: the checkpoint as shipped where the bundled config states a quantization (models/checkpoint_format.py;
it is the file the engine loaded: gpt-oss's MXFP4 experts with bf16 attention, Kimi-K2.5's INT4 g32 experts with
bf16 attention, DeepSeek-V3's and MiniMax-M2.5's block fp8), the row's quant modes otherwise: gemm_quant_mode for
every weight that is not a routed expert, moe_quant_mode for the routed experts. fp8_block is fp8 with one fp32
scale per 128 x 128 block (4/16384 of a byte a weight, left out, as checkpoint_format does). nvfp4 is E2M1 with an
fp8 scale per 16 (4.5 bits, precision.py); Hopper has no FP4 tensor core, so its GEMMs dequantize and run in the
16-bit activations' dtype, as every weight-only format here (only gpt-oss carries the label, and its checkpoint
ships MXFP4, priced so). The KV cache is the launch script's where it is public (roofline.fitting.launches: the
InferenceX rows), else 16-bit (the rows do not say), but for TensorRT-LLM's per-tensor fp8 rows of a 16-bit
checkpoint (`fp8_kv_checkpoint`): their KV cache is fp8. fp8 rows are W8A8: their GEMMs run at
the fp8 peak (published_serving._deployment sets the activations; int4 and nvfp4 on Hopper stay weight-only).
Layout: a worker spans tp x dp GPUs (tp_size x attention_dp_size), which for a MoE equals moe_tp x moe_ep
(AIConfigurator's rule, aiconfigurator_core/sdk/config.py ModelConfig.resolve_moe_parallelism). A blank dp with
a MoE width past tp is vLLM's data-parallel attention (Qwen3-235B-A22B-FP8 at tp 1 does not fit one H200:
the width, 2, is its GPUs). Priced through the one pricer (Deployment):
  dp = 1: Deployment(tp=tp, expert_tp=moe_tp). The experts split tp ways by TP, EP or both: under uniform
          routing one GPU reads and multiplies the same expected bytes and FLOPs either way (E/e whole experts or
          all E at 1/t each), and its all-reduces stand for the MoE's combine; what differs is the slice of each
          expert a GPU computes, d_expert / moe_tp columns, which sets its grouped GEMMs' rate.
  tp = 1, dp > 1: Deployment(ep=dp): each GPU its own 1/dp of the sequences and the whole attention (MLA latent
          included), 1/dp of the experts, two all-to-alls a MoE layer (serving/expert_parallel.py). A mean-field
          reduction: a prompt's prefill is spread over the ranks, not run on the one that holds it.
Where an id names the worker `_tp{T}_ep{E}_` (GPUs, expert-parallel width) and its columns claim E times T GPUs
(tp_size x attention_dp_size = T x E), the columns were multiplied by E: every layout column but moe_ep_size is
read divided by E (where it is a multiple), if that gives T GPUs that the experts span (moe_tp x E = T). The
file's TensorRT-LLM 1.1.0rc2 / gpt-oss-dev and SGLang v0.5.9-cu129 rows of source_file=2026-04-06.csv carry it:
gpt-oss-120b `_tp2_ep2_` states tp 4, moe 2 x 2, and its TPOT is the `_tp2_ep1_` rows' of the same file within
3% at every load (tests/test_serving_rows.py); `_tp4_ep4_` states tp 16, `_tp8_ep8_` tp 64, and DeepSeek-R1's
attention-DP `_tp8_ep8_` dp 64, moe 8 x 8 where its copy in source_file=2026-03-25.csv states dp 8, moe 1 x 8.
Launch: where the row's launch script is public (roofline.fitting.launches), its KV format, memory fraction and token
budget, and its client's spread of lengths (the row priced at the mean lengths, not the stated largest); a group
whose launch is not what the row states (speculative decoding, a client concurrency that is not the server's) is left
out by reason "launch".
Left out, counted by reason (a measurement the file holds twice is priced once, the other copy left out as "copy":
roofline.fitting.copies): a model not bundled; a device not Hopper SXM; a format outside the table; layouts
with pipeline stages, attention TP inside DP groups (tp > 1 and dp > 1), more GPUs than one 8-GPU HGX node (the
hardware files hold NVLink, not the scale-out network; AIConfigurator: h100_sxm/h200_sxm have 8 GPUs a node), or
columns that disagree (tp x dp != moe_tp x moe_ep; a 0 MoE column, as in vLLM's disaggregated rows, states no
expert split: not checked); a file whose measured rates need more prefill than any Hopper GEMM delivers, its
prompts not the stated work ("work": roofline.fitting.unstated_work). A disaggregated row's two pools read the same
way (layout, prefix "prefill_" or "decode_").
Concurrency: the requests in flight over the whole worker: `silicon_concurrency=` in silicon_data_source where
given (where attention_dp_size states a dp, `batch_size` is per DP rank: concurrency = batch_size x dp), else
batch_size x the stated dp.
TTFT as the benchmark timed it: in the TensorRT-LLM rows of one source file (COMPLETION_INTERVAL_SOURCES:
`source_file=meta-llama_Llama-3.1-8B-Instruct.csv`, TensorRT-LLM 1.0.0rc3, Llama-3.1-8B bf16, H100, tp 1-8, 177
rows) the measured TTFT is the server's plus one completion interval of the closed loop, E2E / C: the client
issues and times each request one completion ahead. The rows show it: at a fixed (tp, isl, C), TTFT grows with the
output length, and a line of TTFT against osl x TPOT has slope x C = 0.94 median (quartiles 0.83-1.04) over the
48 groups with C <= 64 (e.g. tp 1, 1024 in, C 8: 191, 318, 550 ms at 128, 256, 512 out, while TPOT stays 7.4-7.9
ms). Every other source's median is within ±0.1 but SGLang's Qwen3-32B file (−0.66: TTFT falls with the output,
the fewer arrivals a second the less prefill ahead, which the load model prices): no client wait there
(tests/test_serving_rows.py derives both from the file). Such a row's predicted TTFT adds E2E / C before it is
compared (published_serving.predict); it is the benchmark's convention, not a cost of the engine.
Every routed expert read at decode, in the rows of one source (EXPERTS_READ_WHOLE_SOURCES: vLLM 0.12.0's
`source_file=Qwen_Qwen3-235B-A22B-FP8.csv`, H200, 45 rows read): their TPOT is flat in the load where the routed
experts' bytes are not. On 2 GPUs (attention tp 2, or tp 1 with data-parallel attention), requests of >= 500 output
tokens measure 51.4-58.6 ms from C 6 to 20, where uniform routing of C x 8 choices touches 32% -> 73% of the 128
experts; on 4 GPUs at attention tp 4, 33.7-36.9 ms from C 14 to 48 (touched 59% -> 95%). Priced with every expert a
GPU holds read each step (Options.experts_read "all"), the vllm profile's step is that level at both widths; priced
with the touched experts, the rows at attention tp 2 were 19-44% fast. The same engine's 0.18.0 rows of a MoE rise with
the load as the touched experts do (MiniMax-M2.5 fp8 on 8 H200s, 1024 in and out: 8.0 -> 23.5 ms from C 4 to 128),
and NVIDIA's kernel profile of vLLM 0.24.0 (AIConfigurator 0.12.0 `cli estimate`) gives the 2-GPU row at C 16
33.8 ms (measured 51.4). Nor is it the layout's collectives: vLLM runs expert parallelism inside tp with one
all-reduce a layer and an all-to-all only under data-parallel attention (`use_all2all_kernels = dp_size > 1 and
use_ep`, vllm/model_executor/layers/fused_moe/config.py), and the two layouts measure alike (medians 52.1 and 57.4
ms). What in that release reads them is not pinned by the rows (tests/test_experts_read_whole.py derives the above
from the file).
"""
from __future__ import annotations

import math
import re
from dataclasses import replace
from functools import lru_cache

from ..models.checkpoint_format import load_shipped_precision
from ..models.config import MOE, load_model
from ..precision import Precision
from .launches import launch_of
from .unstated_work import unstated_work

MODELS = {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
          "meta-llama/Llama-3.1-70B": "llama-3.1-70b", "openai/gpt-oss-120b": "gpt-oss-120b",
          "Qwen/Qwen3-32B": "qwen3-32b", "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
          "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b", "deepseek-ai/DeepSeek-V3": "deepseek-v3",
          "deepseek-ai/DeepSeek-R1": "deepseek-v3", "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5",
          "moonshotai/Kimi-K2.5": "kimi-k2.5", "zhipuai/GLM-5": "glm-5"}
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200"}
QUANT_FORMATS = {"": "bf16", "fp8": "fp8", "fp8_block": "fp8", "int4_wo": "int4", "nvfp4": "nvfp4"}
GPUS_PER_NODE = 8  # an HGX H100 / H200 board: 8 SXM GPUs on NVSwitch (the link the hardware files give)
REASONS = ("model", "device", "format", "layout", "launch", "copy", "work")
CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")
SOURCE_FILE = re.compile(r"source_file=([^;]+)")
ID_LAYOUT = re.compile(r"_tp(\d+)(?:_0)?_ep(\d+)(?:_0)?_")  # an id's worker: GPUs, expert-parallel width
MULTIPLIED_COLUMNS = ("tp_size", "attention_dp_size", "moe_tp_size")  # the layout columns but moe_ep_size
# (backend, source file) whose benchmark's TTFT counts one completion interval E2E / C (the docstring's evidence)
COMPLETION_INTERVAL_SOURCES = frozenset({("trtllm", "meta-llama_Llama-3.1-8B-Instruct.csv")})
# (backend, source file) whose decode reads every routed expert a GPU holds each step (the docstring's evidence)
EXPERTS_READ_WHOLE_SOURCES = frozenset({("vllm", "Qwen_Qwen3-235B-A22B-FP8.csv")})
REQUIRED = ("id", "backend", "model_path", "system", "mode", "isl", "osl", "batch_size", "tp_size",
            "silicon_ttft_ms", "silicon_tpot_ms")


@lru_cache(maxsize=None)
def _shipped(model: str) -> Precision | None:
    return load_shipped_precision(model)


def _count(raw: dict, name: str, blank: int | None = 1, required: bool = False, low: int = 1) -> int | None:
    """A whole-number column (a blank reads `blank` unless `required`); a bad value raises naming the field."""
    text = (raw.get(name) or "").strip()
    if not text and not required:
        return blank
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value == int(value) and value >= low):
        raise ValueError(f"field {name!r} must be a whole number >= {low}, got {text!r}")
    return int(value)


def _seconds(raw: dict, name: str) -> float:
    """A measured time in ms, as seconds; it must be a positive finite number."""
    text = (raw.get(name) or "").strip()
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"field {name!r} must be a positive number of milliseconds, got {text!r}")
    return value / 1e3


def formats(raw: dict, model: str) -> Precision | None:
    """The row's weight, expert and KV formats (the checkpoint's as shipped, else its quant modes'), None when a
    quant mode is outside QUANT_FORMATS."""
    gemm, moe = ((raw.get(k) or "").strip() for k in ("gemm_quant_mode", "moe_quant_mode"))
    if gemm not in QUANT_FORMATS or moe not in QUANT_FORMATS:
        return None
    shipped = _shipped(model)
    if shipped is not None:
        return shipped
    has_experts = MOE in load_model(model).layer_mlp
    experts = QUANT_FORMATS[moe] if has_experts and QUANT_FORMATS[moe] != QUANT_FORMATS[gemm] else None
    kv = "fp8" if fp8_kv_checkpoint(raw) else "bf16"
    return Precision(weights=QUANT_FORMATS[gemm], experts=experts, kv=kv)


def fp8_kv_checkpoint(raw: dict) -> bool:
    """Whether the row's engine ran an fp8 KV cache its launch did not state: TensorRT-LLM with per-tensor fp8
    GEMMs on a model published in 16 bits. It runs such a model as a pre-quantized Model Optimizer checkpoint (its
    quantization guide: "TensorRT LLM can directly run pre-quantized models generated with the NVIDIA Model
    Optimizer"), and `KvCacheConfig.dtype` 'auto' (the default) takes the checkpoint's `kv_cache_quant_algo`
    (TensorRT-LLM PR #16240 documents the rule: llm_args sync_quant_config_with_kv_cache_config_dtype). The rows
    show which: Qwen3-32B at tp 1 on an H100 (33 GB of fp8 weights) holds 64 requests of 4096 + 128 tokens
    (TTFT 1.63 s at C 64 against 1.34 s at C 32, no queue) where a 16-bit cache holds 41 and an fp8 one 82
    (tests/test_serving_rows.py). AIConfigurator prices every fp8 checkpoint with an fp8 cache the same way
    (aiconfigurator_core/sdk/models/helpers.py, 0.12.0). A publisher's own fp8 checkpoint (a `-FP8` model path)
    states its formats and is read as it is."""
    return (raw.get("backend") == "trtllm" and (raw.get("gemm_quant_mode") or "").strip() == "fp8"
            and not raw["model_path"].upper().endswith("-FP8"))


def _undo_id_multiple(raw: dict) -> dict:
    """The row with its layout columns divided by the id's expert width where they claim that many times the id's
    GPUs (the docstring's evidence), else the row as it is."""
    found = ID_LAYOUT.search(raw.get("id") or "")
    if not found:
        return raw
    gpus_named, width = int(found.group(1)), int(found.group(2))
    claimed = _count(raw, "tp_size", required=True) * _count(raw, "attention_dp_size")
    if width == 1 or claimed != gpus_named * width:
        return raw
    stated = {name: _count(raw, name) for name in MULTIPLIED_COLUMNS if (raw.get(name) or "").strip()}
    read = {**raw, **{name: str(n // width if n % width == 0 else n) for name, n in stated.items()}}
    # the reading stands only where it gives the id's GPUs and the experts span them (moe_tp x moe_ep)
    gpus = _count(read, "tp_size", required=True) * _count(read, "attention_dp_size")
    return read if gpus == gpus_named == _count(read, "moe_tp_size", low=0) * width else raw


def layout(raw: dict, model: str, prefix: str = "") -> tuple[int, int, int | None] | None:
    """(tp, dp, expert_tp) of a layout the pricer takes (dp = attention data-parallel ranks, priced as ep;
    expert_tp = the GPUs splitting each routed expert, moe_tp_size, None for a dense model or an unstated split:
    all tp), or None. `prefix` reads one pool of a disaggregated row ("prefill_", "decode_"): the same columns,
    the same rules."""
    if not prefix:
        raw = _undo_id_multiple(raw)
    tp = _count(raw, f"{prefix}tp_size", required=True)
    pp, dp = _count(raw, f"{prefix}pp_size"), _count(raw, f"{prefix}attention_dp_size", None)
    is_moe = MOE in load_model(model).layer_mlp
    # blank: 1, as AIC reads; a 0 (vLLM's disaggregated rows): the expert split not stated, so not checked
    width = _count(raw, f"{prefix}moe_tp_size", low=0) * _count(raw, f"{prefix}moe_ep_size", low=0) if is_moe else None
    if dp is None:
        dp = width // tp if width and width > tp and width % tp == 0 else 1
    if pp != 1 or tp * dp > GPUS_PER_NODE or (width and width != tp * dp) or (tp > 1 and dp > 1):
        return None
    if dp > 1 and (not is_moe or load_model(model).n_experts % dp):
        return None
    expert_tp = _count(raw, f"{prefix}moe_tp_size", low=0) if width else None  # width == tp x dp: it divides tp
    return tp, dp, expert_tp if dp == 1 else None


def spans_nodes(raw: dict, prefix: str = "") -> bool:
    """Whether the layout's GPUs (tp x attention dp) outnumber one node's: its collectives would cross the network."""
    return _count(raw, f"{prefix}tp_size", required=True) * _count(raw, f"{prefix}attention_dp_size") > GPUS_PER_NODE


def concurrency(raw: dict) -> int:
    """Requests in flight over the worker: the source's silicon_concurrency, else batch_size x the stated
    attention_dp_size (a blank dp's rows count the worker's: vLLM's, whose source says so where it is given)."""
    found = CONCURRENCY.search(raw.get("silicon_data_source") or "")
    if found and int(found.group(1)) >= 1:
        return int(found.group(1))
    return _count(raw, "batch_size", required=True) * _count(raw, "attention_dp_size")


def source_file(raw: dict) -> str:
    """The file a row was collected from (`source_file=` in silicon_data_source), "" where not stated."""
    found = SOURCE_FILE.search(raw.get("silicon_data_source") or "")
    return found.group(1).strip() if found else ""


def ttft_includes_completion_interval(raw: dict) -> bool:
    """Whether the row's benchmark timed TTFT from one completion ahead (COMPLETION_INTERVAL_SOURCES)."""
    return (raw.get("backend"), source_file(raw)) in COMPLETION_INTERVAL_SOURCES


def experts_read(raw: dict) -> str:
    """The routed experts the row's decode reads (Options.experts_read): "all" in EXPERTS_READ_WHOLE_SOURCES."""
    return "all" if (raw.get("backend"), source_file(raw)) in EXPERTS_READ_WHOLE_SOURCES else "routed"


def read_row(raw: dict, models: dict = MODELS, systems: dict = SYSTEMS, read_formats=None) -> dict | str:
    """An aggregated row's fields for ServingRow, or the reason it is left out (one of REASONS); a value that
    is no number raises naming its field. models, systems, read_formats: the checkpoints, devices and format
    reading of the rows taken (the fitted Hopper rows' by default; the transfer scorer passes Blackwell's)."""
    model = models.get(raw["model_path"])
    if model is None:
        return "model"
    if raw["system"] not in systems:
        return "device"
    precision = (read_formats or formats)(raw, model)
    if precision is None:
        return "format"
    launch = launch_of(raw)
    if launch is not None and launch.left_out:
        return "launch"
    if unstated_work(raw["backend"], raw.get("backend_version") or "", source_file(raw), raw["system"]):
        return "work"
    if launch is not None and launch.kv_cache_dtype is not None:
        precision = replace(precision, kv=launch.kv_cache_dtype)
    split = layout(raw, model)
    if split is None:
        return "layout"
    tp, dp, expert_tp = split
    isl, osl = _count(raw, "isl", required=True), _count(raw, "osl", required=True)
    prompt, gen = (isl, osl) if launch is None else (launch.mean_length(isl), launch.mean_length(osl))  # the means
    token_budget = None if launch is None else launch.budget(concurrency(raw), isl)
    batch_wait = (0, 0.0) if launch is None else launch.batch_wait_at(isl, osl, tp)
    return dict(model=model, hardware=systems[raw["system"]], weights=precision.weights, tp=tp, ep=dp,
                expert_tp=expert_tp,
                formats=precision, concurrency=concurrency(raw), prompt=prompt,
                gen=gen, ttft_s=_seconds(raw, "silicon_ttft_ms"),
                tpot_s=_seconds(raw, "silicon_tpot_ms"),
                ttft_includes_completion_interval=ttft_includes_completion_interval(raw),
                experts_read=experts_read(raw), launch=launch,
                token_budget=token_budget, batch_wait=batch_wait)
