"""Weight-quantized projections through torch's own packed kernels: what the engine profiles' quantized
GEMV efficiencies are measured on.

- int8 weight-only: `torch._weight_int8pack_mm` (per-output-channel scales; the kernel gpt-fast's int8
  path lowers to), activations stay bf16.
- int4 weight-only, group 32 or 128: `torch._weight_int4pack_mm` (tinygemm on CUDA, bf16 activations,
  a bf16 scale and zero per group and channel); on the CPU its `_for_cpu` twin.
- fp8 W8A8: `torch._scaled_mm` on e4m3 weights (a per-tensor scale) and activations quantized per step
  (a per-tensor scale from their absmax); Hopper's fp8 tensor cores, CUDA only. `_scaled_mm` wants both
  dims of the activation a multiple of 16, so a few rows are padded to 16.

Each replaces an `nn.Linear`'s forward; `weight` is dropped so the bf16 copy is not kept alive (a
quantized 7B model must fit where its bf16 twin would not have to). Stored bytes per weight, scales
included, are what `roofline.Precision` counts (records.row_precision): int8 1 + 2/D, int4 0.5 + 4/g
(scale and zero), fp8 1.
"""
from __future__ import annotations

import torch
from torch import nn

FORMATS = ("bf16", "int8", "int4-g32", "int4-g128", "fp8")
INT4_INNER_TILES = 8  # tinygemm's packing; K must be a multiple of 16 * 8 = 128 ... (checked)


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])


class Int8WeightOnly(nn.Module):
    def __init__(self, weight: torch.Tensor):
        super().__init__()
        w = weight.detach().float()
        scales = w.abs().amax(dim=1).clamp_min(1e-8) / 127  # one per output channel
        self.register_buffer("qweight", (w / scales[:, None]).round().clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scales.to(weight.dtype))
        self.out_features = weight.shape[0]

    def dequantized(self) -> torch.Tensor:
        return self.qweight.float() * self.scales.float()[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch._weight_int8pack_mm(_rows(x), self.qweight, self.scales)
        return out.reshape(*x.shape[:-1], self.out_features)


class Int4WeightOnly(nn.Module):
    """Asymmetric 4-bit groups along the input dimension, as GPTQ/AWQ checkpoints and gpt-fast store them."""

    def __init__(self, weight: torch.Tensor, group_size: int):
        super().__init__()
        N, K = weight.shape
        if K % group_size or K % (16 * INT4_INNER_TILES):
            raise ValueError(f"int4: input width {K} must be a multiple of the group size {group_size} and of "
                             f"{16 * INT4_INNER_TILES}")
        w = weight.detach().float().reshape(N, K // group_size, group_size)
        low, high = w.amin(dim=-1, keepdim=True), w.amax(dim=-1, keepdim=True)
        scale = ((high - low) / 15).clamp_min(1e-8)
        q = ((w - low) / scale).round().clamp(0, 15)  # 0..15; the value is (q - 8) * scale + zero
        zero = low + 8 * scale
        self.group_size, self.out_features = group_size, N
        self._dequantized = ((q - 8) * scale + zero).reshape(N, K)  # kept for tests only on small layers
        if N * K > 2**22:
            self._dequantized = None
        q = q.reshape(N, K).to(torch.int32)
        on_cpu = weight.device.type == "cpu"
        if on_cpu:
            packed = torch._convert_weight_to_int4pack_for_cpu(q, INT4_INNER_TILES)
        else:
            packed = torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8), INT4_INNER_TILES)
        self.register_buffer("packed", packed)
        # (K / g, N, 2): scale and zero of each group and output channel, in the activation dtype
        scales_zeros = torch.stack((scale[..., 0], zero[..., 0]), dim=-1).transpose(0, 1).contiguous()
        self.register_buffer("scales_zeros", scales_zeros.to(weight.dtype))

    def dequantized(self) -> torch.Tensor:
        return self._dequantized

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = _rows(x)
        if rows.is_cuda:
            out = torch._weight_int4pack_mm(rows, self.packed, self.group_size, self.scales_zeros)
        else:
            out = torch._weight_int4pack_mm_for_cpu(rows, self.packed, self.group_size, self.scales_zeros)
        return out.reshape(*x.shape[:-1], self.out_features)


class Fp8Linear(nn.Module):
    def __init__(self, weight: torch.Tensor):
        super().__init__()
        w = weight.detach().float()
        top = torch.finfo(torch.float8_e4m3fn).max
        scale = w.abs().amax().clamp_min(1e-8) / top
        self.register_buffer("qweight", (w / scale).to(torch.float8_e4m3fn))  # (N, K) row-major: col-major W^T
        self.register_buffer("weight_scale", scale.reshape(()).float())
        self.out_features, self.dtype = weight.shape[0], weight.dtype

    def dequantized(self) -> torch.Tensor:
        return self.qweight.float() * self.weight_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = _rows(x)
        M = rows.shape[0]
        top = torch.finfo(torch.float8_e4m3fn).max
        x_scale = rows.abs().amax().float().clamp_min(1e-8) / top  # dynamic per-tensor activation scale
        xq = (rows.float() / x_scale).to(torch.float8_e4m3fn)
        padded = -M % 16
        if padded:
            xq = torch.cat((xq, xq.new_zeros((padded, xq.shape[1]))))
        out = torch._scaled_mm(xq, self.qweight.t(), scale_a=x_scale, scale_b=self.weight_scale, out_dtype=self.dtype)
        return out[:M].reshape(*x.shape[:-1], self.out_features)


def quantize(weight: torch.Tensor, fmt: str) -> nn.Module:
    if fmt == "int8":
        return Int8WeightOnly(weight)
    if fmt.startswith("int4-g"):
        return Int4WeightOnly(weight, int(fmt.removeprefix("int4-g")))
    if fmt == "fp8":
        return Fp8Linear(weight)
    raise ValueError(f"weight format: {fmt!r} is not one of {', '.join(FORMATS)}")


def quantize_decoder(model: nn.Module, fmt: str) -> nn.Module:
    """Every projection (and the LM head, which the library counts at the weight format too) replaced by
    its quantized twin, in place; the bf16 weights are freed as it goes."""
    from .linear import Linear
    targets = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
               if isinstance(child, Linear)]
    for parent, name, child in targets:
        setattr(parent, name, quantize(child.weight, fmt))
        del child
    return model
