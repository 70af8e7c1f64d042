"""Properties of `plan`: looser targets never cost more, more traffic never needs fewer GPUs."""
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline.planning.plan import Targets, Workload, plan

SPACE = dict(hardware=("h100-sxm", "h200", "a100-80gb"), tp=(1, 2, 4), weights=("bf16", "fp8"))


def best_cost(frame) -> float:
    return float(frame["usd_per_million_tokens"].iloc[0]) if frame["feasible"].any() else float("inf")


@settings(max_examples=12, deadline=None)
@given(ttft=st.floats(0.05, 2.0), tpot=st.floats(0.004, 0.08), loosen=st.floats(1.0, 4.0), rate=st.floats(0.5, 50))
def test_looser_targets_never_raise_the_best_cost(ttft, tpot, loosen, rate):
    """Each candidate's batch within TPOT only grows as the target loosens, and TPOT(B)/B does not grow
    with B (every op's line has a non-negative intercept), so its capacity does not fall; a looser TTFT only
    admits more candidates."""
    work = Workload(rate, 1024, 256)
    tight = plan("llama-3-8b", work, Targets(ttft, tpot), **SPACE)
    loose = plan("llama-3-8b", work, Targets(ttft * loosen, tpot * loosen), **SPACE)
    assert best_cost(loose) <= best_cost(tight) * (1 + 1e-12)


@settings(max_examples=12, deadline=None)
@given(rate=st.floats(0.2, 40), more=st.floats(1.0, 5.0), tpot=st.floats(0.01, 0.08))
def test_more_traffic_never_lowers_the_gpu_count(rate, more, tpot):
    """Every candidate's GPUs, ceil(rate / capacity) x its split, are non-decreasing in the rate, so the fewest
    GPUs any feasible deployment needs are too, and so are the cheapest deployment's on one price. (Across
    prices the cheapest may switch to a dearer GPU that needs fewer of them: that is not a contradiction.)"""
    targets = Targets(1.0, tpot)
    low = plan("llama-3-8b", Workload(rate, 1024, 256), targets, **SPACE)
    high = plan("llama-3-8b", Workload(rate * more, 1024, 256), targets, **SPACE)
    if low["feasible"].any():
        assert high["gpus"].min() >= low["gpus"].min()
        for hw in SPACE["hardware"]:
            lo, hi = (f[f["feasible"] & (f["hardware"] == hw)] for f in (low, high))
            if len(lo):
                assert hi["gpus"].iloc[0] >= lo["gpus"].iloc[0]
