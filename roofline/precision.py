"""Precision: the dtype of weights, routed experts, activations and KV cache, and the bytes each costs.

Group-wise quantization stores one scale per `group_size` values, so an element costs
bits/8 + scale_bytes/group_size bytes; the scale's width is per format (2 bytes, an fp16/bf16 scale, unless
SCALE_BYTES_OF names the format: MXFP4's is one 8-bit E8M0 exponent per 32 E2M1 values, 4.25 bits a weight,
per the OCP Microscaling Formats (MX) v1.0 spec). The matmul runs in the wider of its two operands' dtypes
(weight-only int4 dequantizes and computes in bf16; W8A8 computes in int8/fp8).
Activations may be 4-bit in one format: nvfp4 (W4A4). Blackwell's FP4 tensor cores multiply NVFP4 weights by
NVFP4 activations, quantized on the fly to E2M1 with an FP8 scale per 16 values and an fp32 scale per tensor
(NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", Jun 2025,
https://developer.nvidia.com/blog/introducing-nvfp4-for-efficient-and-accurate-low-precision-inference/):
4.5 bits a value with its scales. Such a matmul runs at the device's nvfp4 peak; a device without one refuses it
(hardware.Hardware.peak_dtype). Activations' bytes are priced at the matmul inputs' width throughout, as fp8's are
(the model has one activation width b_a). `expert_activations` lets the routed experts' GEMMs take their inputs in
another dtype than the rest (TensorRT-LLM and SGLang quantize gpt-oss's MoE inputs to MXFP8 on Blackwell while its
bf16 attention stays bf16): it sets only the experts' matmul dtype, not b_a.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4, "q8_0": 8, "q4_0": 4, "mxfp4": 4,
        "nvfp4": 4}
# f16, f32: GGUF's names
ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "e4m3": "fp8", "f16": "fp16", "f32": "fp32"}
SCALE_BYTES = 2  # one bf16/fp16 scale per group (GPTQ, AWQ, block-fp8 store fp16/bf16/fp32 scales)
# GPTQ/AWQ groups; 8-bit formats default to per-channel scales (negligible). GGUF's q4_0 and q8_0 are
# blocks of 32 weights with one fp16 scale: 4.5 and 8.5 bits a weight (llama.cpp's ggml-common.h).
DEFAULT_GROUP = {"int4": 128, "q4_0": 32, "q8_0": 32, "mxfp4": 32, "nvfp4": 16}
# Formats whose group scale is not SCALE_BYTES wide. NVFP4 (NVIDIA's Blackwell format, ModelOpt's NVFP4
# checkpoints): E2M1 values, one FP8 E4M3 scale per 16 and one fp32 scale per tensor (negligible): 4.5 bits.
SCALE_BYTES_OF = {"mxfp4": 1, "nvfp4": 1}
GROUPED_FORMATS = tuple(DEFAULT_GROUP)  # stored in groups with a scale: weights, dequantized before the matmul
FP4_ACTIVATIONS = ("nvfp4",)  # the grouped formats activations may take too: W4A4 on FP4 tensor cores
ACTIVATION_DTYPES = tuple(d for d in BITS if d not in GROUPED_FORMATS) + FP4_ACTIVATIONS  # a matmul's input dtypes
# Checkpoints mix formats: gpt-oss ships its routed experts in MXFP4 and attention, router, embeddings and head
# in bf16 (its config's quantization_config.modules_to_not_convert); Kimi-K2-Thinking ships INT4 experts.
# `experts` names the routed experts' format (b_e bytes an element); every other weight is `weights` (b_w).


def normalize_dtype(name: str, field: str) -> str:
    key = ALIASES.get(str(name).lower(), str(name).lower())
    if key not in BITS:
        raise ValueError(f"{field}: unknown dtype {name!r}; use one of {', '.join(BITS)}")
    return key


def element_bytes(dtype: str, group_size: int | None) -> float:
    """Bytes per stored element, including the group scale for sub-16-bit formats."""
    scale = SCALE_BYTES_OF.get(dtype, SCALE_BYTES) / group_size if group_size and BITS[dtype] < 16 else 0.0
    return BITS[dtype] / 8 + scale


def wider(a: str, b: str) -> str:
    """The dtype a matmul of a and b runs in: the one with more bits."""
    return a if BITS[a] >= BITS[b] else b


@dataclass(frozen=True)
class Precision:
    weights: str = "bf16"
    activations: str = "bf16"
    kv: str = "bf16"
    weight_group_size: int | None = None  # None: the format's default (int4 128; 8-bit per-channel)
    kv_group_size: int | None = None  # per-tensor KV scales by default (negligible bytes)
    # The routed experts' weights (ops.moe_block's experts.*; biases included, <0.1% of them in gpt-oss):
    # None, the same format (and group size) as `weights`. Shared experts, router, attention stay `weights`.
    experts: str | None = None
    expert_group_size: int | None = None  # None: the expert format's default (DEFAULT_GROUP)
    # The dtype the routed experts' GEMMs take their inputs in; None: `activations` (the module docstring says why)
    expert_activations: str | None = None

    def __post_init__(self):
        for field in ("weights", "activations", "kv"):
            object.__setattr__(self, field, normalize_dtype(getattr(self, field), field))
        if self.experts is not None:
            object.__setattr__(self, "experts", normalize_dtype(self.experts, "experts"))
        if self.expert_activations is not None:
            object.__setattr__(self, "expert_activations", normalize_dtype(self.expert_activations, "expert_activations"))
        _check_activations("activations", self.activations, self.weights)
        _check_activations("expert_activations", self.expert_activations or self.activations, self.expert_format)
        for field in ("weight_group_size", "kv_group_size", "expert_group_size"):
            size = getattr(self, field)
            if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size <= 0):
                raise ValueError(f"{field}: must be a positive integer or None, got {size!r}")
        if self.expert_group_size is not None and self.experts is None:
            raise ValueError("expert_group_size: set only with experts (the routed experts' format); "
                             "without it the experts take weights' format and weight_group_size")

    @property
    def weight_bytes(self) -> float:
        return element_bytes(self.weights, self.weight_group_size or DEFAULT_GROUP.get(self.weights))

    @property
    def activation_bytes(self) -> float:
        """Bytes an activation costs: nvfp4's with its scale per 16 (4.5 bits), the others' plain width."""
        return element_bytes(self.activations, DEFAULT_GROUP.get(self.activations))

    @property
    def kv_bytes(self) -> float:
        return element_bytes(self.kv, self.kv_group_size)

    @property
    def expert_format(self) -> str:
        """The routed experts' weight format: `experts`, or `weights` when it is None."""
        return self.weights if self.experts is None else self.experts

    @property
    def expert_bytes(self) -> float:
        if self.experts is None:
            return self.weight_bytes  # the very same number, so every output stays byte-for-byte today's
        return element_bytes(self.experts, self.expert_group_size or DEFAULT_GROUP.get(self.experts))

    @property
    def byte_widths(self) -> tuple[float, float, float, float]:
        """(b_w, b_a, b_kv, b_e): the order every compiled evaluator takes them in (symbols.BYTE_WIDTHS)."""
        return self.weight_bytes, self.activation_bytes, self.kv_bytes, self.expert_bytes

    def held_weight_bytes(self, params, routed):
        """Bytes of `params` weight elements of which `routed` are routed experts' (b_e each; the rest b_w).

        Written params·b_w + routed·(b_e − b_w) so that with b_e = b_w it is params·b_w to the last bit.
        """
        return params * self.weight_bytes + routed * (self.expert_bytes - self.weight_bytes)

    @property
    def weight_matmul_dtype(self) -> str:
        return wider(self.weights, self.activations)

    @property
    def expert_matmul_dtype(self) -> str:
        """Weight-only expert formats (mxfp4, int4) dequantize and multiply in the experts' input dtype."""
        return wider(self.expert_format, self.expert_activations or self.activations)

    @property
    def attention_matmul_dtype(self) -> str:
        return wider(self.kv, self.activations)


