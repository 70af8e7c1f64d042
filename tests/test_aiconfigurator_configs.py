"""Every model config NVIDIA's aiconfigurator-core 0.12.0 bundles: each analyzes, or is refused by name.

The 89 config.json files (tests/data/aiconfigurator_configs/, PROVENANCE.md there) are the models a
peer planner serves in late 2026. Each one either builds a ModelConfig and prices a decode step, or
raises one ValueError that names the file, the model_type and the one feature still missing
(config.UNMODELLED). Nothing else: no other exception, no NaN, no silent zero.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from roofline import ModelConfig
from roofline.models.config import UNMODELLED
from roofline.model import active_parameter_count, parameter_count

CONFIGS = Path(__file__).parent / "data" / "aiconfigurator_configs"
MODEL_FILES = sorted(p for p in CONFIGS.glob("*_config.json") if not p.name.endswith("_hf_quant_config.json"))
# The ones refused today, by model_type: each must stay refused by name until its feature lands.
REFUSED = {"kimi_k3"}
NOT_IN_TRANSFORMERS = {"nemotron-nas"}  # DeciLM remote code: checked by hand (tests/test_late_families.py)


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def test_the_package_bundles_89_model_configs():
    assert len(MODEL_FILES) == 89


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.name.removesuffix("_config.json"))
def test_each_config_analyzes_or_is_refused_by_name(path):
    hf = read(path)
    family = hf["model_type"]
    if family in REFUSED:
        with pytest.raises(ValueError) as refusal:
            ModelConfig.from_hf_config(hf, name=path.name)
        message = str(refusal.value)
        assert path.name in message and repr(family) in message and UNMODELLED[family] in message
        return
    from roofline.compiled import FLOPS_ROW, compile_model
    config = ModelConfig.from_hf_config(hf, name=path.name)
    total, active = parameter_count(config), active_parameter_count(config)
    assert 0 < active <= total
    step = compile_model(config).decode(4, 4096, (2.0, 2.0, 2.0, 2.0))
    assert math.isfinite(float(step.sum())) and float(step[:, FLOPS_ROW].sum()) > 0


def test_every_refusal_names_its_missing_feature_and_the_rest_analyze():
    families = [read(p)["model_type"] for p in MODEL_FILES]
    analyzed = [f for f in families if f not in REFUSED]
    assert REFUSED <= set(UNMODELLED) and len(analyzed) == 89 - sum(f in REFUSED for f in families)
    assert len(analyzed) == 88  # 32 before issue 25; 73 before Gemma 4, MiMo(-V2-Flash), Step-3.7, MiniMax-M3, DeepSeek-V4


ANALYZED = [p for p in MODEL_FILES if read(p)["model_type"] not in REFUSED | NOT_IN_TRANSFORMERS]


@pytest.mark.parametrize("path", ANALYZED, ids=lambda p: p.name.removesuffix("_config.json"))
def test_parameters_equal_the_hugging_face_module(path):
    """transformers 5.24 builds every analyzed family (meta device); vision-language ones as the whole model,
    of which the language model and LM head are compared (tests/hf_reference.py)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from hf_reference import hf_parameter_count
    hf = read(path)
    assert parameter_count(ModelConfig.from_hf_config(hf, name=path.name)) == hf_parameter_count(hf)
