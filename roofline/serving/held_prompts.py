"""Prompts an engine holds back so that they run together, and the wait that costs a prompt's TTFT.

Two of TensorRT-LLM's scheduler rules hold prompts this way (each derives its own closing count and clock:
roofline.serving.attention_dp, roofline.serving.batch_wait). The common form, prompts arriving at random at rate λ: a
hold opens with a prompt; it closes when `more` further prompts have arrived (Poisson: p_j(λt) for j of them by t), or
when a clock fires, R after the hold opened, P(R > t) = S(t) on [0, Θ]. Held prompt-seconds over prompts (renewal
reward):
    wait = ∫_0^Θ S(t) Σ_{j<more} (j + 1) p_j(λt) dt  /  (1 + λ L),    L = ∫_0^Θ S(t) Σ_{j<more} p_j(λt) dt
L is a hold's mean length, and a hold releases 1 + λL prompts on average. The Poisson sums in closed form (Q the
regularized upper incomplete gamma function): Σ_{j<k} p_j(x) = Q(k, x), Σ_{j<k} (j + 1) p_j(x) = Q(k, x) + x Q(k − 1, x)
(j p_j(x) = x p_{j−1}(x)), with Q(0, x) = 0.
"""
from __future__ import annotations

import numpy as np
from scipy.special import gammaincc

QUADRATURE_POINTS = 2049  # trapezoids over [0, Θ] (or the arrivals' reach): smooth integrands, 1e-5 of the wait


def _below(k, x) -> np.ndarray:
    """Σ_{j<k} p_j(x), the chance that fewer than k Poisson(x) arrivals have come (0 for k = 0)."""
    return np.where(k > 0, gammaincc(np.maximum(k, 1.0), x), 0.0)


def hold_seconds(rate, more, period, clock_phase_random: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(mean seconds a prompt is held, a hold's mean length L in seconds): prompts at `rate` a second, a hold closing
    after `more` further prompts or `period` seconds (the module docstring). clock_phase_random: the clock runs apart
    from the prompts and the hold's first prompt meets it at a random phase, S(t) = (1 − e^{−λ(Θ − t)}) / (1 − e^{−λΘ});
    else it starts with the hold, S(t) = 1."""
    rate, more, period = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (rate, more, period)))
    lam, theta, k = rate[..., None], period[..., None], more[..., None]
    # past more + 12 √more + 40 expected arrivals the hold has closed but for ~1e-20: the grid stops there
    with np.errstate(divide="ignore"):
        reach = np.minimum(theta, (k + 12 * np.sqrt(k + 1) + 40) / lam)
    t = reach * np.linspace(0.0, 1.0, QUADRATURE_POINTS)
    x = lam * t
    survives = -np.expm1(-lam * (theta - t)) / -np.expm1(-lam * theta) if clock_phase_random else 1.0
    open_ = _below(k, x)
    held = open_ + x * _below(k - 1, x)
    length = np.trapezoid(survives * open_, t, axis=-1)
    return np.trapezoid(survives * held, t, axis=-1) / (1 + rate * length), length
