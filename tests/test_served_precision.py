"""The formats as a serving engine runs them (roofline.precision.as_served): fp8 weights multiply fp8 activations where
the device has fp8 tensor cores, NVFP4 W4A4 where it has FP4 ones, 16 bits elsewhere; one rule for the published rows,
aggregated and disaggregated alike, for the planner's candidates and for the CLI without --act."""
import json

import pytest

from roofline.cli import main
from roofline.engine import load_engine
from roofline.fitting.published_disagg import _deployment as disagg_deployment
from roofline.fitting.published_disagg import read_disagg_rows
from roofline.fitting.published_serving import _deployment as serving_deployment
from roofline.fitting.published_serving import read_serving_rows
from roofline.hardware import load_hardware
from roofline.models.config import load_model
from roofline.model import PREFILL
from roofline.planning.search import core
from roofline.precision import Precision, as_served
from serving_sample import write_sample

PEAKS = {name: load_hardware(name).peak_flops for name in ("h100-sxm", "a100-80gb", "b200")}


@pytest.mark.parametrize("precision, device, activations", [
    (Precision(weights="fp8"), "h100-sxm", "fp8"),  # W8A8 on Hopper's fp8 tensor cores
    (Precision(weights="fp8"), "a100-80gb", "bf16"),  # no fp8 units: dequantized, 16-bit GEMMs
    (Precision(weights="nvfp4"), "b200", "nvfp4"),  # W4A4 on Blackwell's FP4 units
    (Precision(weights="nvfp4"), "h100-sxm", "bf16"),  # weight-only on Hopper
    (Precision(weights="int4"), "h100-sxm", "bf16"),  # weight-only everywhere
    (Precision(weights="bf16"), "h100-sxm", "bf16"),
    (Precision(weights="fp8", activations="fp16"), "h100-sxm", "fp16"),  # activations named: kept
])
def test_the_served_activations_by_format_and_device(precision, device, activations):
    served = as_served(precision, PEAKS[device])
    assert served.activations == activations
    assert (served.weights, served.kv, served.experts) == (precision.weights, precision.kv, precision.experts)


AGG_ROW = ("agg,silicon_concurrency=8,trtllm,1.0,deepseek-ai/DeepSeek-R1,h200_sxm,fp8,agg,1024,256,fp8,fp8,8,8,1,,"
           "1,8" + "," * 14 + ",400.0,8.0")
DISAGG_ROW = ("tpep,silicon_concurrency=8,trtllm,1.0,deepseek-ai/DeepSeek-V3,h200_sxm,fp8,disagg,1024,256,fp8,fp8_block,"
              ",,,,,,1,1,8,1,1,1,8,4,2,8,1,1,1,8,400.0,8.0")


def test_an_aggregated_and_a_disaggregated_row_of_one_checkpoint_run_the_same_gemms(tmp_path):
    """The same fp8 checkpoint on the same engine prices its GEMMs W8A8 whether its prefill runs in a pool of its own
    or beside the decode steps (the disaggregated pools priced them in 16 bits before: a prefill twice as slow)."""
    engine = load_engine("tensorrt-llm-1")
    aggregated, _ = read_serving_rows(write_sample(tmp_path, [AGG_ROW]))
    pooled, _ = read_disagg_rows(write_sample(tmp_path, [DISAGG_ROW]))
    one = serving_deployment(aggregated[0], engine)
    prefill = disagg_deployment(pooled[0], pooled[0].prefill, engine)
    assert one.precision.activations == prefill.precision.activations == "fp8"
    assert one.precision.weight_matmul_dtype == prefill.precision.weight_matmul_dtype == "fp8"


def test_the_planner_prices_an_fp8_candidate_as_the_engine_runs_it():
    """On an H100 an fp8 candidate's lone prefill is the W8A8 one, faster than 16-bit GEMMs would give; on an A100
    (no fp8 units) it is the W8A16 one."""
    config = load_model("llama-3.1-70b")
    for device, activations in (("h100-sxm", "fp8"), ("a100-80gb", "bf16")):
        c = core(config, load_hardware(device), 4, 1, 1, "fp8", "fp8", "tensorrt-llm-1", 4000, 200, 0.05, (8192,),
                 priced=False)
        assert c.d.precision.activations == activations
    d = core(config, load_hardware("h100-sxm"), 4, 1, 1, "fp8", "fp8", "tensorrt-llm-1", 4000, 200, 0.05, (8192,),
             priced=False).d
    w8a16 = d.__class__(d.config, d.hardware, Precision(weights="fp8", kv="fp8"), tp=4, engine=d.engine)
    assert d.step(PREFILL, 1.0, 4000.0).total_s < 0.75 * w8a16.step(PREFILL, 1.0, 4000.0).total_s


def _analyze(capsys, *extra):
    assert main(["analyze", "--model", "llama-3.1-8b", "--batch", "1", "--prompt", "4096", "--weights", "fp8",
                 *extra]) == 0
    return capsys.readouterr().out


def test_the_cli_without_act_prices_the_weights_as_served_and_act_overrides(capsys):
    assert "activations fp8" in _analyze(capsys, "--hardware", "h100-sxm")
    assert "activations bf16" in _analyze(capsys, "--hardware", "a100-80gb")  # no fp8 units: weight-only
    assert "activations bf16" in _analyze(capsys, "--hardware", "h100-sxm", "--act", "bf16")
    served = json.loads(_analyze(capsys, "--hardware", "h100-sxm", "--json"))[0]
    weight_only = json.loads(_analyze(capsys, "--hardware", "h100-sxm", "--act", "bf16", "--json"))[0]
    assert served["ttft_s"] < weight_only["ttft_s"]  # a 4096-token prefill's GEMMs at the fp8 peak
