"""The truth-anchor audit: a sampled eager call yields a float64 sample; one too large to snapshot is counted
and said once (why a run may end without truth samples)."""

import logging

import torch

from cutover.plugin.audit import Audit
from cutover.plugin.captures import CaptureStore
from kernel_ext.reference import reference_extend_attention_fwd
from kernel_ext.testing import make_verify_batch


def offered_call(audit, seed):
    batch = make_verify_batch(8, 8, 2, [30, 55], seed=seed)
    o_stock, o_custom = torch.empty_like(batch.o), torch.empty_like(batch.o)
    reference_extend_attention_fwd(*batch.args(o_stock))
    reference_extend_attention_fwd(*batch.args(o_custom))
    audit.offer(3, batch.args(o_stock), {}, o_stock, o_custom, torch.ones(1))


def test_a_sampled_call_yields_a_truth_sample(tmp_path):
    audit = Audit(CaptureStore(str(tmp_path), rank=0), 0, "reference (no GPU)", None, interval_s=0.0)
    offered_call(audit, seed=1)
    audit.drain()
    [sample] = audit.take_truth()
    assert sample["layer"] == 3 and 0 <= sample["err_custom"] < 1e-2 and 0 <= sample["err_stock"] < 1e-2


def test_calls_too_large_to_snapshot_are_counted_and_said_once(tmp_path, caplog):
    audit = Audit(CaptureStore(str(tmp_path), rank=0), 0, "reference (no GPU)", None, interval_s=0.0,
                  max_snapshot_bytes=0)
    with caplog.at_level(logging.WARNING, logger="cutover.plugin"):
        for seed in range(3):
            offered_call(audit, seed)
    audit.drain()
    assert audit.skipped_too_large == 3 and audit.take_truth() == []
    [line] = [r.getMessage() for r in caplog.records if "truth anchor skips" in r.getMessage()]
    assert "rank 0" in line and "exceed 0 MiB (layer 3" in line
