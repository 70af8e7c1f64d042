"""Constant-state mixers, one line a kernel step: Mamba-2 (SSD), Mamba-1, gated DeltaNet, lightning attention.

These layers keep, per sequence, a recurrent state whose size does not depend on the context S
(CS336 lecture 10: SSMs, linear attention, hybrids). Each returns `Op`s like `ops.attention`; an op
that keeps state between steps says how many bytes per sequence in `Op.state`. That state IS these
layers' cache, so its traffic is counted as kv_read / kv_write: read and written once a step
(the first prefill reads zeros; counted anyway, it is a few MB against the prompt's traffic).

Prefill runs the chunked scan (chunk Q: Mamba-2's chunk_size, 256 by default in mamba_ssm and HF;
the delta rule's 64 in FLA), counted as the kernel computes it: full Q x Q intra-chunk blocks, the
chunk's tokens written into the state, the state read back out. With T = 1 the same lines are the
recurrent decode step (chunk of one): Qc = min(T, Q). Left out of FLOPs: exp, softplus, the
decay products and the conv's activation (elementwise), as everywhere else.
Letters (symbols.py): Di inner width, Ns state per channel, Nh heads, G groups, Kc conv kernel,
Rdt dt rank, Q chunk, b_s state bytes. Source: Dao & Gu 2024 (SSD, the `ssd_minimal` listing);
Gu & Dao 2023 (Mamba); Yang et al. 2024 (gated DeltaNet); MiniMax 2025 (lightning attention).
"""
from __future__ import annotations

import sympy as sp

from .cost import Cost
from .ops import STATE_MATMUL, Op, linear, norm, tokens
from .symbols import B, D, Di, G, H, Kc, N, Nh, Ns, Q, Rdt, T, b_a, b_kv, b_s, b_w


def chunk() -> sp.Expr:
    """Tokens per chunk of the scan: Q, or the step's T when shorter (decode: 1)."""
    return sp.Min(T, Q)


def causal_conv(name: str, channels, bias: bool = True) -> Op:
    """Depthwise causal conv1d, kernel Kc, over `channels`; keeps the last Kc inputs per sequence
    (HF's and mamba_ssm's conv_states (B, channels, Kc); vLLM keeps Kc - 1)."""
    n = tokens()
    params = channels * Kc + (channels if bias else 0)
    state = b_kv * channels * Kc
    return Op(name, Cost(
        flops=2 * n * channels * Kc,             # y (n, c) = sum_j w (c, Kc) * x (n - j, c)
        weights=b_w * params,                    # read w (and b)
        act_read=b_a * n * channels,             # read x
        act_write=b_a * n * channels,            # write y
        kv_read=B * state,                       # read the conv state (the last Kc inputs)
        kv_write=B * state,                      # write it shifted by the new tokens
    ), params, state=state)


def gated_norm(name: str, width, params=None) -> Op:
    """y = rmsnorm(x * silu(z)): read x and the gate z, write y (Mamba-2's and DeltaNet's gated RMSNorm)."""
    n = tokens()
    params = width if params is None else params
    return Op(name, Cost(weights=b_w * params, act_read=2 * b_a * n * width, act_write=b_a * n * width), params)


def ssd_scan(name: str = "ssd_scan") -> Op:
    """Mamba-2's chunked state-space dual over Nh heads of Di/Nh channels, state Ns, G groups of B, C."""
    n, qc = tokens(), chunk()
    state = b_s * Di * Ns                        # h (Nh, Di/Nh, Ns) per sequence
    return Op(name, Cost(
        flops=2 * n * qc * G * Ns                # CB (Qc, Qc) = C (Qc, Ns) @ B^T (Ns, Qc) per chunk and group
        + 2 * n * qc * Di                        # Y_diag (Qc, P) = (L o CB) (Qc, Qc) @ X (Qc, P) per head
        + 2 * n * Di * Ns                        # h += B^T (Ns, Qc) @ X (Qc, P) per head: the chunk into the state
        + 2 * n * Di * Ns,                       # Y_off (Qc, P) = C (Qc, Ns) @ h (Ns, P) per head
        weights=b_w * 3 * Nh,                    # read A_log, D, dt_bias (one each per head)
        act_read=b_a * n * (Di + 2 * G * Ns + Nh),   # read x, B, C, dt
        act_write=b_a * n * Di,                  # write y
        kv_read=B * state,                       # read h
        kv_write=B * state,                      # write h
    ), 3 * Nh, STATE_MATMUL, state=state)


