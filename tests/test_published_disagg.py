"""serving-hopper.csv's disaggregated rows read as two pools: which layouts are read, the concurrency rule, and
each priced at its concurrency (at one request in flight: a lone prefill, the handoff, the transfer and the batch-1 step)."""
import json

import numpy as np
import pytest

from roofline.cli import main
from roofline.engine import load_engine
from roofline.fitting.published_disagg import predict, price, read_disagg_rows, scores
from roofline.model import DECODE, PREFILL, decode_context
from serving_sample import write_sample

AGG = ",,,,,"  # the aggregated layout columns, blank in a disaggregated row
ROWS = [
    # tp 8 both pools (moe_tp 8), one worker each, the concurrency in the source: read
    f"tp,silicon_concurrency=1,sglang,0.5,deepseek-ai/DeepSeek-V3,h200_sxm,fp8,disagg,1024,256,fp8,fp8_block,{AGG}"
    ",1,1,8,1,1,8,1,1,1,8,1,1,8,1,400.0,8.0",
    # data-parallel attention over the experts (dp 8 = ep 8) both pools; 3 decode workers of 16 a rank: read, C 384
    f"ep,silicon_concurrency=384; config_id=7,trtllm,1.0,deepseek-ai/DeepSeek-V3,h200_sxm,fp8,disagg,1024,256,fp8,"
    f"fp8_block,{AGG},8,1,1,1,8,1,8,16,3,1,1,8,1,8,900.0,30.0",
    # tp 8 with the experts split 8 ways by EP under it: read as tp 8 (serving_rows.layout)
    f"tpep,silicon_concurrency=8,trtllm,1.0,deepseek-ai/DeepSeek-V3,h200_sxm,fp8,disagg,1024,256,fp8,fp8_block,{AGG}"
    ",1,1,8,1,1,1,8,4,2,8,1,1,1,8,400.0,8.0",
    # Qwen3-235B, vLLM: attention dp 4 with the MoE columns 0 (no expert split stated): read as ep 4
    f"vllm,silicon_concurrency=12,vllm,0.12,Qwen/Qwen3-235B-A22B-FP8,h100_sxm,fp8,disagg,4000,1000,fp8,fp8,{AGG}"
    ",1,1,1,1,4,0,0,24,1,4,1,1,0,0,900.0,12.0",
    # tp 16 on H100s: a pool spanning nodes, left out
    f"wide,silicon_concurrency=8,sglang,0.5,deepseek-ai/DeepSeek-V3,h100_sxm,fp8,disagg,1024,256,fp8,fp8_block,{AGG}"
    ",1,1,16,1,1,16,1,1,1,16,1,1,16,1,400.0,8.0",
    # a dense model whose source states no concurrency (its decode batch x workers is a cap): left out
    f"dense,src,vllm,0.12,Qwen/Qwen3-32B,h100_sxm,fp8,disagg,4000,1000,fp8,fp8,{AGG}"
    ",1,2,1,1,1,0,0,24,2,4,1,1,0,0,500.0,15.0",
    # no worker counts (InferenceMAX): left out; the second repeats row tpep's measurement: counted once, as tpep
    f"blank,silicon_concurrency=8,trtllm,1.0,deepseek-ai/DeepSeek-R1,h200_sxm,fp8,disagg,1024,256,fp8,fp8,{AGG}"
    ",,,8,1,1,1,8,,,8,1,1,1,8,410.0,8.0",
    f"repeat,silicon_concurrency=8,trtllm,1.0,deepseek-ai/DeepSeek-R1,h200_sxm,fp8,disagg,1024,256,fp8,fp8,{AGG}"
    ",,,8,1,1,1,8,,,8,1,1,1,8,400.0,8.0",
    # an aggregated row: the other section's, never read here
    "agg,src,trtllm,1.0,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,,agg,1024,128,,,16,1,1,,1,1" + "," * 14 + ",50.0,8.0",
]


