"""A run's length read from its digits (roofline.fitting.clients): whole nanoseconds over N requests, the file's
genai-perf runs found again, and the first wave priced at its share of the run."""
import csv
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest

from roofline.engine import load_engine
from roofline.fitting.clients import RUNS, ClientRun, run_length, whole_ns
from roofline.fitting.published_serving import RUN_REQUESTS_PER_CLIENT, predict, read_serving_table
from roofline.fitting.serving_rows import concurrency, source_file
from serving_sample import TAIL, write_sample

SERVING_HOPPER = Path(__file__).resolve().parents[2] / "shared" / "published" / "serving-hopper.csv"


def test_whole_nanoseconds_over_n_requests_give_n_back():
    # three runs of 160 requests whose per-request times sum to odd whole nanoseconds: no shorter run fits all three
    runs = [(123_456_789 / 160 / 1e6, 1_234_567 / 160 / 1e6), (98_765_431 / 160 / 1e6, 7_654_321 / 160 / 1e6),
            (55_555_555 / 160 / 1e6, 3_333_333 / 160 / 1e6)]
    assert all(whole_ns(ttft, 160) and whole_ns(tpot, 160) for ttft, tpot in runs)
    assert run_length(runs, 500) == (160, 3)
    assert not whole_ns(runs[0][0], 80)
    assert ClientRun(20, 2000).requests(64) == 1280 and ClientRun(20, 2000).requests(128) == 2000
    assert ClientRun(10).requests(128) == 1280


@pytest.mark.skipif(not SERVING_HOPPER.is_file(), reason="../shared/published/serving-hopper.csv not beside the repo")
def test_the_files_genai_perf_runs_are_the_lengths_their_digits_give():
    means = defaultdict(list)
    with SERVING_HOPPER.open() as handle:
        for raw in csv.DictReader(handle):
            key = (raw["backend"], raw["backend_version"].strip(), source_file(raw))
            if raw["mode"] == "agg" and key in RUNS:
                means[key, concurrency(raw)].append((float(raw["silicon_ttft_ms"]), float(raw["silicon_tpot_ms"])))
    assert {key for key, _ in means} == set(RUNS)
    for (key, clients), rows in means.items():
        n, fits = run_length(rows, 2500)
        assert n == RUNS[key].requests(clients), (key, clients)
        assert fits >= 0.6 * len(rows)  # most rows; a few runs lost a request or two (Llama-3.1-8B past C 16)


def test_a_known_run_weighs_its_first_wave_by_its_length(tmp_path):
    line = (",source_file=Qwen_Qwen3-32B.csv; silicon_concurrency=32,trtllm,1.0.0rc3,Qwen/Qwen3-32B,h100_sxm,fp8,agg,"
            "4096,512,fp8,fp8,32,2,1,,1,1" + TAIL + ",555.2,16.1")
    row = read_serving_table(write_sample(tmp_path, ["known" + line])).rows[0]
    assert row.requests == 20 * 32
    engine = load_engine("tensorrt-llm-1")
    known = predict([row], engine)["ttft_after"][0]  # N = 20 C
    assumed = predict([replace(row, requests=None)], engine)["ttft_after"][0]  # N = 10 C
    wave = predict([replace(row, requests=32)], engine)["ttft_after"][0]  # N = C: the run is its first wave
    # a run's mean is the steady state's plus (wave − steady) C / N: known − steady = assumed − known
    steady = 2 * known - assumed
    assert RUN_REQUESTS_PER_CLIENT == 10 and steady < known < assumed < wave
    assert wave - steady == pytest.approx(20 * (known - steady), rel=1e-9)