def mamba2_block(conv_bias: bool = True, proj_bias: bool = False, rms_gate: bool = True) -> list[Op]:
    """Mamba-2 mixer: in_proj to [z | x B C | dt], causal conv over x B C, SSD, gated RMSNorm (or, Falcon-H1
    without mamba_rms_norm, a plain gate y * silu(z)), out_proj."""
    n = tokens()
    gate = (gated_norm("gated_norm", Di) if rms_gate else
            Op("gate", Cost(act_read=2 * b_a * n * Di, act_write=b_a * n * Di)))
    return [
        linear("in_proj", D, 2 * Di + 2 * G * Ns + Nh, bias=proj_bias),  # [z|xBC|dt] = X (n,D) @ W_in
        causal_conv("conv1d", Di + 2 * G * Ns, conv_bias),               # xBC = silu(conv(xBC))
        ssd_scan(),                                                      # y = SSD(x, dt, A, B, C) + D x
        gate,                                                            # y = rmsnorm(y * silu(z))
        linear("out_proj", Di, D, bias=proj_bias),                       # X = y (n,Di) @ W_out
    ]


def selective_scan(name: str = "selective_scan") -> Op:
    """Mamba-1's selective scan: Di channels, each with Ns states and its own step size (sequential)."""
    n = tokens()
    state = b_s * Di * Ns
    return Op(name, Cost(
        flops=2 * n * Di * Ns                    # h (Di, Ns) = exp(dt A) o h + dt B x  (a multiply-add a state)
        + 2 * n * Di * Ns,                       # y (Di) = h (Di, Ns) @ C (Ns)
        weights=b_w * (Di * Ns + Di),            # read A_log (Di, Ns), D (Di)
        act_read=b_a * n * (2 * Di + 2 * Ns),    # read x, dt, B, C
        act_write=b_a * n * Di,                  # write y
        kv_read=B * state,                       # read h
        kv_write=B * state,                      # write h
    ), Di * Ns + Di, STATE_MATMUL, state=state)


def mamba_block(dt_norms: bool = False, conv_bias: bool = True, proj_bias: bool = False) -> list[Op]:
    """Mamba-1 mixer (Jamba): in_proj to [x | z], conv over x, x_proj to [dt | B | C], dt_proj, scan, out_proj.

    dt_norms: Jamba's RMSNorms on dt (Rdt), B and C (Ns each).
    """
    ops = [
        linear("in_proj", D, 2 * Di, bias=proj_bias),          # [x|z] = X (n,D) @ W_in (D, 2Di)
        causal_conv("conv1d", Di, conv_bias),                  # x = silu(conv(x))
        linear("x_proj", Di, Rdt + 2 * Ns),                    # [dt|B|C] = x (n,Di) @ W_x
    ]
    if dt_norms:
        ops += [norm("dt_norm", Rdt), norm("b_norm", Ns), norm("c_norm", Ns)]
    return ops + [
        linear("dt_proj", Rdt, Di, bias=True),                 # dt = softplus(dt (n,Rdt) @ W_dt + b)
        selective_scan(),                                      # y = scan(x, dt, A, B, C) + D x
        Op("gate", Cost(act_read=2 * b_a * tokens() * Di, act_write=b_a * tokens() * Di)),  # y = y * silu(z)
        linear("out_proj", Di, D, bias=proj_bias),             # X = y (n,Di) @ W_out
    ]


