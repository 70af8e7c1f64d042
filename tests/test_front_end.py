"""The server's front end (roofline.serving.front_end): its work a request by hand, the steady state's TTFT and capacity
against the simulator running the same front end event by event, a closed loop past its capacity, the launches'
streaming settings, and bad input."""
from dataclasses import replace

import numpy as np
import pytest
import yaml

from roofline import load_hardware, load_model
from roofline.cli import main
from roofline.deployment import Deployment
from roofline.engine import load_engine
from roofline.fitting import published_load
from roofline.fitting.launches import LAUNCHES, read_launches
from roofline.serving.batching import StepCost, Workload, engine_terms, simulate_continuous
from roofline.serving.front_end import FrontEnd, SharedFrontEnd
from roofline.serving.load import LoadModel, Policy

A, B = 0.010, 1.0e-4  # 10 ms a request, 100 us a chunk: a busy Python server
ENGINE = replace(load_engine("tensorrt-llm"), frontend_request_s=A, frontend_chunk_s=B)
TP4 = Deployment(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), tp=4, engine=ENGINE)
BUDGET, REQUESTS, WARM = 2048, 3000, 300


def test_a_requests_work_counts_its_submission_and_its_chunks_by_hand():
    # 128 tokens streamed one by one: 128 chunks; every 10 tokens: the first alone, then ceil(127 / 10) = 13
    assert float(FrontEnd(A, B).work(128)) == pytest.approx(0.010 + 128 * 1e-4)
    assert FrontEnd(A, B).capacity(128) == pytest.approx(1 / 0.0228)
    assert float(FrontEnd(A, B, stream_interval=10).work(128)) == pytest.approx(0.010 + 14 * 1e-4)
    assert float(FrontEnd(A, B, stream_interval=10, postprocess_workers=4).work(128)) == pytest.approx(
        0.010 + 14 * 1e-4 / 4)
    assert FrontEnd().idle and FrontEnd().capacity(128) == np.inf


def test_processor_sharing_stretches_a_submission_to_a_over_one_less_the_load_by_hand():
    # 13.16 requests/s of 10 ms submissions alone: busy 0.1316, a job of 10 ms takes 10 / 0.8684 = 11.52 ms
    front = FrontEnd(A, 0.0)
    assert float(front.ttft_s([13.16], 128, [5.0])[0]) == pytest.approx(0.010 / (1 - 0.1316), rel=1e-6)
    # with chunks: busy 13.16 x 22.8 ms = 0.300; the first chunk rides with 5 decoders' chunks of 100 us
    assert float(FrontEnd(A, B).ttft_s([13.16], 128, [5.0])[0]) == pytest.approx(
        (0.010 + 6 * 1e-4) / (1 - 13.16 * 0.0228), rel=1e-6)
    assert FrontEnd(A, B).ttft_s([50.0], 128, [5.0])[0] == np.inf  # past 43.9 requests/s


def test_the_simulators_front_end_alone_is_processor_sharing():
    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(1 / 40.0, 20000))  # 40 requests/s of 10 ms: busy 0.4
    ends = np.zeros(len(arrivals))
    shared = SharedFrontEnd(FrontEnd(A, 0.0), lambda r, t: ends.__setitem__(r, t), lambda *_: None)
    for r, t in enumerate(arrivals):
        shared.arrive(r, t)
    shared.advance(np.inf)
    assert np.mean(ends - arrivals) == pytest.approx(A / (1 - 0.4), rel=0.03)


def simulated(rate):
    arrivals = np.cumsum(np.random.default_rng(1).exponential(1 / rate, REQUESTS))
    work = Workload(arrivals, np.full(REQUESTS, 512), np.full(REQUESTS, 128))
    return simulate_continuous(work, StepCost(TP4), 256, chunk_tokens=BUDGET, **engine_terms(TP4))


def test_the_front_end_caps_the_server_and_the_steady_state_agrees_with_the_simulator_below_it():
    model = LoadModel(TP4, 512, 128, Policy(token_budget=BUDGET))
    # the budget alone would carry ~127 requests/s; the front end passes 1 / 22.8 ms
    assert model.saturation() == pytest.approx(1 / 0.0228, rel=1e-3)
    assert model.saturation() < model.budget_saturation()
    for share in (0.3, 0.6):
        steady, sim = model.at_rate([share * model.saturation()]), simulated(share * model.saturation())
        middle = slice(WARM, REQUESTS - WARM)
        assert float(steady["ttft_s"][0]) == pytest.approx(float(np.mean(sim.ttft_s[middle])), rel=0.05), share
        assert float(steady["tpot_s"][0]) == pytest.approx(float(np.mean(sim.tpot_s[middle])), rel=0.05), share
        assert float(steady["ttft_front_end_s"][0]) > A


def test_a_closed_loop_far_past_the_front_ends_capacity_runs_at_it_and_waits_there():
    model = LoadModel(TP4, 512, 128, Policy(token_budget=BUDGET))
    out = model.at_concurrency([8, 400])
    capacity = model.front_end.capacity(128)
    assert out["rate"][0] < 0.5 * capacity and out["rate"][1] == pytest.approx(capacity, rel=0.03)
    assert out["rate"][1] < capacity
    assert out["rate"][1] * out["e2e_s"][1] == pytest.approx(400, rel=0.01)  # Little: the rest wait in the front end
    assert out["ttft_front_end_s"][1] > 0.9 * out["ttft_s"][1]


