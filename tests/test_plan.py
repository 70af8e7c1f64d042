"""`roofline plan`: every deployment it keeps meets the targets, the batch is the largest that does, the
ranking is by cost, and every rejected candidate says why."""
import json

import pytest

from roofline.cli import main
from roofline.deployment import Deployment
from roofline.model import DECODE, decode_context
from roofline.planning.plan import DEFAULT_ENGINE, Targets, Workload, load_prices, plan
from roofline.serving.load import LoadModel, Policy

WORK = Workload(rate=20, prompt=2048, gen=512)
TARGETS = Targets(ttft_s=1.0, tpot_s=0.05)


def tpot(row, batch, work=WORK):
    d = Deployment.of("llama-2-70b", row["hardware"], weights=row["weights"], engine=row["engine"], tp=int(row["tp"]))
    return float(d.step(DECODE, float(batch), decode_context(work.prompt + work.gen / 2)).total_s)


def under_load(row, replicas, work=WORK):
    """The load model (not the planner) at rate / replicas, with the scheduler the row was sized for."""
    d = Deployment.of("llama-2-70b", row["hardware"], weights=row["weights"], engine=row["engine"], tp=int(row["tp"]))
    policy = Policy(token_budget=int(row["prefill_chunk"]), max_batch=int(row["capacity_batch"]),
                    kv_sequences=float(row["max_batch"]))
    state = LoadModel(d, work.prompt, work.gen, policy).at_rate([work.rate / replicas])
    return float(state["ttft_s"][0]), float(state["tpot_s"][0])


def test_every_kept_deployment_meets_the_targets_under_load_with_the_fewest_replicas():
    frame = plan("llama-2-70b", WORK, TARGETS, tp=(1, 2, 4), weights=("bf16", "int4"), disaggregated=False)
    kept = frame[frame["feasible"]]
    assert len(kept) >= 3 and (kept["engine"] == DEFAULT_ENGINE).all()
    for _, row in kept.iterrows():
        assert row["ttft_s"] <= TARGETS.ttft_s and row["tpot_s"] <= TARGETS.tpot_s
        # the capacity batch is the largest meeting TPOT at the mean context, alone in its step
        cap = row["capacity_batch"]
        assert tpot(row, cap) == pytest.approx(row["tpot_at_capacity_s"]) and row["tpot_at_capacity_s"] <= TARGETS.tpot_s
        assert cap == row["max_batch"] or tpot(row, cap + 1) > TARGETS.tpot_s
        # under load: the targets hold at rate / replicas, and one replica fewer misses one (or saturates)
        assert under_load(row, row["replicas"]) == pytest.approx((row["ttft_s"], row["tpot_s"]))
        if row["replicas"] > 1:
            ttft, tpot_ = under_load(row, row["replicas"] - 1)
            assert not (ttft <= TARGETS.ttft_s and tpot_ <= TARGETS.tpot_s)
        assert row["batch"] == pytest.approx(WORK.rate / row["replicas"] * row["e2e_s"])  # Little: in flight
        assert row["ideal_tpot_s"] < row["tpot_s"] and row["ideal_ttft_s"] < row["ttft_s"]  # the bound
    costs = kept["usd_per_million_tokens"].to_numpy()
    assert (costs[:-1] <= costs[1:]).all()


def test_every_rejected_candidate_names_its_reason():
    frame = plan("llama-2-70b", WORK, Targets(ttft_s=1.0, tpot_s=0.001), hardware=("a100-80gb", "l4"), tp=(1, 3),
                 weights=("bf16",))
    reasons = dict(zip(zip(frame["hardware"], frame["tp"]), frame["rejected"]))
    assert not frame["feasible"].any()
    assert reasons[("a100-80gb", 1)].startswith("memory")  # 140 GB of weights on an 80 GB GPU
    assert reasons[("a100-80gb", 3)].startswith("layout")  # 3 does not divide the 64 heads
    assert reasons[("l4", 1)].startswith("price")  # no price in the default sheet
    tight = plan("llama-3-8b", Workload(1, 128, 16), Targets(ttft_s=1.0, tpot_s=1e-4), hardware=("h100-sxm",), tp=(1,),
                 weights=("bf16",))
    assert tight["rejected"][0].startswith("TPOT")


def test_a_price_sheet_without_a_number_is_refused_by_field(tmp_path):
    (tmp_path / "p.yaml").write_text("h100-sxm: {usd_per_gpu_hour: free}\n")
    with pytest.raises(ValueError, match="h100-sxm.usd_per_gpu_hour must be a positive number"):
        load_prices(tmp_path / "p.yaml")
    assert load_prices()["h100-sxm"] > load_prices()["a100-80gb"] > 0


def test_plan_from_the_command_line(capsys):
    assert main(["plan", "--model", "llama-3-8b", "--rate", "5", "--tp", "1,2", "--weights", "bf16", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["feasible"] and rows[0]["gpus"] >= 1
    assert main(["plan", "--rate", "lots"]) == 2
    assert "--rate" in capsys.readouterr().err
