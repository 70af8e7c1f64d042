"""Speculative decoding against Monte Carlo simulations of the acceptance process and of rejection sampling."""
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import load_model
from roofline.compiled import compile_model
from roofline.serving.speculation import alpha, expected_tokens, expected_tokens_expr, gamma, queries_phase, speculate
from roofline.deployment import Deployment

RNG = np.random.default_rng(3)


def accepted_per_pass(a: float, g: int, passes: int) -> np.ndarray:
    """Simulate i.i.d. acceptance: tokens from a pass = drafts accepted before the first rejection, plus one."""
    accepted = RNG.random((passes, g)) < a
    leading = np.where(accepted.all(axis=1), g, np.argmin(accepted, axis=1))
    return leading + 1


@pytest.mark.parametrize("a, g", [(0.0, 3), (0.5, 1), (0.6, 4), (0.8, 4), (0.95, 7), (1.0, 5)])
def test_expected_tokens_matches_a_monte_carlo_of_the_acceptance_process(a, g):
    tokens = accepted_per_pass(a, g, 200_000)
    error = 4 * tokens.std() / np.sqrt(tokens.size) + 1e-12
    assert abs(tokens.mean() - expected_tokens(a, g)) <= error


def test_the_gamma_alpha_plus_one_formula_is_caught():
    tokens = accepted_per_pass(0.8, 4, 200_000)
    assert abs(tokens.mean() - (4 * 0.8 + 1)) > 0.5  # 4.2 is what a naive calculator claims; the truth is 3.36


def test_rejection_sampling_over_a_vocabulary_accepts_at_one_minus_total_variation():
    """The real algorithm: accept draft x ~ q with prob min(1, p/q), else stop; alpha = sum min(p, q)."""
    vocab, g, passes = 6, 3, 100_000
    p, q = RNG.dirichlet(np.ones(vocab)), RNG.dirichlet(np.ones(vocab))
    drafts = RNG.choice(vocab, size=(passes, g), p=q)
    accepted = RNG.random((passes, g)) < np.minimum(1, p[drafts] / q[drafts])
    tokens = np.where(accepted.all(axis=1), g, np.argmin(accepted, axis=1)) + 1
    expected = expected_tokens(np.minimum(p, q).sum(), g)
    assert abs(tokens.mean() - expected) <= 4 * tokens.std() / np.sqrt(passes)


def test_closed_form_is_the_geometric_sum_and_tends_to_gamma_plus_one():
    expr = expected_tokens_expr()
    for a, g in ((sp.Rational(1, 2), 3), (sp.Rational(9, 10), 6)):
        assert expr.subs({alpha: a, gamma: g}) == sum(a ** j for j in range(g + 1))
    assert sp.limit(expr.args[1][0].subs(gamma, 4), alpha, 1) == 5


@settings(max_examples=40, deadline=None)
@given(st.floats(0, 1), st.integers(1, 12))
def test_expected_tokens_lies_between_one_and_gamma_plus_one_and_grows_with_both(a, g):
    value = expected_tokens(a, g)
    assert 1 - 1e-12 <= value <= g + 1 + 1e-12
    assert expected_tokens(min(a + 0.05, 1), g) >= value - 1e-12
    assert expected_tokens(a, g + 1) >= value - 1e-12


def test_effective_tpot_matches_a_monte_carlo_generation_of_a_thousand_tokens():
    result = speculate(Deployment.of("llama-2-13b", "h100-sxm"), "tinyllama-1.1b-chat-v1.0", 4, 0.7, batch=1, prompt=512)
    per_pass = accepted_per_pass(0.7, 4, 100_000)
    produced = np.cumsum(per_pass)
    passes_for_1000 = [np.searchsorted(produced[i * 1000:(i + 1) * 1000] - produced[i * 1000] + per_pass[i * 1000], 1000) + 1
                       for i in range(50)]
    simulated_tpot = np.mean(passes_for_1000) * result.iteration_s / 1000
    assert simulated_tpot == pytest.approx(result.tpot_s, rel=0.02)


