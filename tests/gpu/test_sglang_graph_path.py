"""The plugin inside SGLang's own CUDA-graph path for target verify (device tool; SGLang 0.5.23's layout).

SGLang's real objects (tests/sglang_engine/engine.py: its ModelRunner's pools, its TritonAttnBackend with the
plugin's hooks applied by ``load_plugins()``) on the GPU in bf16: ``init_cuda_graph_state``, the capture-time
metadata of a full batch, a real ``torch.cuda.graph`` around ``forward_extend`` of every layer; then, per mode
(triton -> shadow -> custom -> triton, switched through control.json with the control thread live), the replay
metadata of a padded batch of another size (SGLang's uint8 verify-mask buffer, its int64 ``qo_indptr``), one
replay, and the real rows against the float64 truth, the layer counters and the gated ``qo_indptr``.

The steps are tests/sglang_engine/engine.py's, which the CPU test of the same path (tests/sglang_engine/
test_graph_metadata.py) runs without a graph. SGLang's CUDA modules import ``sgl_kernel`` at import time
(``triton_backend.py``: ``is_arch_support_pdl``; the model runner's layernorm, activation, sampler and speculative
ops likewise): without it this test skips, saying so.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

from cutover.plugin import hooks
from cutover.plugin.devicestate import CALLS, COMPARED, SERVED
from tests.gpu.staging import GPU_RELEASE, stage_built_library

pytestmark = [pytest.mark.gpu, pytest.mark.sglang]
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))  # tests/ (the engine builder)

CAPTURE_BS, DRAFTS = 4, 16
REPLAY_PREFIXES = ((0, 700, 33), (1500, 0))  # real requests per replay, each padded to CAPTURE_BS
TOLERANCE = 2e-2  # bf16 against float64


@pytest.fixture
def sglang_on_cuda(tmp_path, monkeypatch):
    pytest.importorskip("sgl_kernel", reason="SGLang's CUDA modules import sgl_kernel (the sglang-kernel wheel) at "
                                             "import time; install a build for this torch to run SGLang's graph path")
    from sglang.srt import plugins

    from sglang_engine.engine import enter_single_rank_context

    monkeypatch.setenv("CUTOVER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CUTOVER_ROOT", str(tmp_path / "root"))
    monkeypatch.setattr(hooks, "_runtime", None)
    monkeypatch.setattr(plugins, "_plugins_loaded", False)
    stage_built_library(hooks.host_paths_from_env())  # the release the rank loads
    enter_single_rank_context()
    plugins.load_plugins()
    yield hooks.host_paths_from_env()
    if hooks._runtime is not None:
        hooks._runtime.stop()


def request(paths, mode: str, generation: int) -> None:
    from armed import armed_record
    from cutover.hostprotocol.hostlayout import atomic_write_text

    from sglang_engine.engine import wait_for_mode

    atomic_write_text(paths.control, armed_record(mode, generation, lease_s=600.0, release_id=GPU_RELEASE).to_json())
    wait_for_mode(paths, 0, mode, generation)


def test_every_mode_replays_sglangs_captured_verify_graph_against_float64(sglang_on_cuda):
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    from sglang_engine.engine import build_engine, capture_verify_metadata, forward_captured, load_replay

    paths = sglang_on_cuda
    engine = build_engine((0,) * CAPTURE_BS, DRAFTS, max_requests=CAPTURE_BS, max_context_len=2048,
                          device="cuda", dtype=torch.bfloat16, cuda_graph=True)
    backend = engine.backend
    assert type(getattr(backend, "_cutover_dispatcher", None)).__name__ == "VerifyDispatcher"
    request(paths, "triton", 1)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), forward_context(ForwardContext(attn_backend=backend)):
        captured = capture_verify_metadata(engine, CAPTURE_BS, DRAFTS)
        for _ in range(2):  # warm-up: Triton's JIT, then the capture
            forward_captured(engine, captured)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            outputs = forward_captured(engine, captured)
    gated = hooks._runtime.buffers.like("qo_indptr", backend.forward_metadata.qo_indptr)
    assert gated.dtype == backend.forward_metadata.qo_indptr.dtype

    for generation, mode in enumerate(("triton", "shadow", "custom", "triton"), start=2):
        prefixes = REPLAY_PREFIXES[generation % 2]
        request(paths, mode, generation)
        before = hooks._runtime.state.read_counters().clone()
        with torch.no_grad(), forward_context(ForwardContext(attn_backend=backend)):
            step = load_replay(engine, captured, prefixes, seed=generation)
            graph.replay()
        torch.cuda.synchronize()
        delta = hooks._runtime.state.read_counters() - before
        rows = len(prefixes) * DRAFTS
        for layer in range(engine.layers):
            out = outputs[layer][:rows].double()
            assert (out - step.expected[layer][:rows]).abs().max().item() < TOLERANCE, (mode, layer)
            assert delta[layer, CALLS] == 1, (mode, layer)
            assert delta[layer, COMPARED] == (mode == "shadow"), (mode, layer)
            assert delta[layer, SERVED] == (mode == "custom"), (mode, layer)
        if mode == "custom":
            assert int(gated.abs().sum()) == 0, "custom: SGLang's kernel must get an empty extend"
        else:
            assert torch.equal(gated, backend.forward_metadata.qo_indptr), mode
