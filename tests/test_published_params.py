"""Parameter counts of the bundled issue-14 models against the counts their makers publish.

A published figure is read as its digits allow: `unit` is the place of its last digit; 'round' means
|ours - published| <= unit/2, 'trunc' (the maker cut the digits off: Qwen's 30.53B is '30.5B' and its
3.35B '3.3B', DeepSeek-V3's 37.55B active is '37B') means published <= ours < published + unit. A note
says where a row needs more, and why. 'Active' conventions differ by maker: some leave the input
embedding out (a gather, not a matmul), some the LM head too; each row says which.
"""
import pytest

from roofline import load_model
from roofline.model import active_parameter_count, parameter_count

B = 1e9
# Llama-4-Scout's vision tower and projector: Llama4ForConditionalGeneration built from
# data/models/llama-4-scout.json on the meta device (transformers 5.23) holds 108,641,793,536 parameters,
# 871,932,416 of them outside its language model (Maverick's, built the same way: the same 871,932,416).
SCOUT_VISION = 871_932_416
QWEN35_VISION = 456_010_480
EMBEDDING, HEAD = "embedding", "head"
# model, which count, published, unit, reading, left out of 'active', source
PUBLISHED = [
    ("qwen3-8b", "total", 8.2 * B, 0.1 * B, "round", (),
     "https://huggingface.co/Qwen/Qwen3-8B model card: Number of Parameters 8.2B"),
    ("qwen3-30b-a3b", "total", 30.5 * B, 0.1 * B, "trunc", (),
     "https://huggingface.co/Qwen/Qwen3-30B-A3B model card: 30.5B in total, 3.3B activated"),
    ("qwen3-30b-a3b", "active", 3.3 * B, 0.1 * B, "trunc", (), "the same card"),
    # Gemma 3 report Table 1 (27B): embedding 1,416M + non-embedding 25,600M (the 417M vision encoder is
    # not the language model); the sum is good to the 100M of its coarser term.
    ("gemma-3-27b", "total", 27.016 * B, 0.1 * B, "round", (), "Gemma 3 Technical Report, arXiv:2503.19786, Table 1"),
    # GLM-4.5-Air (the MTP layer counted by neither); its active count leaves out embedding and LM head.
    ("glm-4.5-air", "total", 106 * B, 1 * B, "trunc", (), "https://github.com/zai-org/GLM-4.5 README: 106B total, 12B active"),
    ("glm-4.5-air", "active", 12 * B, 1 * B, "round", (EMBEDDING, HEAD), "the same README"),
    # Kimi K2: the report's 1.04T is 1.3% above our 1.026T (DeepSeek-V3's architecture, which we match to the
    # parameter); one more MoE layer (16.9B routed, like DeepSeek-V3's MTP module) would close it. The unit
    # here is 0.03T for that gap, not for rounding.
    ("kimi-k2", "total", 1040 * B, 30 * B, "round", (),
     "Kimi K2 technical report, arXiv:2507.20534: 1.04 trillion total, 32 billion activated"),
    ("kimi-k2", "active", 32 * B, 1 * B, "trunc", (), "the same report"),
    # Llama 4 Scout: 109B counts the vision encoder and projector we leave out (SCOUT_VISION).
    ("llama-4-scout", "total", 109 * B - SCOUT_VISION, 1 * B, "round", (),
     "https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E model card: 17B activated, 109B total"),
    ("llama-4-scout", "active", 17 * B, 1 * B, "round", (), "the same card"),
    # Llama 4 Maverick: '400B' (read to the ten) with the same vision tower; MoE on every 2nd layer.
    ("llama-4-maverick", "total", 400 * B - SCOUT_VISION, 10 * B, "round", (),
     "https://huggingface.co/meta-llama/Llama-4-Maverick-17B-128E model card: 17B activated, 400B total"),
    ("llama-4-maverick", "active", 17 * B, 1 * B, "round", (), "the same card"),
    # gpt-oss model card Table 1, to 10M; active leaves out the embedding (the unembedding stays in).
    ("gpt-oss-20b", "total", 20.91 * B, 0.01 * B, "round", (), "gpt-oss model card, arXiv:2508.10925, Table 1"),
    ("gpt-oss-20b", "active", 3.61 * B, 0.01 * B, "round", (EMBEDDING,), "the same table"),
    ("gpt-oss-120b", "total", 116.83 * B, 0.01 * B, "round", (), "the same table"),
    ("gpt-oss-120b", "active", 5.13 * B, 0.01 * B, "round", (EMBEDDING,), "the same table"),
    # Issue 25's families (configs from aiconfigurator-core 0.12.0). Qwen3.5's 397B counts its vision tower
    # (Qwen3_5MoeForConditionalGeneration on the meta device, transformers 5.24: 456,010,480 parameters in
    # `model.visual`), which we leave out; its 17B active is read with the same tower out.
    ("qwen3.5-397b-a17b", "total", 397 * B - QWEN35_VISION, 1 * B, "round", (),
     "https://huggingface.co/Qwen/Qwen3.5-397B-A17B model card: 397B in total, 17B activated"),
    ("qwen3.5-397b-a17b", "active", 17 * B, 1 * B, "trunc", (), "the same card"),
    ("glm-5", "total", 744 * B, 1 * B, "round", (), "https://huggingface.co/zai-org/GLM-5 model card: 744B "
     "parameters (40B active)"),
    ("glm-5", "active", 40 * B, 1 * B, "round", (EMBEDDING, HEAD), "the same card"),
    # MiniMax's '230B' read to the ten (its 3 MTP modules are not built by transformers, nor counted here).
    ("minimax-m2.5", "total", 230 * B, 10 * B, "round", (), "https://huggingface.co/MiniMaxAI/MiniMax-M2.5 model "
     "card: 230B total parameters with 10B active"),
    ("minimax-m2.5", "active", 10 * B, 1 * B, "round", (EMBEDDING, HEAD), "the same card"),
    ("kimi-k2.5", "total", 1000 * B, 100 * B, "round", (), "https://huggingface.co/moonshotai/Kimi-K2.5 model card: "
     "1T total parameters, 32B activated"),
    ("kimi-k2.5", "active", 32 * B, 1 * B, "trunc", (), "the same card"),
    ("nemotron-3-nano-30b-a3b", "total", 31.6 * B, 0.1 * B, "round", (),
     "https://huggingface.co/nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 model card: 31.6B total, about 3.2B "
     "active (3.6B including embeddings)"),
    ("nemotron-3-nano-30b-a3b", "active", 3.6 * B, 0.1 * B, "round", (), "the same card"),
    ("nemotron-3-nano-30b-a3b", "active", 3.2 * B, 0.1 * B, "round", (EMBEDDING,), "the same card"),
    ("qwen3-32b", "total", 32.8 * B, 0.1 * B, "round", (), "https://huggingface.co/Qwen/Qwen3-32B model card: "
     "Number of Parameters 32.8B"),
    ("qwen3-235b-a22b", "total", 235 * B, 1 * B, "trunc", (), "https://huggingface.co/Qwen/Qwen3-235B-A22B model "
     "card: 235B in total, 22B activated"),
    ("qwen3-235b-a22b", "active", 22 * B, 1 * B, "trunc", (), "the same card"),
    # Gemma 4 26B-A4B: 25.2B total, 3.8B active, both of the language model (its ~550M vision encoder would make
    # the total 25.8B, which the card does not print).
    ("gemma-4-26b-a4b", "total", 25.2 * B, 0.1 * B, "round", (), "https://huggingface.co/google/gemma-4-26B-A4B "
     "model card (as transcribed by vast.ai/model/gemma-4-26b-a4b-it): 25.2B total parameters, 3.8B active"),
    ("gemma-4-26b-a4b", "active", 3.8 * B, 0.1 * B, "round", (), "the same card"),
    # MiMo-V2-Flash: its 3 MTP blocks (0.33B each, released apart) are not built by transformers, nor counted here.
    ("mimo-v2-flash", "total", 309 * B, 1 * B, "round", (), "https://github.com/XiaomiMiMo/MiMo-V2-Flash README: "
     "309B total parameters and 15B active parameters"),
    ("mimo-v2-flash", "active", 15 * B, 1 * B, "round", (), "the same README"),
    # Step-3.7-Flash: 198B = a 196B language backbone + a 1.8B perception encoder (left out here); 11B active.
    ("step-3.7-flash", "total", 196 * B, 1 * B, "round", (), "vLLM recipes, stepfun-ai/Step-3.7-Flash: ~198B total / "
     "11B active, a 196B sparse language backbone with a 1.8B perception encoder"),
    ("step-3.7-flash", "active", 11 * B, 1 * B, "round", (), "the same page"),
    # MiniMax-M3: '~428B' counts its vision encoder (read to the ten here); '~23B' activated leaves out the
    # embedding and LM head (200,064 x 6,144 each).
    ("minimax-m3", "total", 428 * B, 10 * B, "round", (), "https://huggingface.co/MiniMaxAI/MiniMax-M3 model card "
     "(as transcribed by sota.borgcloud.ai): ~428B parameters and ~23B activated parameters"),
    ("minimax-m3", "active", 23 * B, 1 * B, "trunc", (EMBEDDING, HEAD), "the same card"),
    ("deepseek-v4-flash", "total", 284 * B, 1 * B, "round", (), "https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash "
     "model card (as transcribed by featherless.ai): 284B total parameters, 13B activated"),
    ("deepseek-v4-flash", "active", 13 * B, 1 * B, "trunc", (), "the same card"),
]


def ours(name: str, which: str, left_out: tuple) -> int:
    config = load_model(name)
    if which == "total":
        return parameter_count(config)
    table = config.vocab_size * config.d_model
    head = 0 if config.tied_embeddings else table
    return active_parameter_count(config) - (table if EMBEDDING in left_out else 0) - (head if HEAD in left_out else 0)


@pytest.mark.parametrize("name, which, published, unit, reading, left_out",
                         [row[:6] for row in PUBLISHED], ids=[f"{r[0]}-{r[1]}" for r in PUBLISHED])
def test_parameter_count_matches_the_published_figure(name, which, published, unit, reading, left_out):
    count = ours(name, which, left_out)
    if reading == "round":
        assert abs(count - published) <= unit / 2, f"{count / B:.3f}B against {published / B}B"
    else:
        assert published <= count < published + unit, f"{count / B:.3f}B against {published / B}B"


def test_active_parameters_would_catch_every_expert_counted_as_active():
    config = load_model("gpt-oss-20b")
    assert parameter_count(config) > 4 * active_parameter_count(config)
