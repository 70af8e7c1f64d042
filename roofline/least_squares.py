"""Levenberg-Marquardt on a residual vector, numpy only: the fits of calibrations and engine profiles.

Forward-difference Jacobian; the damping shrinks after a step that lowers the squared residual and
grows after one that does not. Bounds are the callers' business: they move parameters in a space
(logistic, exponential) where every value is physical.
"""
from __future__ import annotations

import numpy as np


def levenberg_marquardt(residual, x: np.ndarray, iterations: int = 100, step_size: float = 1e-6,
                        tolerance: float = 1e-9) -> np.ndarray:
    damping = 1e-2
    r = residual(x)
    for _ in range(iterations):
        jacobian = np.stack([(residual(x + h) - r) / step_size for h in np.eye(len(x)) * step_size], axis=1)
        normal = jacobian.T @ jacobian
        step = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-12), -jacobian.T @ r)
        trial = residual(x + step)
        if trial @ trial < r @ r:
            converged = r @ r - trial @ trial < tolerance * (r @ r) or np.abs(step).max() < 1e-7
            x, r, damping = x + step, trial, damping / 3
            if converged:
                break
        else:
            damping *= 4
            if damping > 1e8:
                break
    return x