@pytest.fixture
def sample(tmp_path):
    return write_sample(tmp_path, ROWS)


def test_pools_read_as_aggregated_layouts_are_and_rows_without_workers_or_concurrency_are_not(sample):
    rows, left_out = read_disagg_rows(sample)
    assert [r.id for r in rows] == ["tp", "ep", "tpep", "vllm"]
    assert dict(left_out) == {"a pool spanning nodes": 1, "concurrency not stated": 1, "workers not stated": 1,
                              "a repeat of a row stating its workers": 1}
    tp, ep, tpep, vllm = rows
    # experts None: the same format as the other weights (serving_rows.formats, as the aggregated rows read it)
    assert (tp.model, tp.hardware, tp.weights, tp.experts, tp.prefill.tp, tp.decode.tp, tp.concurrency) == \
        ("deepseek-v3", "h200", "fp8", None, 8, 8, 1)
    assert (ep.prefill.ep, ep.decode.ep, ep.decode.workers, ep.decode.batch, ep.concurrency) == (8, 8, 3, 128, 384)
    assert (tpep.prefill.tp, tpep.prefill.ep, tpep.decode.tp, tpep.decode.workers, tpep.decode.batch) == (8, 1, 8, 2, 4)
    assert (vllm.prefill.tp, vllm.prefill.ep, vllm.decode.tp, vllm.decode.ep) == (1, 4, 4, 1)
    assert (ep.configuration, tp.configuration) == ("7", "tp")  # the source's config_id, else the row's own id


def test_one_request_in_flight_costs_a_lone_prefill_the_handoff_the_transfer_and_batch_one_steps(sample):
    rows, _ = read_disagg_rows(sample)
    engine = load_engine("tensorrt-llm")
    row = rows[0]
    pools = price(row, engine)
    state = pools.at_concurrency([1.0])
    prefill = float(pools.prefill.step(PREFILL, 1.0, 1024.0).total_s)
    # MLA: the 61 layers' latent (512 + 64 rope) x 2 B whole on every GPU: 70,272 B a token (not 128 heads'
    # K and V); 8 + 8 GPUs span two nodes: over one 400 Gb/s port a GPU
    assert pools.link.name == "network"
    assert pools.transfer_s == pytest.approx(1024 * 61 * 576 * 2 / 50e9, rel=1e-9)
    assert engine.disagg_handoff_s > 0 and state["handoff_s"][0] == engine.disagg_handoff_s
    lone = prefill + engine.request_overhead_s + engine.disagg_handoff_s + pools.transfer_s
    assert state["ttft_s"][0] == pytest.approx(lone, rel=1e-4)
    step = float(pools.decode.step(DECODE, 1.0, decode_context(1024 + 128)).total_s)
    assert state["tpot_s"][0] == pytest.approx(step, rel=1e-4)


def test_every_read_row_is_priced_and_scored_by_backend_and_model(sample, capsys):
    rows, _ = read_disagg_rows(sample)
    predicted = predict(rows, load_engine("tensorrt-llm"))
    assert np.all(np.isfinite(predicted["ttft"])) and np.all(np.isfinite(predicted["tpot"]))
    report = scores(rows, predicted)
    assert report["all"]["tpot"]["n"] == 4 and {"backend sglang", "model deepseek-v3", "model qwen3-235b-a22b"} <= set(report)
    assert main(["accuracy", "--serving", str(sample), "--engine", "tensorrt-llm"]) == 0
    out = capsys.readouterr().out
    assert "disaggregated: 4 rows priced" in out and "leave_one_configuration_out" in out
    assert "trtllm deepseek-v3 h200 prompt 1024:" in out and "a worker one server, all" in out
    assert main(["accuracy", "--serving", str(sample), "--engine", "tensorrt-llm", "--json"]) == 0
    load = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)["disaggregated"]["measured_load"]
    assert {t["prompt"] for t in load["throughput"]} == {1024, 4000} and load["one_server"]["all"]["n"] == 4
