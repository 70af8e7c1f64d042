"""The mixer of a layer, by kind: attention's extras in hybrid families and the constant-state mixers.

`model.layer_ops` asks here for the ops of a layer whose mixer is not plain attention: Mamba-2,
Mamba-1, gated DeltaNet, lightning attention, or Falcon-H1's attention and Mamba-2 side by side
(`parallel`, one input norm, outputs summed). The ops themselves are in `state_ops` (letters only).
"""
from __future__ import annotations

from . import state_ops as so
from .models.config import DELTANET, LINEAR, MAMBA, MAMBA2, ModelConfig
from .cost import Cost
from .ops import Op, linear, tokens
from .symbols import D, H, N, b_a


def state_mixer_ops(cfg: ModelConfig, kind: str) -> list[Op]:
    """The ops of a constant-state mixer (no input norm: the layer adds it)."""
    if kind == MAMBA2:
        return so.mamba2_block(conv_bias=cfg.ssm_conv_bias, proj_bias=cfg.ssm_proj_bias, rms_gate=cfg.ssm_gated_norm)
    if kind == MAMBA:
        return so.mamba_block(dt_norms=cfg.family == "jamba", conv_bias=cfg.ssm_conv_bias, proj_bias=cfg.ssm_proj_bias)
    if kind == DELTANET:
        return so.deltanet_block()
    if kind == LINEAR:
        return so.lightning_block()
    raise ValueError(f"layer_attention: {kind!r} is not a constant-state mixer; use one of "
                     f"{MAMBA2}, {MAMBA}, {DELTANET}, {LINEAR}")


def output_gate_ops() -> list[Op]:
    """Qwen3-Next's gated attention: q_proj also emits a gate G (n, NH); O = O * sigmoid(G) before o_proj."""
    n = tokens()
    return [linear("attn_gate", D, N * H),                                           # G = X (n,D) @ W_g (D, NH)
            Op("attn_gate.apply", Cost(act_read=2 * b_a * n * N * H, act_write=b_a * n * N * H))]


def head_gate_ops() -> list[Op]:
    """Step-3.7's head-wise gated attention: g (n, N) = X @ W_g (D, N); O (n, N, H) *= sigmoid(g) before o_proj."""
    n = tokens()
    return [linear("attn_gate", D, N),
            Op("attn_gate.apply", Cost(act_read=b_a * n * (N * H + N), act_write=b_a * n * N * H))]
