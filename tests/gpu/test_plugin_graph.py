"""The live switch under real CUDA-graph replay: one capture, four modes, no recapture (H200 via the device tool).

Capture the dispatched verify step once (gate + our kernel once, its output chosen on the device + SGLang's
Triton kernel + the fused epilogue), then switch triton -> shadow -> custom -> triton through control.json
between replays and check what each replay did: which kernel's output landed in ``o``, whether our kernel
wrote the shadow scratch, whether SGLang's kernel got an empty extend, and what the shadow counters recorded.
"""

from __future__ import annotations

import math
import time

import pytest
import torch

from cutover.hostprotocol.hostlayout import ControlRecord, HostPaths, atomic_write_text
from cutover.plugin.devicestate import CALLS, COMPARED, REL_L2_MAX, nonfinite_custom
from cutover.plugin.dispatch import verify_site
from cutover.plugin.graphs import switch_mode
from kernel_ext.cudagraph import capture_graph
from tests.gpu.staging import gpu_sandbox, stage_built_library
from kernel_ext.testing import make_verify_batch

pytestmark = pytest.mark.gpu
SAME = 1e-5  # relative L2 below which two outputs are "the same kernel's output" (they differ by ~1e-3)
LAYER = 0


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    if not torch.isfinite(a).all():
        return math.inf
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


@pytest.fixture
def setup(tmp_path):
    from cutover.plugin.hooks import resolve_stock_kernel
    from cutover.plugin.kernels import CudaKernels
    from cutover.plugin.runtime import PluginRuntime

    paths = HostPaths(cutover_root=str(tmp_path / "root"), state_dir=str(tmp_path / "state"))
    stage_built_library(paths)
    runtime = PluginRuntime(paths, 0, torch.device("cuda", torch.cuda.current_device()))
    assert isinstance(runtime.kernels, CudaKernels), runtime.unavailable
    stock = resolve_stock_kernel()[0]
    batch = make_verify_batch(8, 16, 4, [1000, 2048, 513, 4096], device="cuda", seed=11,
                              qo_indptr_dtype=torch.int64, mask_dtype=torch.uint8)
    yield paths, runtime, stock, batch
    runtime.control.stop(clean=True)


def test_switching_modes_between_replays_of_one_captured_graph(setup):
    import kernel_ext

    paths, runtime, stock, batch = setup
    args = batch.args()
    ref_stock, ref_custom = batch.fresh_output(), batch.fresh_output()
    stock(*batch.args(ref_stock))
    assert kernel_ext.verify_attention(*batch.args(ref_custom))
    torch.cuda.synchronize()
    assert SAME * 10 < rel(ref_custom, ref_stock) < 1e-2  # distinguishable, and both right

    dispatcher = runtime.wrap(stock)

    def step():
        with verify_site(LAYER):
            dispatcher(*args)

    switch_mode(runtime, paths, "triton", 1)
    graph = capture_graph(step)
    scratch = runtime.buffers.like("o", batch.o)
    gated = runtime.buffers.like("qo_indptr", batch.qo_indptr)

    def replay():
        batch.o.fill_(math.nan)
        scratch.fill_(math.nan)
        before = runtime.state.read_counters()[LAYER].clone()
        graph.replay()
        torch.cuda.synchronize()
        return runtime.state.read_counters()[LAYER] - before

    for generation, mode in enumerate(("triton", "shadow", "custom", "triton"), start=2):
        switch_mode(runtime, paths, mode, generation)
        delta = replay()
        assert delta[CALLS] == 1, mode
        if mode == "triton":
            assert rel(batch.o, ref_stock) < SAME, "triton: o must be SGLang's output"
            assert torch.isnan(scratch).all(), "triton: our kernel must not run"
            assert torch.equal(gated, batch.qo_indptr) and delta[COMPARED] == 0
        elif mode == "shadow":
            assert rel(batch.o, ref_stock) < SAME, "shadow: o must stay SGLang's output"
            assert rel(scratch, ref_custom) < SAME, "shadow: our kernel writes the scratch"
            assert delta[COMPARED] == 1
            measured = float(runtime.state.read_counters()[LAYER, REL_L2_MAX])
            assert measured == pytest.approx(rel(ref_custom, ref_stock), rel=1e-3)
        else:
            assert rel(batch.o, ref_custom) < SAME, "custom: o must be our kernel's output"
            assert int(gated.abs().sum()) == 0, "custom: SGLang's kernel must get an empty extend"
            assert torch.isnan(scratch).all() and delta[COMPARED] == 0 and nonfinite_custom(delta) == 0


def test_gpu_sandbox_runs_graphs_and_switches_modes(tmp_path):
    """The sandbox on the GPU: real kernels, CUDA graphs, one rank; shadow compares, custom serves, down."""
    import json

    from cutover.hostprotocol.hostlayout import Heartbeat

    with gpu_sandbox(tmp_path) as (paths, release):
        def beat() -> Heartbeat:
            with open(paths.heartbeat(0)) as handle:
                return Heartbeat.from_json(handle.read())

        assert beat().kernel == "cuda", beat().reason
        for generation, mode in enumerate(("shadow", "custom"), start=1):
            atomic_write_text(paths.control, ControlRecord(mode=mode, generation=generation,
                                                           lease_expires_at=time.time() + 600,
                                                           release_id=release, set_by="test",
                                                           set_at=time.time()).to_json())
            deadline = time.time() + 1.0
            while time.time() < deadline and beat().mode_active != mode:
                time.sleep(0.02)
            assert beat().mode_active == mode and beat().generation_seen == generation
            time.sleep(3.0)
        counters = beat().counters
        assert counters["compared"] > 0 and counters["nonfinite_custom"] == 0 and counters["errors"] == 0
        with open(paths.stats_file(0)) as handle:
            lines = [json.loads(line) for line in handle]
        shadow = [layer for line in lines if line["mode"] == "shadow" for layer in line["layers"].values()]
        assert shadow and max(layer["rel_l2_max"] for layer in shadow) < 1e-2
