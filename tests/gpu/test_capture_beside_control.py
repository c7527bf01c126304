"""SGLang captures its CUDA graphs while every rank's control thread already runs (the runtime starts when the
attention backend is built, before the capture), in torch's default "global" capture mode: there CUDA refuses a
synchronizing call from any other thread and invalidates the capture. The control thread isolates itself first
(`devicestate.isolate_from_other_threads_captures`); here it switches modes and drains counters on the device as
fast as it can while the main thread captures graph after graph."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from cutover.hostprotocol.hostlayout import ControlRecord, HostPaths, atomic_write_text
from tests.gpu.staging import stage_built_library

pytestmark = pytest.mark.gpu
CAPTURES, OPS_PER_CAPTURE = 20, 20000


def test_graph_captures_succeed_while_the_control_thread_switches_and_drains(tmp_path, monkeypatch):
    from cutover.plugin import runtime as runtime_module
    from cutover.plugin.runtime import PluginRuntime

    monkeypatch.setattr(runtime_module, "DRAIN_INTERVAL_S", 0.0)  # a device read at every poll
    paths = HostPaths(cutover_root=str(tmp_path / "root"), state_dir=str(tmp_path / "state"))
    stage_built_library(paths)
    runtime = PluginRuntime(paths, 0, torch.device("cuda", torch.cuda.current_device()), poll_s=0.001)
    assert runtime.state is not None, runtime.unavailable
    stop = threading.Event()

    def operator() -> None:
        """A new generation every few milliseconds: the control thread's set_mode runs on the device each time."""
        generation = 1
        while not stop.is_set():
            record = ControlRecord(mode=("triton", "shadow")[generation % 2], generation=generation,
                                   lease_expires_at=time.time() + 60, release_id=runtime.release_id,
                                   set_by="test", set_at=time.time())
            atomic_write_text(paths.control, record.to_json())
            generation += 1
            time.sleep(0.005)

    writer = threading.Thread(target=operator, daemon=True)
    runtime.start()
    writer.start()
    x = torch.zeros(1 << 16, device="cuda")
    try:
        for _ in range(CAPTURES):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):  # capture_error_mode "global", as SGLang captures
                for _ in range(OPS_PER_CAPTURE):
                    x.add_(1)
            graph.replay()
        torch.cuda.synchronize()
    finally:
        stop.set()
        writer.join()
        runtime.stop()
    assert float(x[0]) == CAPTURES * OPS_PER_CAPTURE
    assert runtime.control.applied_generation > CAPTURES  # the thread did switch during the captures


def test_a_buffer_a_graph_captured_is_kept_and_an_eager_only_one_freed():
    from cutover.plugin.buffers import GrowOnlyBuffers

    buffers = GrowOnlyBuffers()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = buffers.like("o", torch.empty(16, 512, device="cuda"))
        captured.fill_(1.0)
    for rows in (64, 128):  # eager calls above the captured size; the 64-row buffer only eager calls used
        buffers.like("o", torch.empty(rows, 512, device="cuda")).fill_(2.0)
    assert buffers.held_bytes == (16 + 128) * 512 * 4
    captured.zero_()
    graph.replay()  # still writes the buffer it was captured with
    torch.cuda.synchronize()
    assert float(captured.sum()) == 16 * 512
