"""Every share keyed by a format (engine.FORMAT_SHARES: quantized GEMVs, expert GEMMs, decode attention by the KV
cache's format, dense GEMMs by their dtype) moves as "PREFIX.FORMAT" in a fit, writes to and reads from a profile file,
and is refused past its bound naming itself."""
from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from roofline.engine import FORMAT_SHARES, Engine, engine_from_document, with_values

BASE = Engine(name="keyed", bandwidth_efficiency=0.8, flops_efficiency=0.8, attention_bandwidth_efficiency=0.9)


@pytest.mark.parametrize("prefix", list(FORMAT_SHARES))
def test_a_keyed_share_fits_writes_reads_and_is_bounded_by_its_name(prefix):
    key, name = FORMAT_SHARES[prefix][0], f"{prefix}.fp8"
    engine = dataclasses.replace(BASE, **{key: {"fp8": 0.5}})
    assert engine.parameters()[name] == 0.5 and engine.format_share(name) == 0.5
    moved = with_values(engine, [name], [0.7])
    assert getattr(moved, key) == {"fp8": 0.7} and getattr(engine, key) == {"fp8": 0.5}
    document = yaml.safe_load(yaml.safe_dump(engine.as_document(), sort_keys=False))
    assert getattr(engine_from_document(document, "round trip"), key) == {"fp8": 0.5}
    document[key]["fp8"]["value"] = 1.5
    with pytest.raises(ValueError, match=re.escape(name)):
        engine_from_document(document, "too fast")
