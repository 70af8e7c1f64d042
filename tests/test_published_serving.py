"""serving-hopper.csv rows read as closed-loop deployments: which rows are read, and each priced by the load model."""
from pathlib import Path

import numpy as np
import pytest

from roofline.cli import main
from roofline.engine import load_engine
from roofline.fitting.published_serving import client_lengths, predict, read_serving_rows, scores, simulate
from serving_sample import TAIL, write_sample

ROWS = [  # read: a bf16 Llama-3.1-8B, an fp8 70B and (issue 24) Qwen3-32B and gpt-oss-120b's nvfp4-labelled row;
    # left out: a disaggregated row (not counted), a model not bundled
    f"a,src,trtllm,1.0,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,,agg,1024,128,,,16,1,1,,1,1{TAIL},50.0,8.0",
    f"b,src,vllm,0.12,meta-llama/Llama-3.1-70B,h200_sxm,fp8,agg,2048,256,fp8,fp8,32,2,1,,1,1{TAIL},200.0,20.0",
    f"c,src,vllm,0.12,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,,,16,1,1,,1,1{TAIL},50.0,8.0",
    f"d,src,vllm,0.12,meta-llama/Llama-3.1-70B,h200_sxm,,disagg,1024,128,,,16,1,1,,1,1{TAIL},50.0,8.0",
    f"e,src,vllm,0.12,openai/gpt-oss-120b,h200_sxm,fp4,agg,1024,128,nvfp4,nvfp4,16,1,1,,1,1{TAIL},50.0,8.0",
    f"f,src,vllm,0.12,acme/Unknown-7B,h100_sxm,,agg,1024,128,,,16,1,1,,1,1{TAIL},50.0,8.0",
]


@pytest.fixture
def sample(tmp_path):
    return write_sample(tmp_path, ROWS)


def test_only_bundled_models_in_modelled_layouts_and_formats_are_read(sample):
    rows, left_out = read_serving_rows(sample)
    assert [r.id for r in rows] == ["a", "b", "c", "e"] and left_out == 1  # the disaggregated row is not counted
    assert (rows[1].model, rows[1].hardware, rows[1].weights, rows[1].tp, rows[1].concurrency) == \
        ("llama-3.1-70b", "h200", "fp8", 2, 32)
    assert rows[0].ttft_s == pytest.approx(0.050) and rows[0].tpot_s == pytest.approx(0.008)


def test_under_load_ttft_and_tpot_are_never_below_the_offline_estimates(sample):
    rows, _ = read_serving_rows(sample)
    p = predict(rows, load_engine("tensorrt-llm"))
    assert np.all(np.isfinite([p[k] for k in p]))
    assert np.all(p["ttft_after"] >= p["ttft_before"]) and np.all(p["tpot_after"] >= p["tpot_before"])
    report = scores(rows, p)
    assert report["all"]["tpot_after"]["n"] == 4 and set(report) == {"trtllm", "vllm", "all"}


def test_accuracy_serving_with_an_engine_prints_before_and_after(sample, capsys):
    assert main(["accuracy", "--serving", str(sample), "--engine", "tensorrt-llm"]) == 0
    out = capsys.readouterr().out
    assert "4 aggregated rows priced with tensorrt-llm" in out and "tpot_after" in out
    assert main(["accuracy", "--serving", str(sample.with_name("missing.csv"))]) == 2


def test_row_table_holds_each_row_measured_beside_predicted_and_the_scores_come_from_it(sample, tmp_path, capsys):
    import csv
    import json
    table = tmp_path / "rows.csv"
    assert main(["accuracy", "--serving", str(sample), "--engine", "tensorrt-llm", "--rows", str(table),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["scores"]["all"]
    lines = list(csv.DictReader(table.read_text().splitlines()))
    assert [r["id"] for r in lines] == ["a", "b", "c", "e"]
    assert [float(r["ttft_ms"]) for r in lines] == [50.0, 200.0, 50.0, 50.0]  # the file's own milliseconds
    assert [float(r["tpot_ms"]) for r in lines] == [8.0, 20.0, 8.0, 8.0]
    for metric in ("ttft", "tpot"):
        errors = [float(r[f"{metric}_after_ms"]) / float(r[f"{metric}_ms"]) - 1 for r in lines]
        assert [float(r[f"{metric}_error"]) for r in lines] == pytest.approx(errors, abs=1e-4)
        assert float(np.median(np.abs(errors))) == pytest.approx(report[f"{metric}_after"]["median"], rel=1e-3)
    assert (lines[1]["weights"], lines[1]["tp"], lines[1]["concurrency"]) == ("fp8", "2", "32")
    # a table of serving rows needs --serving; the Blackwell transfer scores write none
    for argv in (["accuracy", "--rows", str(table)], ["accuracy", "--serving", str(sample), "--transfer", "--rows",
                                                       str(table)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "--rows" in err and "--serving" in err


def test_no_rows_score_as_none_not_a_crash():
    """An empty selection (a file with only disaggregated rows) indexed with a float array and raised IndexError."""
    from roofline import load_engine
    from roofline.fitting.published_serving import predict, scores
    assert scores([], predict([], load_engine("tensorrt-llm")))["all"]["tpot_after"] == {"n": 0, "median": None,
                                                                                         "p90": None}


SERVING_HOPPER = Path(__file__).resolve().parents[2] / "shared" / "published" / "serving-hopper.csv"


@pytest.mark.skipif(not SERVING_HOPPER.is_file(), reason="../shared/published/serving-hopper.csv not beside the repo")
def test_the_simulator_runs_a_rows_closed_loop_as_the_load_model_prices_it():
    """Kimi-K2.5's 7373-token prompts on 8 H200s (InferenceX, lengths drawn in [0.8 L, L] about the row's mean): the
    simulator's run of the row (published_serving.simulate) and the load model's steady state (predict) decode within
    5% of each other at 4 and at 64 clients, and the drawn lengths keep the row's means."""
    rows, _ = read_serving_rows(SERVING_HOPPER)
    chosen = [r for r in rows if r.model == "kimi-k2.5" and r.prompt > 7000 and r.concurrency in (4, 64)
              and r.id.startswith("2026_04_06")]
    assert sorted(r.concurrency for r in chosen) == [4, 64] and all(r.launch.lengths_vary for r in chosen)
    engine = load_engine("vllm")
    steady, simulated = predict(chosen, engine), simulate(chosen, engine)
    assert simulated["tpot_after"] == pytest.approx(steady["tpot_after"], rel=0.05)
    assert np.all(simulated["ttft_after"] > 0.5 * steady["ttft_after"])
    prompts, outputs = client_lengths(chosen[0], 4000, np.random.default_rng(0))
    assert prompts.mean() == pytest.approx(chosen[0].prompt, rel=0.01)
    assert outputs.mean() == pytest.approx(chosen[0].gen, rel=0.01)
    assert prompts.min() >= 0.8 * prompts.max() - 1
