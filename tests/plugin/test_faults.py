"""The sandbox's test-only fault switch: its grammar, and that it corrupts only the custom path it names."""

from __future__ import annotations

import pytest
import torch

from cutover.plugin.dispatch import verify_site
from cutover.sandbox.faults import FAULT_FILE, Fault, FaultyKernels, parse_faults, read_fault_spec
from kernel_ext.reference import reference_extend_attention_fwd
from kernel_ext.testing import make_verify_batch


def test_fault_grammar():
    assert parse_faults("divergence:layer=3|nan:layer=5:rank=1") == [Fault("divergence", 3), Fault("nan", 5, rank=1)]
    assert parse_faults("divergence:layer=2:rel=0.2") == [Fault("divergence", 2, rel=0.2)]
    assert parse_faults("") == []
    for bad in ("nan", "explode:layer=1", "nan:layer=x"):
        with pytest.raises(ValueError, match="bad sandbox fault"):
            parse_faults(bad)


def test_fault_file_wins_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTOVER_SANDBOX_FAULT", "nan:layer=1")
    assert read_fault_spec(str(tmp_path)) == "nan:layer=1"
    (tmp_path / FAULT_FILE).write_text("divergence:layer=2\n")
    assert read_fault_spec(str(tmp_path)) == "divergence:layer=2"


def test_injected_divergence_shows_in_the_shadow_counters_of_that_layer_only(runtime, write_control):
    from cutover.plugin.devicestate import REL_L2_MAX

    write_control("shadow", 1)
    runtime.control.poll_once()
    faulty = FaultyKernels(runtime.kernels, runtime.device, rank=0)
    faulty.set_faults(parse_faults("divergence:layer=3:rel=0.2"))
    runtime.kernels = faulty
    batch = make_verify_batch(8, 8, 2, [20, 40])
    dispatcher = runtime.wrap(reference_extend_attention_fwd)
    for layer in (2, 3):
        out = batch.fresh_output()
        with verify_site(layer):
            dispatcher(*batch.args(out))
        expected = batch.fresh_output()
        reference_extend_attention_fwd(*batch.args(expected))
        assert torch.equal(out, expected)  # shadow: the served output is never the corrupted one
    assert float(runtime.state.counters[3, REL_L2_MAX]) == pytest.approx(0.2, rel=0.05)
    assert float(runtime.state.counters[2, REL_L2_MAX]) < 1e-2