def test_verification_of_gamma_plus_one_queries_is_a_decode_step_when_one_query_is_asked():
    config = load_model("llama-2-7b")
    widths = (2.0, 2.0, 2.0, 2.0)
    one = np.array(queries_phase(config, compile_model(config).options, 1)(4.0, 900.0, widths))
    assert np.allclose(one, compile_model(config).decode(4.0, 900.0, widths))


def test_verification_counts_every_query_against_its_causal_keys():
    config = load_model("llama-2-7b")
    phase = queries_phase(config, compile_model(config).options, 5)
    row = phase.names.index("layers[global,dense].attention")
    flops = phase(1.0, 1000.0, (2.0, 2.0, 2.0, 2.0))[row, 0]
    pairs = sum(range(996, 1001))  # queries at positions 996..1000 see that many keys each
    assert flops == pytest.approx(32 * 2 * 32 * pairs * 128 * 2)


def test_verification_is_nearly_free_at_batch_one_and_not_at_large_batch():
    small = speculate(Deployment.of("llama-2-70b", "h100-sxm"), 0.05, 4, 0.8, batch=1)
    large = speculate(Deployment.of("llama-2-70b", "h100-sxm"), 0.05, 4, 0.8, batch=256)
    assert small.verify_s < 1.02 * small.baseline_tpot_s  # memory-bound: 5 queries cost what 1 does
    assert large.verify_s > 2.5 * large.baseline_tpot_s  # 1280 tokens per matmul: compute-bound
    assert small.speedup > 2 and large.speedup < small.speedup


def test_a_draft_that_always_fails_slows_decoding_and_best_gamma_is_zero():
    result = speculate(Deployment.of("llama-2-13b", "h100-sxm"), "tinyllama-1.1b-chat-v1.0", 3, 0.0)
    assert result.expected_tokens_per_iteration == 1
    assert result.speedup < 1 and result.best_gamma == 0 and result.best_speedup == pytest.approx(1)


def test_best_gamma_grows_with_acceptance_and_is_the_argmax_of_the_speedup():
    low = speculate(Deployment.of("llama-2-70b", "h100-sxm"), "llama-2-7b", 4, 0.5)
    high = speculate(Deployment.of("llama-2-70b", "h100-sxm"), "llama-2-7b", 4, 0.95)
    assert high.best_gamma > low.best_gamma >= 1
    speedups = [speculate(Deployment.of("llama-2-70b", "h100-sxm"), "llama-2-7b", g, 0.95).speedup for g in range(1, 17)]
    assert int(np.argmax(speedups)) + 1 == high.best_gamma
    assert max(speedups) == pytest.approx(high.best_speedup)


def test_iteration_is_the_draft_steps_plus_the_verification():
    r = speculate(Deployment.of("llama-2-13b", "h100-sxm"), 0.1, 3, 0.6, batch=8)
    assert r.iteration_s == pytest.approx(r.draft_s + r.verify_s)
    assert r.draft_s == pytest.approx(3 * 0.1 * r.baseline_tpot_s, rel=0.01)  # contexts differ by <= 3 tokens
    assert r.tpot_s == pytest.approx(r.iteration_s / r.expected_tokens_per_iteration)


@pytest.mark.parametrize("kwargs, field", [
    ({"gamma": 0}, "gamma"), ({"gamma": 2.5}, "gamma"), ({"alpha": -0.1}, "alpha"), ({"alpha": 1.01}, "alpha"),
    ({"draft": 0.0}, "draft"), ({"draft": 2.0}, "draft"), ({"batch": 0}, "batch"),
])
def test_bad_speculation_input_is_a_clear_error(kwargs, field):
    args = {"draft": 0.1, "gamma": 3, "alpha": 0.5, **kwargs}
    with pytest.raises(ValueError, match=field):
        speculate(Deployment.of("llama-2-7b", "h100-sxm"), **args)
