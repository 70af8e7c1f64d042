"""The rows whose benchmark timed TTFT one completion ahead: the source list against the measured rows themselves,
and the predicted TTFT those rows are compared with."""
import csv
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from roofline.engine import load_engine
from roofline.fitting.published_serving import predict, read_serving_rows
from roofline.fitting.serving_rows import COMPLETION_INTERVAL_SOURCES, source_file
from serving_sample import TAIL, write_sample

SERVING_HOPPER = Path(__file__).resolve().parents[2] / "shared" / "published" / "serving-hopper.csv"
# A closed-loop group: one deployment, one prompt length, one concurrency; the output length varies within it.
GROUP = ("backend", "backend_version", "model_path", "system", "precision", "gemm_quant_mode", "moe_quant_mode",
         "tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size", "isl", "batch_size")
LOW_CONCURRENCY = 64  # beyond it E2E / C is a small part of TTFT and the KV pool's queue moves TTFT with osl too


def completion_slopes(path: Path) -> dict:
    """(backend, source file) -> slope x C of each group's line of measured TTFT against osl x TPOT (C <= 64).

    A client that times a request from one completion before it is sent adds E2E / C = (TTFT + (osl - 1) TPOT) / C:
    a slope of 1 / C; a server alone, none (at a fixed C a longer output only spaces the arrivals out)."""
    groups = defaultdict(list)
    with path.open(newline="") as handle:
        for raw in csv.DictReader(handle):
            if raw["mode"] == "agg" and int(raw["batch_size"]) <= LOW_CONCURRENCY:
                groups[(source_file(raw),) + tuple(raw[k] for k in GROUP)].append(raw)
    slopes = defaultdict(list)
    for (source, backend, *_, concurrency), members in groups.items():
        osl = np.array([float(m["osl"]) for m in members])
        if len(set(osl)) < 2:
            continue
        tpot, ttft = (np.array([float(m[k]) for m in members]) for k in ("silicon_tpot_ms", "silicon_ttft_ms"))
        slope = np.polyfit(osl * tpot, ttft, 1)[0]
        slopes[(backend, source)].append(slope * float(concurrency))
    return slopes


@pytest.mark.skipif(not SERVING_HOPPER.is_file(), reason="../shared/published/serving-hopper.csv not beside the repo")
def test_the_marked_sources_are_those_whose_ttft_grows_by_one_completion_interval():
    slopes = completion_slopes(SERVING_HOPPER)
    for source in COMPLETION_INTERVAL_SOURCES:
        assert len(slopes[source]) >= 40  # TensorRT-LLM Llama-3.1-8B: tp 1-8 x isl 1k-4k x C 8-64
        assert 0.7 <= np.median(slopes[source]) <= 1.3, source
    others = {key: values for key, values in slopes.items() if key not in COMPLETION_INTERVAL_SOURCES}
    assert len(others) >= 15
    assert abs(np.median(np.concatenate(list(others.values())))) < 0.3
    # and no other source hides the wait: none has half its groups growing by a third of E2E / C
    assert all(np.median(values) < 0.3 for values in others.values()), {k: np.median(v) for k, v in others.items()}


MARKED_FILE = "source_file=meta-llama_Llama-3.1-8B-Instruct.csv; silicon_concurrency=8"


def test_a_marked_rows_ttft_is_the_servers_plus_one_completion_interval(tmp_path):
    """Rows 504-506 of the file (TensorRT-LLM, Llama-3.1-8B, one H100, 1024 in, C = 8), and the same row from the
    file's SGLang benchmark (same source file name, another client) and from another file: only the first is marked."""
    lines = [f"{name},{source},{backend},1.0,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,,agg,1024,{osl},,,8,1,1,,1,1"
             f"{TAIL},{ttft},{tpot}"
             for name, source, backend, osl, ttft, tpot in (
                 ("marked", MARKED_FILE, "trtllm", 512, 550.008, 7.4168),
                 ("sglang", MARKED_FILE, "sglang", 512, 550.008, 7.4168),
                 # (1 ms apart: the same TTFT and TPOT in another file would be a copy, fitting.copies)
                 ("other", "source_file=2026-04-06.csv; silicon_concurrency=8", "trtllm", 512, 551.008, 7.4168))]
    rows, _ = read_serving_rows(write_sample(tmp_path, lines))
    assert [r.ttft_includes_completion_interval for r in rows] == [True, False, False]
    engine = load_engine("tensorrt-llm-1")
    timed = predict(rows, engine)
    server = predict([replace(r, ttft_includes_completion_interval=False) for r in rows], engine)
    for when in ("before", "after"):
        ttft, tpot = server[f"ttft_{when}"][0], server[f"tpot_{when}"][0]
        assert timed[f"ttft_{when}"][0] == pytest.approx(ttft + (ttft + 511 * tpot) / 8, rel=1e-12)
        assert np.array_equal(timed[f"ttft_{when}"][1:], server[f"ttft_{when}"][1:])
        assert np.array_equal(timed[f"tpot_{when}"], server[f"tpot_{when}"])
    # the measured row: 550 ms, of which E2E / C = (550 + 511 x 7.42) / 8 = 542 ms is the client's wait
    assert (rows[0].ttft_s + 511 * rows[0].tpot_s) / 8 == pytest.approx(0.5425, rel=1e-3)