def test_the_simulators_closed_loop_runs_at_the_front_ends_capacity_at_most():
    work = Workload(np.zeros(1200), np.full(1200, 512), np.full(1200, 128))
    sim = simulate_continuous(work, StepCost(TP4), 256, chunk_tokens=BUDGET, clients=200, **engine_terms(TP4))
    served = 200 / np.mean(sim.e2e_s[400:1000])  # Little: 200 in flight over their mean time in the system
    assert served == pytest.approx(1 / 0.0228, rel=0.05)
    assert served < 1 / 0.0228


@pytest.mark.parametrize("clients", [None, 16])
def test_a_vanishing_front_end_run_event_by_event_gives_the_simulator_without_one(clients):
    """The front end's path (submissions handed to the scheduler, tokens delivered) at a picosecond a job is the plain
    simulator's: every request of an open loop, and a closed loop's first wave (sent together, handed over together).
    A closed loop's later requests differ by design: the plain simulator admits a request sent as a step ends into
    the next step; sent through a front end, however fast, it arrives after that step was formed and waits one."""
    d = Deployment(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), tp=4, engine=load_engine("tensorrt-llm"))
    arrivals = np.cumsum(np.random.default_rng(2).exponential(1 / 20.0, 300))
    work = lambda: Workload(arrivals.copy(), np.full(300, 512), np.full(300, 64))  # noqa: E731
    plain = simulate_continuous(work(), StepCost(d), 64, chunk_tokens=BUDGET, clients=clients)
    vanishing = simulate_continuous(work(), StepCost(d), 64, chunk_tokens=BUDGET, clients=clients,
                                    front_end=FrontEnd(1e-12, 1e-12))
    if clients is None:
        assert np.allclose(vanishing.ttft_s, plain.ttft_s, atol=1e-9)
        assert np.allclose(vanishing.e2e_s, plain.e2e_s, atol=1e-9)
    else:  # the wave's first tokens (its decode then runs beside later requests, admitted a step later here)
        assert np.allclose(vanishing.ttft_s[:clients], plain.ttft_s[:clients], atol=1e-9)


def test_every_tensorrt_llm_launch_streams_in_chunks_and_gpt_oss_shares_them_over_four_workers():
    trtllm = {key: launch for key, launch in read_launches(LAUNCHES).items() if key[0] == "trtllm"}
    assert trtllm
    for (_, model, _, _), launch in trtllm.items():
        if "gpt-oss" in model:
            assert (launch.stream_interval, launch.postprocess_workers) == (20, 4)
        else:
            assert (launch.stream_interval, launch.postprocess_workers) == (10, 0)
    assert all(launch.stream_interval == 1 for key, launch in read_launches(LAUNCHES).items() if key[0] != "trtllm")


def test_rows_of_in_process_harnesses_see_no_front_end(monkeypatch):
    rows = [row for path in published_load.LOAD_FILES if path.name in published_load.IN_PROCESS
            for row in published_load.read_load_rows(path).rows if row.engine == "tensorrt-llm-1"]
    assert rows
    loaded = published_load.predict(rows)
    monkeypatch.setattr(published_load, "load_engine", lambda name: replace(
        load_engine(name), frontend_request_s=0.5, frontend_chunk_s=5e-3))
    assert np.allclose(published_load.predict(rows), loaded, equal_nan=True)


@pytest.mark.parametrize("kwargs, field", [({"stream_interval": 0}, "stream_interval"),
                                           ({"postprocess_workers": -1}, "postprocess_workers")])
def test_bad_streaming_settings_are_one_line_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}: must be a whole number"):
        Policy(**kwargs)
    with pytest.raises(ValueError, match=f"^{field}: must be a whole number"):
        FrontEnd(**kwargs)


@pytest.mark.parametrize("field, value, bound", [("frontend_chunk_s", 0.5, "[0, 0.01]"),
                                                 ("frontend_request_s", -1e-3, "[0, 1]")])
def test_an_engine_file_with_a_front_end_out_of_its_range_is_one_line_naming_the_file_and_field(
        tmp_path, capsys, field, value, bound):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**load_engine("vllm").as_document(), field: value}))
    assert main(["analyze", "--model", "llama-3.1-8b", "--engine", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.yaml" in err and field in err and bound in err


@pytest.mark.parametrize("interval, workers, field", [("0", "", "stream_interval"), ("ten", "", "stream_interval"),
                                                      ("10", "-4", "postprocess_workers")])
def test_a_bad_streaming_setting_in_the_launch_file_names_the_line_and_field(tmp_path, interval, workers, field):
    path = tmp_path / "bad.csv"
    path.write_text("backend,model_path,system,measured,kv_cache_dtype,memory_fraction,token_budget,stream_interval,"
                    "postprocess_workers,left_out,length_ratio,script,commit,evidence\n"
                    f"trtllm,m,h200_sxm,2025-10-29,fp8,,,{interval},{workers},,,b.sh,{'a' * 40},e\n")
    with pytest.raises(ValueError, match=f"line 2: field '{field}' must be a whole number"):
        read_launches(path)


def test_the_prefill_first_cohort_shares_the_front_end_and_keeps_littles_law():
    sglang = replace(load_engine("sglang"), frontend_request_s=A, frontend_chunk_s=B)
    d = Deployment(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), engine=sglang)
    model = LoadModel(d, 1024, 256, Policy(token_budget=8192))
    out = model.at_concurrency([8, 64])
    assert model.policy.step_policy == "prefill_first"
    assert np.allclose(out["rate"] * out["e2e_s"], [8, 64])  # the cohort's requests, the front end's time included
    busy = out["rate"] * float(model.front_end.work(256))
    assert np.allclose(out["ttft_front_end_s"], model.front_end.first_token_work([8, 64]) / (1 - busy))
    assert out["rate"][1] < model.front_end.capacity(256)
