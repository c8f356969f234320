"""Deployable configs from Python: tune a table once, ship it, apply it per call's shape with no
tuning at call time; pins per signature."""

import json

import pytest
import torch

import parhelion as ph

from test_language import matmul as language_matmul


def make_matmul():
    """A kernel object of its own (its table and pins are its state), on test_language's matmul."""
    return ph.kernel(language_matmul.fn, name="matmul")


def test_a_table_tuned_once_is_applied_per_shape(tmp_path):
    mm = make_matmul()
    small = (torch.randn(32, 48), torch.randn(48, 40))
    big = (torch.randn(256, 128), torch.randn(128, 192))
    table = ph.tune_table(mm, [small, big], budget_seconds=4)
    assert len(table) == 2
    path = tmp_path / "configs.json"
    table.save(str(path))
    entries = json.loads(path.read_text())["entries"]
    assert [e["signature"] for e in entries] == ["f32[32,48] f32[48,40]", "f32[256,128] f32[128,192]"]

    shipped = make_matmul()  # a new process would start here: load, no tuning
    shipped.use_configs(path)
    config, source = shipped.config_for(*big)
    assert source == "table: exact"
    assert config["block_sizes"] == entries[1]["config"]["block_sizes"]
    mid = (torch.randn(200, 100), torch.randn(100, 150))
    assert shipped.config_for(*mid)[1] == "table: nearest (f32[256,128] f32[128,192])"
    torch.testing.assert_close(shipped(*mid), mid[0] @ mid[1], rtol=1e-5, atol=1e-5)
    assert shipped.config_for(torch.randn(8, 8).bfloat16(), torch.randn(8, 8).bfloat16())[1] == "default"
    shipped.use_configs(None)
    assert shipped.config_for(*big)[1] == "default"


def test_the_tpu_model_tunes_a_table_for_pallas():
    x = torch.randn(512, 1024, dtype=torch.bfloat16)
    table = ph.tune_table(ph.kernels.softmax, [(x,)], target="pallas", tpu="v7x")
    entry = json.loads(table.to_json())["entries"][0]
    assert entry["target"] == "pallas:v7x" and "timing model" in entry["hardware"]
    sm = ph.kernels.get("softmax")
    try:
        sm.use_configs(table)
        assert sm.emit(x, target="pallas", tpu="v7x").config["block_sizes"] == entry["config"]["block_sizes"]
    finally:
        sm.use_configs(None)


def test_a_pin_for_one_signature():
    mm = make_matmul()
    a = (torch.randn(64, 64), torch.randn(64, 64))
    b = (torch.randn(32, 32), torch.randn(32, 32))
    mm.pin_config({"block_sizes": [8, 8, 8]}, *a)
    assert mm.config_for(*a)[1] == "pinned for this signature"
    assert mm.config_for(*a)[0]["block_sizes"] == [8, 8, 8]
    assert mm.config_for(*b)[1] == "default"
    torch.testing.assert_close(mm(*a), a[0] @ a[1], rtol=1e-5, atol=1e-5)
    mm.pin_config({"block_sizes": [16, 16, 16]})
    assert mm.config_for(*b)[1] == "pinned"
    assert mm.config_for(*a)[1] == "pinned for this signature"
    mm.unpin_config()
    assert mm.config_for(*a)[1] == "default"


def test_bad_tables_are_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"entries": [{"kernel": "k"}]}')
    with pytest.raises(ph.UserError, match="config table entry 0"):
        ph.load_config_table(bad)
    with pytest.raises(ph.UserError, match="cannot read"):
        ph.load_config_table(tmp_path / "missing.json")
    with pytest.raises(ph.UserError, match="no calls"):
        ph.tune_table(make_matmul(), [])