# Weight formats a serving engine multiplies in their own width where the device has tensor cores for it: TensorRT-LLM,
# vLLM and SGLang run an fp8 checkpoint's GEMMs W8A8 on Hopper and Blackwell (the activations quantized on the fly,
# per tensor, per token or per 128-block, for the fp8 peak) and an NVFP4 one's W4A4 on Blackwell's FP4 units.
# Elsewhere (fp8 weights on an A100) they dequantize in the GEMM's mainloop and multiply in 16 bits.
SERVED_IN_OWN_WIDTH = ("fp8", "nvfp4")


def as_served(precision: Precision, peak_dtypes) -> Precision:
    """`precision` as a serving engine runs it on a device whose tensor cores take `peak_dtypes` (Hardware.peak_flops'
    keys): weights in SERVED_IN_OWN_WIDTH multiply activations of their own width where the device has that unit; 16-bit
    activations otherwise, and activations already named kept. The one place this rule is stated: the published rows'
    pricing and the planner's candidates take it from here."""
    if precision.weights in SERVED_IN_OWN_WIDTH and precision.weights in peak_dtypes and precision.activations == "bf16":
        return replace(precision, activations=precision.weights)
    return precision


def _check_activations(field: str, activations: str, weights: str) -> None:
    """A matmul's input dtype: not a weight-only grouped format; nvfp4 (W4A4) only against nvfp4 or 8-bit+ weights."""
    if activations in GROUPED_FORMATS and activations not in FP4_ACTIVATIONS:
        raise ValueError(f"{field}: {activations} is a group-quantized weight format, not a dtype a matmul's inputs "
                         f"are computed in; fix: use one of {', '.join(ACTIVATION_DTYPES)} (W4A16 is weights int4, "
                         f"activations bf16)")
    if activations in FP4_ACTIVATIONS and weights in GROUPED_FORMATS and weights != activations:
        raise ValueError(f"{field}: {activations} inputs (W4A4) multiply {activations} weights on FP4 tensor cores; "
                         f"the weights they meet are {weights}, another 4-bit format no engine pairs with them; fix: "
                         f"weights {activations}, or {field} bf16 (weight-only {weights}) or fp8")
