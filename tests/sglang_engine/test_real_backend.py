"""The plugin inside SGLang's real TritonAttnBackend, ForwardBatch and pools (CPU, Triton interpreter), loaded by
SGLang's own loader from the installed entry point: every mode against the float64 truth, the counters, and
what SGLang's kernel was given."""

from __future__ import annotations

import pytest

from sglang_engine import scenarios

pytestmark = pytest.mark.sglang

TOLERANCE = 1e-4  # float32 attention of O(1) values against float64
STEP_COUNT = len(scenarios.STEPS)


@pytest.fixture(scope="module")
def round_trip(engine_worker):
    return engine_worker(scenarios.modes_round_trip)


def test_sglang_builds_its_backend_with_the_dispatcher_installed(round_trip):
    assert round_trip["dispatcher"] == "VerifyDispatcher"


def test_every_mode_serves_verify_within_tolerance_of_the_float64_truth(round_trip):
    assert [m["mode"] for m in round_trip["modes"]] == ["triton", "shadow", "custom", "triton"]
    assert [m["heartbeat_mode"] for m in round_trip["modes"]] == ["triton", "shadow", "custom", "triton"]
    for mode in round_trip["modes"]:
        assert mode["error"] < TOLERANCE, mode["mode"]


def test_the_per_layer_counters_say_what_each_mode_did(round_trip):
    expected = {"triton": (0, 0), "shadow": (0, STEP_COUNT), "custom": (STEP_COUNT, 0)}  # (served, compared)
    for mode in round_trip["modes"]:
        for layer, counters in mode["counters"].items():
            assert counters["calls"] == STEP_COUNT, (mode["mode"], layer)
            assert (counters["served"], counters["compared"]) == expected[mode["mode"]], (mode["mode"], layer)
            if mode["mode"] == "shadow":
                assert counters["rel_l2_max"] < TOLERANCE


def test_custom_mode_gives_sglangs_kernel_an_empty_extend_and_the_others_the_real_one(round_trip):
    for mode in round_trip["modes"]:
        indptrs = mode["stock_qo_indptrs"]
        assert len(indptrs) == STEP_COUNT * 2  # every layer of every step reached SGLang's kernel
        if mode["mode"] == "custom":
            assert all(set(indptr) == {0} for indptr in indptrs)
        else:
            assert all(indptr[-1] > 0 for indptr in indptrs)
