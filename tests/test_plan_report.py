"""`roofline report --rate --ttft --tpot`: a plan section with the library's plan, its verdict and closed forms."""
import json

from roofline.cli import main
from roofline.planning.plan import Targets, Workload, plan


def test_the_report_plan_section_is_the_librarys_plan(tmp_path):
    argv = ["report", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "h200", "--no-plots", "--format", "md",
            "--prompt", "2000", "--gen", "500", "--rate", "3", "--ttft", "1", "--tpot", "0.04", "--out", str(tmp_path)]
    assert main(argv) == 0
    text = (tmp_path / "report.md").read_text()
    assert "## 8. Plan: what serves 3 requests/s" in text
    # issue 26: priced by the default engine (tensorrt-llm-1) under load; it was "2 x h200 tp=2 ... ideal at batch
    # 191", the ideal bound's capacity batch, which no engine reaches, then "8 x h100-sxm tp=8 ... tensorrt-llm, 40
    # requests" under the 0.x profile (tests/test_plan_hand.py works that one). One replica of 4 H200s at $4.00 an
    # hour: 4 x 4.00 / (3 x 500 x 3600) x 1e6 = $2.96 a million; in flight 3/s x (496 ms + 499 x 34.5 ms) = 53
    # (55 before the refit beside TensorRT-LLM's batch wait, 512 ms and 35.9 ms; 57 under a per-layer cost)
    assert "Cheapest: 4 x h200 tp=4 bf16/bf16 tensorrt-llm-1, 53 requests in flight a replica" in text
    assert "$2.96 per million output tokens" in text
    assert "largest batch within TPOT B = floor(" in text and "TP break-even" in text
    frame = plan("llama-3.1-70b", Workload(3, 2000, 500), Targets(1.0, 0.04), ("h100-sxm", "h200"), (1, 2, 4, 8),
                 ("bf16",), kv=("bf16",))
    data = json.loads((tmp_path / "results.json").read_text())["plan"]
    assert data["verdict"].startswith("Cheapest: 4 x h200")
    kept = [row for row in data["candidates"] if row["feasible"]]
    assert [r["usd_per_million_tokens"] for r in kept] == list(frame.loc[frame["feasible"], "usd_per_million_tokens"])


def test_a_report_without_targets_has_no_plan_and_half_the_targets_is_refused(tmp_path, capsys):
    assert main(["report", "--rate", "3", "--out", str(tmp_path)]) == 2
    assert "--ttft, --tpot: the plan section needs --rate, --ttft and --tpot together" in capsys.readouterr().err
    assert main(["report", "--rate", "3", "--ttft", "soon", "--tpot", "0.05", "--out", str(tmp_path)]) == 2
    assert "--ttft: expected a number > 0" in capsys.readouterr().err


def test_with_an_engine_the_plan_is_section_9_and_prices_that_engine():
    from roofline.views.render import markdown
    from roofline.study.report import build_study
    study = build_study("llama-2-7b", "a100-80gb", batch=[1, 8], plots=False, engine="llama.cpp",
                        slo={"rate": 2.0, "ttft_s": 1.0, "tpot_s": 0.05})
    text = markdown(study)
    assert "## 8. Achievable with llama.cpp" in text and "## 9. Plan: what serves 2 requests/s" in text
    assert set(study.plan.frame["engine"]) == {"llama.cpp"}
