"""load_calibration: committed fits, YAML paths, 'default' (transferred) and bad files named by field."""
import pytest
import yaml

from roofline import calibration as cal
from roofline.calibration import IDEAL


def write(path, **fields):
    path.write_text(yaml.safe_dump(fields))
    return path


def test_a_calibration_file_becomes_a_calibration(tmp_path):
    path = write(tmp_path / "dev.yaml", name="dev", hardware="h100-sxm", bandwidth_efficiency=0.9,
                 flops_efficiency={"bf16": 0.7}, step_overhead_s=1e-5, layer_overhead_s=2e-6,
                 attention_bandwidth_efficiency=0.6, attention_flops_efficiency=0.4)
    c = cal.load_calibration(str(path))
    assert (c.name, c.bandwidth_efficiency, c.flops_efficiency, c.step_overhead_s, c.layer_overhead_s,
            c.attention_bandwidth_efficiency, c.attention_flops_efficiency) == ("dev", 0.9, {"bf16": 0.7}, 1e-5, 2e-6,
                                                                                 0.6, 0.4)
    old = cal.load_calibration(str(write(tmp_path / "old.yaml", bandwidth_efficiency=0.9)))
    # a file from before the attention fields: attention reaches what the weight GEMMs reach
    assert (old.attention_bandwidth_efficiency, old.attention_flops_efficiency) == (0.9, 1.0)


@pytest.mark.parametrize("fields, named", [
    ({"flops_efficiency": {"bf16": 0.7}}, "bandwidth_efficiency"),
    ({"bandwidth_efficiency": "fast"}, "bandwidth_efficiency"),
    ({"bandwidth_efficiency": 0.9, "flops_efficiency": [0.7]}, "flops_efficiency"),
    ({"bandwidth_efficiency": 0.9, "flops_efficiency": {"bf16": None}}, "bf16"),
    ({"bandwidth_efficiency": 0.9, "step_overhead_s": -1.0}, "step_overhead_s"),
    ({"bandwidth_efficiency": 3.0}, "bandwidth_efficiency"),
    ({"bandwidth_efficiency": 0.9, "attention_flops_efficiency": 0.0}, "attention_flops_efficiency"),
])
def test_a_bad_file_is_a_value_error_naming_the_field(tmp_path, fields, named):
    with pytest.raises(ValueError, match=named):
        cal.load_calibration(str(write(tmp_path / "bad.yaml", **fields)))


def test_unreadable_and_unknown_calibrations_are_value_errors(tmp_path):
    (tmp_path / "broken.yaml").write_text("a: [unclosed")
    with pytest.raises(ValueError, match="cannot read YAML"):
        cal.load_calibration(str(tmp_path / "broken.yaml"))
    with pytest.raises(ValueError, match="unknown calibration"):
        cal.load_calibration("no-such-device")


def test_default_transfers_the_median_of_transferable_fits_capped_at_one(tmp_path, monkeypatch):
    monkeypatch.setattr(cal, "CALIBRATION_DIR", tmp_path)
    assert cal.load_calibration("default").bandwidth_efficiency == 1.0
    assert "ideal" in cal.load_calibration("default").name
    write(tmp_path / "a.yaml", transferable=True, bandwidth_efficiency=0.8, flops_efficiency={"bf16": 0.6},
          layer_overhead_s=1e-3)
    write(tmp_path / "b.yaml", transferable=True, bandwidth_efficiency=0.9, flops_efficiency={"bf16": 1.2})
    write(tmp_path / "cpu.yaml", transferable=False, bandwidth_efficiency=0.1, flops_efficiency={"bf16": 0.1})
    c = cal.load_calibration("default")
    assert c.bandwidth_efficiency == pytest.approx(0.85)
    assert c.flops_efficiency == {"bf16": pytest.approx(0.8)}  # median of 0.6 and min(1, 1.2)
    assert c.layer_overhead_s == 0.0  # overheads belong to a device and its stack
    assert "a, b" in c.name and "cpu" not in c.name


def test_ideal_is_the_uncalibrated_bound():
    assert cal.load_calibration("ideal") is IDEAL
    assert cal.load_calibration(None) is IDEAL


def test_every_committed_calibration_loads():
    for name in cal.committed_calibrations():
        assert cal.load_calibration(name).bandwidth_efficiency > 0


@pytest.mark.parametrize("phase, field", [("decode", "attention_bandwidth_efficiency"),  # reads the cache
                                           ("prefill", "attention_flops_efficiency")])  # S x S products
def test_attention_efficiencies_slow_the_attention_ops_alone(phase, field):
    import roofline
    from roofline.calibration import Calibration
    kwargs = dict(model="llama-2-7b", hardware="h100-sxm", batch=[8], prompt=3968)  # + 128 generated: the window
    ideal = roofline.analyze(**kwargs).op_table(8, 3968).set_index(["phase", "op"])["time_s"]
    slow = roofline.analyze(**kwargs, calibration=Calibration("half", **{field: 0.5})).op_table(8, 3968)
    ratio = (slow.set_index(["phase", "op"])["time_s"] / ideal).xs(phase)
    attention = ratio.index.str.endswith("attention")
    assert attention.any()
    assert list(ratio[attention]) == pytest.approx([2.0] * attention.sum())  # the binding roof halved
    assert list(ratio[~attention]) == pytest.approx([1.0] * (~attention).sum())


def test_the_transfer_calibration_is_a_committed_fit_of_the_same_device_that_never_saw_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(cal, "CALIBRATION_DIR", tmp_path)
    write(tmp_path / "dev.yaml", name="dev", hardware="measured", bandwidth_efficiency=0.9,
          fit={"device_name": "EPYC (2 threads)", "sources": ["dense.csv"]})
    assert cal.transfer_calibration("EPYC (2 threads)", "moe.csv").name == "dev"
    assert cal.transfer_calibration("EPYC (2 threads)", "dense.csv") is None  # its own data: fitted, not scored
    assert cal.transfer_calibration("H100", "moe.csv") is None  # another device
