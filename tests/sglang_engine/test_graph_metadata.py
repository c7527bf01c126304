"""The plugin inside SGLang's CUDA-graph metadata path for target verify, on the CPU (Triton interpreter): SGLang's
own ``init_cuda_graph_state``, capture metadata of a full batch, and replay metadata of padded batches of other
sizes (SGLang's verify-mask buffer, its qo_indptr), each mode switched through control.json; every layer then runs
over the captured batch as a replay runs it. The GPU test (tests/gpu/test_sglang_graph_path.py) adds the real
``torch.cuda.graph`` around the same steps."""

from __future__ import annotations

import pytest

from sglang_engine import scenarios

pytestmark = pytest.mark.sglang

TOLERANCE = 1e-4  # float32 attention of O(1) values against float64


@pytest.fixture(scope="module")
def round_trip(engine_worker):
    return engine_worker(scenarios.graph_metadata_round_trip)


def test_every_mode_serves_the_real_rows_of_a_padded_replay_within_tolerance(round_trip):
    assert [m["mode"] for m in round_trip["modes"]] == ["triton", "shadow", "custom", "triton"]
    for mode in round_trip["modes"]:
        assert mode["error"] < TOLERANCE, mode["mode"]


def test_each_replay_counts_one_call_per_layer_as_its_mode_says(round_trip):
    expected = {"triton": (0, 0), "shadow": (0, 1), "custom": (1, 0)}  # (served, compared)
    for mode in round_trip["modes"]:
        for layer, delta in mode["delta"].items():
            assert delta["calls"] == 1, (mode["mode"], layer)
            assert (delta["served"], delta["compared"]) == expected[mode["mode"]], (mode["mode"], layer)


def test_sglangs_kernel_gets_the_graph_qo_indptr_or_in_custom_an_empty_extend(round_trip):
    for mode in round_trip["modes"]:
        indptrs = mode["stock_qo_indptrs"]
        assert len(indptrs) == len(mode["delta"]), mode["mode"]  # one call per layer reached SGLang's kernel
        if mode["mode"] == "custom":
            assert all(set(indptr) == {0} for indptr in indptrs)
        else:
            assert all(indptr == mode["metadata_qo_indptr"] for indptr in indptrs), mode["mode"]
