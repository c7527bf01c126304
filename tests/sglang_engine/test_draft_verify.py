"""A draft worker's TritonAttnBackend runs TARGET_VERIFY too (SGLang's DFlash family), with layer ids that collide
with the target model's: the plugin intercepts only the target model's verify calls (decided from
``ModelRunner.is_draft_worker``), so a draft layer is never counted as, or mixed with, a target layer."""

from __future__ import annotations

import pytest

from sglang_engine import scenarios

pytestmark = pytest.mark.sglang


@pytest.fixture(scope="module")
def draft_beside_target(engine_worker):
    return engine_worker(scenarios.draft_verify_beside_target)


def test_a_draft_workers_verify_is_served_by_sglang_untouched_and_counted_nowhere(draft_beside_target):
    result = draft_beside_target
    assert not result["draft_kernel_wrapped"]
    assert result["draft_error"] < 1e-4
    assert result["after_draft"] == result["before"]


def test_the_target_beside_it_is_still_compared_layer_by_layer(draft_beside_target):
    result = draft_beside_target
    assert result["target_error"] < 1e-4
    for layer, counters in result["after_target"].items():
        assert counters["calls"] == result["before"][layer]["calls"] + 1
        assert counters["compared"] == result["before"][layer]["compared"] + 1