def delta_rule_scan(name: str = "delta_rule") -> Op:
    """Gated delta rule, chunked (FLA's chunk_gated_delta_rule): Nh value heads of Di/Nh, keys of Ns,
    q and k repeated from G key heads to the Nh value heads; state (Ns, Di/Nh) per value head."""
    n, qc = tokens(), chunk()
    state = b_s * Di * Ns
    return Op(name, Cost(
        flops=2 * n * qc * Nh * Ns               # A (Qc, Qc) = (beta k) (Qc, Ns) @ k^T per value head
        + 2 * n * qc * Nh * Ns                   # P (Qc, Qc) = q (Qc, Ns) @ k^T per value head
        + 2 * n * qc * (Di + Nh * Ns)            # u, w = (I + A)^-1 (Qc, Qc) @ [beta v | beta k] (the WY form)
        + 2 * n * Di * Ns                        # v' (Qc, Dv) = u - w (Qc, Ns) @ S (Ns, Dv)
        + 2 * n * Di * Ns                        # o (Qc, Dv) = q (Qc, Ns) @ S (Ns, Dv)
        + 2 * n * qc * Di                        # o += (P o decay) (Qc, Qc) @ v' (Qc, Dv)
        + 2 * n * Di * Ns,                       # S (Ns, Dv) = decay S + k^T (Ns, Qc) @ v'
        weights=b_w * 2 * Nh,                    # read A_log, dt_bias
        act_read=b_a * n * (Di + 2 * G * Ns + 2 * Nh),   # read q, k, v, beta, g
        act_write=b_a * n * Di,                  # write o
        kv_read=B * state,                       # read S
        kv_write=B * state,                      # write S
    ), 2 * Nh, STATE_MATMUL, state=state)


def deltanet_block() -> list[Op]:
    """Qwen3-Next gated DeltaNet: in_proj to [q k v z] and [beta a], conv over q k v, delta rule,
    per-head gated RMSNorm (one weight of Di/Nh shared by the heads), out_proj."""
    return [
        linear("in_proj_qkvz", D, 2 * G * Ns + 2 * Di),     # [q|k|v|z] = X (n,D) @ W (D, 2 G Ns + 2 Di)
        linear("in_proj_ba", D, 2 * Nh),                    # [beta|a] = X (n,D) @ W (D, 2 Nh)
        causal_conv("conv1d", 2 * G * Ns + Di, bias=False),  # qkv = silu(conv(qkv))
        delta_rule_scan(),                                  # o = gated delta rule(q, k, v, beta, g)
        gated_norm("gated_norm", Di, params=Di / Nh),       # o = rmsnorm(o) * silu(z), per head
        linear("out_proj", Di, D),                          # X = o (n,Di) @ W_out
    ]


def lightning_scan(name: str = "lightning_attention") -> Op:
    """MiniMax lightning attention: causal linear attention with a per-head decay, N heads of H,
    state (H, H) per head; chunked like SSD (intra-chunk Q K^T V, inter-chunk through the state)."""
    n, qc = tokens(), chunk()
    state = b_s * N * H * H
    return Op(name, Cost(
        flops=2 * n * qc * N * H                 # P (Qc, Qc) = q (Qc, H) @ k^T per head
        + 2 * n * qc * N * H                     # o = (P o decay) (Qc, Qc) @ v (Qc, H)
        + 2 * n * N * H * H                      # o += q (Qc, H) @ S (H, H)
        + 2 * n * N * H * H,                     # S = decay S + k^T (H, Qc) @ v (Qc, H)
        act_read=b_a * n * 3 * N * H,            # read q, k, v
        act_write=b_a * n * N * H,               # write o
        kv_read=B * state,                       # read S
        kv_write=B * state,                      # write S
    ), sp.Integer(0), STATE_MATMUL, state=state)


def lightning_block() -> list[Op]:
    """MiniMax-Text-01 linear-attention layer: qkv projection, lightning attention, output norm and gate, out_proj."""
    n = tokens()
    return [
        linear("qkv_proj", D, 3 * N * H),                   # [q|k|v] = X (n,D) @ W (D, 3NH)
        lightning_scan(),
        norm("out_norm", N * H),                            # o = rmsnorm(o)
        linear("output_gate", D, N * H),                    # g = X (n,D) @ W_g (D, NH)
        Op("gate", Cost(act_read=2 * b_a * n * N * H, act_write=b_a * n * N * H)),  # o = o * sigmoid(g)
        linear("out_proj", N * H, D),                       # X = o (n,NH) @ W_out
    ]
