"""The truth anchor and the captures of CUDA-graph-replayed verify calls (cutover/plugin/snapshot.py), on a GPU.

One captured verify step (the plugin's dispatch: gate, our kernel, SGLang's kernel, epilogue, snapshot), replayed in
shadow mode: unarmed it leaves the staging area alone; armed it yields a float64 truth sample and a capture whose
rerun reproduces both recorded outputs bit for bit; a snapshot rewritten while it is read is never taken, also
when the arming races replays on another stream.
"""

from __future__ import annotations

import glob
import os
import threading

import pytest
import torch

from cutover.hostprotocol.hostlayout import HostPaths
from cutover.plugin.captures import capture_args, load_capture
from cutover.plugin.dispatch import verify_site
from cutover.plugin.graphs import switch_mode
from cutover.plugin.snapshot import HEADER_BYTES, Staging
from kernel_ext import _lib
from kernel_ext.cudagraph import capture_graph
from kernel_ext.testing import make_verify_batch
from tests.gpu.staging import gpu_sandbox, stage_built_library

pytestmark = pytest.mark.gpu
LAYER = 3


@pytest.fixture
def shadow_graph(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from cutover.plugin.hooks import resolve_stock_kernel
    from cutover.plugin.kernels import CudaKernels
    from cutover.plugin.runtime import PluginRuntime

    paths = HostPaths(cutover_root=str(tmp_path / "root"), state_dir=str(tmp_path / "state"))
    stage_built_library(paths)  # the rank runs shadow only for the release it loaded
    runtime = PluginRuntime(paths, 0, torch.device("cuda", torch.cuda.current_device()), audit_interval_s=0.0)
    assert isinstance(runtime.kernels, CudaKernels), runtime.unavailable
    assert not runtime.snapshots.disabled, runtime.snapshots.disabled
    stock = resolve_stock_kernel()[0]
    batch = make_verify_batch(8, 16, 4, [1000, 2048, 513, 4096], device="cuda", seed=11, nan_unused_rows=False,
                              qo_indptr_dtype=torch.int64, mask_dtype=torch.uint8)
    dispatcher = runtime.wrap(stock)
    args = batch.args()

    def step():
        with verify_site(LAYER):
            dispatcher(*args)

    switch_mode(runtime, paths, "shadow", 1)
    graph = capture_graph(step)
    yield runtime, stock, batch, graph
    runtime.control.stop(clean=True)


def replay(graph) -> None:
    graph.replay()
    torch.cuda.synchronize()


def test_unarmed_replays_leave_the_staging_area_untouched(shadow_graph):
    runtime, _stock, _batch, graph = shadow_graph
    staging = runtime.snapshots.staging
    staging.buffer[HEADER_BYTES:].fill_(0xA5)
    before = staging.buffer.clone()
    for _ in range(3):
        replay(graph)
    assert torch.equal(staging.buffer, before)
    staging.write_arm(((1 << 20) | (LAYER + 2)))  # armed for another layer: still untouched
    replay(graph)
    assert torch.equal(staging.buffer[8:], before[8:])


def test_armed_replay_yields_a_truth_sample_and_a_bit_exact_capture(shadow_graph):
    import kernel_ext

    runtime, stock, batch, graph = shadow_graph
    snapshots = runtime.snapshots
    runtime.audit.drain()
    runtime.audit.take_truth()  # the eager samples of the warm-up calls before the capture
    eager_captures = set(glob.glob(os.path.join(runtime.paths.captures, "*.pt")))
    snapshots.tick(shadow=True, now=1e9)  # arms the one layer seen
    assert snapshots.counts["armed"] == 1
    replay(graph)
    live_o = batch.o.clone()
    snapshots.tick(shadow=True, now=1e9 + 0.2)  # takes it, hands it to the audit thread
    assert snapshots.counts["taken"] == 1, snapshots.counts
    assert snapshots.staging.read_header()[_lib.SNAP_ARM] == 0, "a completed snapshot disarms"
    runtime.audit.drain()
    truth = runtime.audit.take_truth()
    assert len(truth) == 1 and truth[0]["source"] == "graph" and truth[0]["layer"] == LAYER
    assert 0 < truth[0]["err_custom"] < 1e-2 and 0 < truth[0]["err_stock"] < 1e-2

    [path] = set(glob.glob(os.path.join(runtime.paths.captures, "*.pt"))) - eager_captures
    capture = load_capture(path)
    assert capture["source"] == "graph" and capture["requests"]["kept"] == capture["requests"]["total"] == 4
    assert torch.equal(capture["o_stock"], live_o.cpu()), "the capture records the live stock output"
    rerun_stock = torch.full_like(capture["o_stock"], float("nan")).cuda()
    stock(*capture_args(capture, rerun_stock, "cuda"), **capture["kwargs"])
    rerun_custom = torch.full_like(capture["o_custom"], float("nan")).cuda()
    assert kernel_ext.verify_attention(*capture_args(capture, rerun_custom, "cuda"), **capture["kwargs"])
    torch.cuda.synchronize()
    assert torch.equal(rerun_stock.cpu(), capture["o_stock"]), "stock rerun differs from the recorded output"
    assert torch.equal(rerun_custom.cpu(), capture["o_custom"]), "custom rerun differs from the recorded output"


def test_a_snapshot_rewritten_while_it_is_read_is_not_taken(shadow_graph):
    runtime, _stock, _batch, graph = shadow_graph
    staging: Staging = runtime.snapshots.staging
    first = staging.arm(LAYER)
    replay(graph)
    copies = []
    real_on_side = staging._on_side

    def on_side(copy):  # after the data copy, a new arming is taken by a replay before the header is re-read
        real_on_side(copy)
        copies.append(1)
        if len(copies) == 2:
            staging.arm(LAYER)
            replay(graph)

    staging._on_side = on_side
    assert staging.take(first) is Staging.TORN
    staging._on_side = real_on_side


def test_arming_during_replays_on_another_stream_never_yields_a_torn_snapshot(shadow_graph):
    runtime, stock, batch, graph = shadow_graph
    staging: Staging = runtime.snapshots.staging
    queries = [torch.randn_like(batch.q) for _ in range(3)]
    outputs = []
    for query in queries:  # SGLang's output for each query, eagerly
        out = batch.fresh_output()
        stock(*batch.args(out)[:0], query, *batch.args(out)[1:])
        outputs.append(out.cpu())
    stop = threading.Event()
    replays = [0]

    def serve():
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            while not stop.is_set():
                batch.q.copy_(queries[replays[0] % len(queries)])
                graph.replay()
                replays[0] += 1
                if replays[0] % 8 == 0:
                    stream.synchronize()
            stream.synchronize()

    server = threading.Thread(target=serve)
    server.start()
    taken, torn = [], 0
    try:
        while len(taken) < 20 and torn < 1000:
            token = staging.arm(LAYER)
            result = None
            while result is None:
                result = staging.take(token)
            if result is Staging.TORN:
                torn += 1
            else:
                taken.append(result)
    finally:
        stop.set()
        server.join()
    assert len(taken) == 20, f"{len(taken)} taken, {torn} torn"
    n, heads = batch.q.shape[0], batch.q.shape[1]
    for header, data in taken:
        q = data[header[_lib.SNAP_OFF_Q]: header[_lib.SNAP_OFF_Q] + n * heads * 576 * 2].view(torch.bfloat16)
        matches = [i for i, candidate in enumerate(queries) if torch.equal(q, candidate.reshape(-1).cpu())]
        assert len(matches) == 1, "a snapshot's q is one call's q, whole"
        o = data[header[_lib.SNAP_OFF_O]: header[_lib.SNAP_OFF_O] + n * heads * 512 * 2].view(torch.bfloat16)
        assert torch.equal(o, outputs[matches[0]].reshape(-1)), "and its stock output is that call's"


def test_gpu_sandbox_shadow_reports_truth_samples_from_graph_replayed_calls(tmp_path):
    """The sandbox on the GPU (real kernels, CUDA graphs, 9 of 10 steps replayed): its shadow stats lines carry
    float64-anchored samples taken from graph replays, and the report's truth line counts them."""
    import json
    import time

    from armed import armed_record
    from cutover.hostprotocol.hostlayout import atomic_write_text
    from cutover.workflow.report import truth_sources

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    with gpu_sandbox(tmp_path) as (paths, release):
        atomic_write_text(paths.control, armed_record("shadow", 1, lease_s=600.0, release_id=release).to_json())
        time.sleep(8.0)
        with open(paths.stats_file(0)) as handle:
            lines = [json.loads(line) for line in handle]
        samples = [s for line in lines if line["mode"] == "shadow" for s in line["truth"]]
        graph = [s for s in samples if s["source"] == "graph"]
        assert graph, samples
        assert all(s["err_custom"] <= 1.25 * s["err_stock"] + 5e-4 for s in graph), graph
        assert f"{len(graph)} from CUDA-graph-replayed calls" in truth_sources(samples)
        assert glob.glob(os.path.join(paths.captures, "*.pt"))
