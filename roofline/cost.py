"""Cost: FLOPs and bytes moved, bytes split by what they are; adds and scales like a number.

FLOPs count matmul multiply-adds as 2 (what torch's FlopCounterMode counts); elementwise work
(norms, activations, softmax, rope) is left out of FLOPs but its bytes are counted.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import sympy as sp

BYTE_CATEGORIES = ("weights", "act_read", "act_write", "kv_read", "kv_write")


@dataclass(frozen=True)
class Cost:
    flops: sp.Expr = sp.Integer(0)
    weights: sp.Expr = sp.Integer(0)  # weight bytes read
    act_read: sp.Expr = sp.Integer(0)  # activation bytes read
    act_write: sp.Expr = sp.Integer(0)  # activation bytes written
    kv_read: sp.Expr = sp.Integer(0)  # KV-cache bytes read
    kv_write: sp.Expr = sp.Integer(0)  # KV-cache bytes written

    @property
    def bytes(self) -> sp.Expr:
        return sum((getattr(self, c) for c in BYTE_CATEGORIES), sp.Integer(0))

    def __add__(self, other: Cost) -> Cost:
        return Cost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __mul__(self, factor) -> Cost:
        return Cost(*(getattr(self, f.name) * factor for f in fields(self)))

    __rmul__ = __mul__

    def map(self, fn) -> Cost:
        """Apply fn to every component (e.g. a substitution)."""
        return Cost(*(fn(getattr(self, f.name)) for f in fields(self)))

    def as_dict(self) -> dict[str, sp.Expr]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
