"""The engine's host work per running sequence per step: one row of the pricer's step, in every view, by hand."""
import dataclasses

import numpy as np
import pytest

from roofline import Engine, load_hardware, load_model
from roofline.deployment import Deployment
from roofline.engine import engine_from_document
from roofline.model import DECODE, PREFILL, decode_context
from roofline.serving.batching import StepCost
from roofline.serving.gap import decode_gap
from roofline.serving.load import LoadModel, Policy
from roofline.serving.mixed_step import StepTable, dense_seconds
from roofline.serving.pipeline import stage_seconds
from roofline.step_lines import StepLines

H100 = load_hardware("h100-sxm")
PER_SEQUENCE_S = 45e-6  # SGLang's flat TPOT (README, "Serving profiles under load"): ~45 us a running request
SCHEDULER = Engine("scheduler", 0.8, 0.6, step_overhead_s=1e-4, sequence_overhead_s=PER_SEQUENCE_S)
WITHOUT = dataclasses.replace(SCHEDULER, sequence_overhead_s=0.0)


def deployment(engine, model="llama-3.1-8b", **split):
    return Deployment(load_model(model), H100, engine=engine, **split)


def row_seconds(step, name="overhead.sequences") -> float:
    return sum(float(np.ravel(t)[0]) for op, t in zip(step.ops, step.time_s) if str(op) == name)


@pytest.mark.parametrize("batch, by_hand_s", [(1, 45e-6), (64, 2.88e-3), (256, 11.52e-3)])
def test_a_decode_step_pays_the_per_sequence_cost_once_for_each_running_sequence(batch, by_hand_s):
    # 256 running requests x 45 us = 11.52 ms a step, whatever the GPU work: the floor under SGLang's TPOT
    context = float(decode_context(2048))
    step = deployment(SCHEDULER).step(DECODE, float(batch), context)
    without = deployment(WITHOUT).step(DECODE, float(batch), context)
    assert row_seconds(step) == pytest.approx(by_hand_s, rel=1e-12)
    assert float(step.total_s - without.total_s) == pytest.approx(by_hand_s, rel=1e-9)
    assert "overhead.sequences" not in map(str, without.ops)  # no row where the engine has no such cost


def test_a_prefill_step_pays_it_per_sequence_not_per_token():
    step = deployment(SCHEDULER).step(PREFILL, 3.0, 2000.0)
    assert row_seconds(step) == pytest.approx(3 * PER_SEQUENCE_S, rel=1e-12)


def test_under_expert_parallelism_each_attention_rank_schedules_its_own_share():
    # 64 sequences over 2 data-parallel attention ranks: each rank's scheduler walks 32, side by side
    step = deployment(SCHEDULER, "mixtral-8x7b", ep=2).step(DECODE, 64.0, 1024.0)
    assert row_seconds(step) == pytest.approx(32 * PER_SEQUENCE_S, rel=1e-12)


def test_a_pipeline_pays_it_once_a_step_not_once_a_stage():
    stages, _ = stage_seconds(deployment(SCHEDULER, pp=2), 16.0, 1024.0)
    plain, _ = stage_seconds(deployment(WITHOUT, pp=2), 16.0, 1024.0)
    assert np.subtract(stages, plain) == pytest.approx([16 * PER_SEQUENCE_S, 0.0], abs=1e-15)


def test_the_mixed_step_and_its_table_count_decoders_and_prefill_chunks_as_sequences():
    # 40 decoders and 2 prefill chunks: 42 sequences in the step, 40 + 1500 tokens
    with_cost, without = deployment(SCHEDULER), deployment(WITHOUT)
    by_hand = 42 * PER_SEQUENCE_S
    assert float(dense_seconds(with_cost, 42, 1540) - dense_seconds(without, 42, 1540)) == pytest.approx(by_hand)
    table, plain = StepTable(with_cost, 2048.0), StepTable(without, 2048.0)
    assert float(table.dense(42, 1540) - plain.dense(42, 1540)) == pytest.approx(by_hand, rel=1e-9)
    decoders, chunks = [1500.0] * 40, [(1000, 1000), (500, 3000)]
    assert StepCost(with_cost).iteration(decoders, chunks) - StepCost(without).iteration(decoders, chunks) == \
        pytest.approx(by_hand, rel=1e-9)


def test_the_step_lines_gain_its_slope():
    lines, plain = StepLines.of(deployment(SCHEDULER), 2048.0), StepLines.of(deployment(WITHOUT), 2048.0)
    assert lines.asymptotic_slope - plain.asymptotic_slope == pytest.approx(PER_SEQUENCE_S, rel=1e-9)


def test_the_gap_names_it_as_a_term_of_its_own():
    gap = decode_gap(deployment(SCHEDULER), 128, 2048)
    assert gap["host per sequence"] == pytest.approx(128 * PER_SEQUENCE_S, rel=1e-9)
    assert gap["host"] == pytest.approx(1e-4, rel=1e-9)


def test_at_a_closed_loop_tpot_grows_by_the_cost_of_the_decoders_a_request_runs_beside():
    # 64 requests in flight, 128 in and 1024 out: almost every step is decode-only with ~64 decoders, so TPOT
    # grows by ~64 x 45 us = 2.9 ms (the few prefill steps' chunk sequences and the longer steps aside)
    policy = Policy(8192, 256)
    with_cost = LoadModel(deployment(SCHEDULER), 128, 1024, policy).at_concurrency([64.0])
    without = LoadModel(deployment(WITHOUT), 128, 1024, policy).at_concurrency([64.0])
    grown = float(with_cost["tpot_s"][0] - without["tpot_s"][0])
    decoders = float(with_cost["decoders"][0])
    assert 55 < decoders <= 66
    assert grown == pytest.approx(decoders * PER_SEQUENCE_S, rel=0.05)


def test_a_profile_without_it_has_none_and_one_past_its_bound_is_refused():
    body = {"bandwidth_efficiency": 0.8, "flops_efficiency": 0.6, "attention_bandwidth_efficiency": 0.8,
            "attention_flops_efficiency": 0.5, "layer_overhead_s": 0.0, "step_overhead_s": 0.0,
            "request_overhead_s": 0.0}
    assert engine_from_document(body, "engine file 'x.yaml'").sequence_overhead_s == 0.0
    with pytest.raises(ValueError, match=r"engine file 'x.yaml': sequence_overhead_s = 0.002 is out of its physical "
                                         r"range: it must be in \[0, 0.001\] s"):
        engine_from_document({**body, "sequence_overhead_s": 2e-3}, "engine file 'x.yaml'")
    shipped = engine_from_document({**body, "sequence_overhead_s": {"value": 4.5e-5, "pinned_by": "rows"}}, "x")
    assert shipped.sequence_overhead_s == 4.5e-5 and shipped.pinned_by["sequence_overhead_s"] == "rows"
