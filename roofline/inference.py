"""The old `evaluate(compiled, hardware, precision, ...)` signature, kept for validation/sweep.py (rewritten
in another branch): it builds the Deployment and prices through it. New code calls roofline.evaluate."""
from __future__ import annotations

from .calibration import IDEAL, Calibration
from .compiled import CompiledModel
from .deployment import Deployment
from .evaluate import evaluate as evaluate_deployment
from .hardware import Hardware
from .precision import Precision


def evaluate(cm: CompiledModel, hw: Hardware, precision: Precision, batch, prompt, gen,
             calibration: Calibration = IDEAL, e2e: bool = True, prefill: bool = True) -> dict:
    return evaluate_deployment(Deployment(cm.config, hw, precision, cm.options, calibration), batch, prompt, gen,
                               e2e, prefill)
