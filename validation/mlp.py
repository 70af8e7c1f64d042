"""The decoder's MLPs: a gated SiLU MLP, and a mixture of them behind a top-k router (Mixtral's).

MoE routing as Hugging Face's Mixtral does it: softmax over the E router logits in fp32, the k
largest kept and renormalised to sum to 1. Only the experts some token chose run, so a step reads
the weights of the experts the batch touches: what the library counts, E (1 - (1 - k/E)^(B T))
of them under uniform routing. The loop over touched experts syncs with the host, so an MoE step
is not CUDA-graph safe (timed eagerly on a GPU).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from roofline import ModelConfig
from roofline.models.config import MOE

from .linear import Linear


class GatedMLP(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate_up = Linear(d_model, 2 * d_ff, bias=False)  # [G|U] = X @ W_gate_up
        self.down = Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class MixtureOfExperts(nn.Module):
    def __init__(self, d_model: int, d_expert: int, n_experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.router = Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(GatedMLP(d_model, d_expert) for _ in range(n_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        probabilities = torch.softmax(self.router(tokens).float(), dim=-1)
        weights, chosen = torch.topk(probabilities, self.top_k, dim=-1)  # (n, k)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(tokens)
        for expert in chosen.unique().tolist():  # the touched experts only: their weights are all a step reads
            token, slot = torch.where(chosen == expert)
            out.index_add_(0, token, self.experts[expert](tokens[token]) * weights[token, slot, None])
        return out.reshape(x.shape)


def mlp_of(config: ModelConfig, kind: str) -> nn.Module:
    if kind == MOE:
        return MixtureOfExperts(config.d_model, config.d_expert, config.n_experts, config.top_k)
    return GatedMLP(config.d_model, config.d_ff)
