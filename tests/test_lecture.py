"""Published figures of Stanford CS336 lecture 10: Llama-2-13B on an H100, S = 1024, bf16.

The lecture's napkin: bytes = bf16 parameters (no norms) + B * S * 2 L K H * 2, read once per step
at 3.35e12 B/s. Lecture: B=1 8.0 ms / 124 tokens/s; B=64 ~79.7 GB; B=256 ~240 GB, not fitting.
"""
import pytest
import sympy as sp

from roofline import analyze, load_hardware, load_model
from roofline.derivations import lecture_napkin
from roofline.symbols import B, S

LECTURE = {  # batch: (latency s, tokens/s, memory bytes)
    1: (8.02e-3, 124.7, 26.87e9),
    64: (23.8e-3, 2689, 79.7e9),
    256: (71.9e-3, 3562, 240.8e9),
}


@pytest.fixture(scope="module")
def napkin():
    return lecture_napkin(load_model("llama-2-13b"), load_hardware("h100-sxm"))


def test_lecture_parameter_count_is_13_billion(napkin):
    assert napkin["params"] == 13_015_449_600


@pytest.mark.parametrize("batch", sorted(LECTURE))
def test_lecture_napkin_reproduces_latency_throughput_and_memory(napkin, batch):
    latency, throughput, memory = LECTURE[batch]
    at = {B: batch, S: 1024}
    assert float(napkin["latency"].subs(at)) == pytest.approx(latency, rel=2e-3)
    assert float(napkin["throughput"].subs(at)) == pytest.approx(throughput, rel=2e-3)
    assert float(napkin["memory"].subs(at)) == pytest.approx(memory, rel=2e-3)


def test_batch_256_does_not_fit_an_h100(napkin):
    assert float(napkin["memory"].subs({B: 256, S: 1024})) > load_hardware("h100-sxm").memory_bytes


def test_napkin_column_of_the_calculator_matches_the_lecture_within_norm_weights():
    rows = analyze("llama-2-13b", "h100-sxm", batch=[1, 64, 256], prompt=1024).metrics
    for (_, row), batch in zip(rows.iterrows(), (1, 64, 256)):
        # The calculator counts the 81 norm weight vectors too (0.8 MB): within 1e-4 of the lecture.
        assert row["napkin_tpot_s"] == pytest.approx(LECTURE[batch][0], rel=2e-3)
    assert not rows["fits"].iloc[2]


def test_roofline_decode_is_close_to_the_napkin_while_memory_bound():
    row = analyze("llama-2-13b", "h100-sxm", batch=[1], prompt=1024).metrics.iloc[0]
    # The roofline reads only the gathered embedding rows (not the 328 MB table): slightly faster.
    assert row["tpot_s"] < row["napkin_tpot_s"]
    assert row["tpot_s"] == pytest.approx(row["napkin_tpot_s"], rel=0.02)
    assert row["decode_bound"] == "weight-bandwidth"


def test_gqa_with_eight_kv_heads_shrinks_the_cache_five_fold_and_raises_throughput():
    napkin = lecture_napkin(load_model("llama-2-13b").with_overrides(n_kv_heads=8), load_hardware("h100-sxm"))
    mha = lecture_napkin(load_model("llama-2-13b"), load_hardware("h100-sxm"))
    at = {B: 64, S: 1024}
    kv_mha = float((mha["memory"] - 2 * mha["params"]).subs(at))
    kv_gqa = float((napkin["memory"] - 2 * napkin["params"]).subs(at))
    assert kv_mha / kv_gqa == pytest.approx(5.0)
    assert float(napkin["throughput"].subs(at)) > 1.5 * float(mha["throughput"].subs(at))
    # The lecture's point: GQA-8 at batch 256 now fits in 80 GB.
    assert float(napkin["memory"].subs({B: 256, S: 1024})) < 80e9
    assert sp.simplify(napkin["throughput"] - B / napkin["latency"]) == 0
