"""The kinds a model's layers come in (mixer, MLP, norm) and the sizes past which a number is a typo.

Shared by the config (roofline.models.config) and the Hugging Face readers (roofline.models.hf_config,
roofline.models.config_state), which import these and never the config itself: the readers return fields, the
config builds the model.
"""
from __future__ import annotations

import re
from fractions import Fraction

GLOBAL, WINDOW = "global", "window"
CHUNKED = "chunked"  # Llama 4: a query sees only the keys of its own chunk of `chunk` positions
# DeepSeek Sparse Attention (V3.2, GLM-5): a lightning indexer scores every cached key, attention reads the
# top index_topk of them; a SHARED_SPARSE layer reuses the previous indexer's choice (GLM-5.2: no indexer).
SPARSE, SHARED_SPARSE = "sparse", "sparse_shared"
# DeepSeek-V4: a sliding window plus compressed entries, one per Mc source tokens of which an indexer picks the top
# Kt (compressed sparse), or one per Mh tokens, all read (heavily compressed); roofline/compressed_ops.py.
COMPRESSED_SPARSE, HEAVILY_COMPRESSED = "compressed_sparse", "heavily_compressed"
ATTENTION_KINDS = (GLOBAL, WINDOW, CHUNKED, SPARSE, SHARED_SPARSE, COMPRESSED_SPARSE, HEAVILY_COMPRESSED)
# Norm of queries and keys: none, RMSNorm per head (weight H), weightless L2 per head, or one RMSNorm over all
# heads at once (MiniMax-M2's qk_norm_type "per_layer": weights N*H and K*H).
# "rms_v": Gemma 4's per-head RMSNorm on q and k plus a weightless one on v.
QK_NORMS = ("", "rms", "l2", "rms_all", "rms_v")
MAX_LAYERS = 10_000  # the per-layer patterns are spelled out layer by layer; no published model comes near
MAX_DIMENSION = 1 << 24  # any width, count or length (16.7M): beyond it a number is a typo, not a model
DENSE, MOE = "dense", "moe"
# Constant-state mixers (roofline/state_ops.py), a layer with attention and Mamba-2 side by side
# (Falcon-H1) and layers without a mixer or without an MLP (Nemotron-H's one-op layers).
MAMBA2, MAMBA, DELTANET, LINEAR, PARALLEL, NONE = "mamba2", "mamba", "deltanet", "linear", "parallel", "none"
STATE_MIXERS = (MAMBA2, MAMBA, DELTANET, LINEAR, PARALLEL)  # mixers that keep a per-sequence state
# ATTENTION_KINDS (above): mixers whose cache grows with the context (chunked: up to the chunk)
MIXER_KINDS = ATTENTION_KINDS + STATE_MIXERS + (NONE,)
MLP_KINDS = (DENSE, MOE, NONE)
# A dense MLP of its own width (Nemotron-NAS: each layer's ffn_mult), written as a fraction of d_ff, "dense:7/32":
# the fraction, not the width, so a tensor-parallel shard (d_ff / tp) shrinks every layer's MLP with it.
WIDTH_SEPARATOR = ":"


def dense_of_width(width: int, d_ff: int) -> str:
    return f"{DENSE}{WIDTH_SEPARATOR}{Fraction(width, d_ff)}"


def dense_fraction(mlp_kind: str) -> Fraction | None:
    """The share of d_ff a "dense:p/q" MLP kind is wide (None for every other kind)."""
    kind, _, share = mlp_kind.partition(WIDTH_SEPARATOR)
    return None if kind != DENSE else parse_share(share)


def parse_share(text) -> Fraction | None:
    """A positive fraction written "p" or "p/q" (a share of a base dimension), None if it is not one."""
    if not isinstance(text, str) or not re.fullmatch(r"[1-9][0-9]{0,7}(/[1-9][0-9]{0,7})?", text):
        return None
    return Fraction(text)


def share_text(part: int, whole: int) -> str:
    """part / whole as parse_share reads it back ("1/4", "2")."""
    return str(Fraction(part, whole))




def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
