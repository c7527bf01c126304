"""What a rank does when something around the kernel fails: a stats file it cannot write never holds it in its old
mode and loses no interval; a truth-anchor snapshot that fails never fails the served step; a control file whose
lease is not a time is corrupt; outgrown buffers that no graph captured are freed."""

from __future__ import annotations

import json
import math
import os
import time

import pytest
import torch

from cutover.hostprotocol.hostlayout import ControlRecord, atomic_write_text, read_heartbeat
from cutover.plugin import audit as audit_module
from cutover.plugin import devicestate
from cutover.plugin.buffers import GrowOnlyBuffers
from cutover.plugin.control import read_control
from cutover.plugin.dispatch import verify_site
from kernel_ext.reference import reference_extend_attention_fwd
from kernel_ext.testing import make_verify_batch


def test_a_stats_file_that_cannot_be_written_does_not_hold_the_rank_in_custom(runtime, paths, write_control):
    write_control("custom", 1, lease_s=None)  # promoted: no lease would ever return it to triton
    runtime.control.poll_once()
    os.makedirs(paths.stats_file(0))  # the stats file cannot be appended to (as on a full or failing disk)
    runtime.state.counters[0, devicestate.CALLS] += 3  # traffic since the last drain: the switch must write it
    write_control("triton", 2, lease_s=None)  # cutover rollback

    runtime.control.poll_once()

    assert int(runtime.state.gate[0, 0]) == devicestate.MODE_CODES["triton"]
    beat = read_heartbeat(paths.heartbeat(0))
    assert (beat.mode_active, beat.generation_seen) == ("triton", 2)
    assert beat.counters["stats_write_errors"] >= 1


def test_a_stats_line_that_failed_is_carried_into_the_next(runtime, paths, write_control):
    write_control("shadow", 1)
    runtime.control.poll_once()
    layer = runtime.state.counters[4]
    layer[devicestate.CALLS] += 10
    layer[devicestate.COMPARED] += 10
    layer[devicestate.SAMPLE_BAD_SCRATCH] += 1  # one non-finite output of our kernel in this interval
    os.makedirs(paths.stats_file(0))
    with pytest.raises(OSError):
        runtime.drain(write=True)
    os.rmdir(paths.stats_file(0))  # the disk recovers
    layer[devicestate.CALLS] += 10
    layer[devicestate.COMPARED] += 10

    runtime.drain(write=True)

    [line] = [json.loads(text) for text in open(paths.stats_file(0))]
    assert (line["layers"]["4"]["compared"], line["layers"]["4"]["nonfinite_custom"]) == (20, 1)
    assert runtime.stats.write_errors == 1


def test_a_failed_truth_snapshot_never_fails_the_served_step(runtime, write_control, monkeypatch):
    write_control("shadow", 1)
    runtime.control.poll_once()

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB")

    monkeypatch.setattr(audit_module, "snapshot_call", out_of_memory)
    batch = make_verify_batch(8, 8, 2, [30, 55], seed=0)
    expected = batch.fresh_output()
    reference_extend_attention_fwd(*batch.args(expected))

    with verify_site(3):
        runtime.wrap(reference_extend_attention_fwd)(*batch.args(batch.o))

    assert torch.equal(batch.o, expected)  # SGLang's output, served
    assert runtime.audit.errors == 1 and any("truth-anchor snapshot failed" in p for p in runtime.problems)


@pytest.mark.parametrize("lease", ["soon", math.nan, math.inf, True])
def test_a_lease_that_is_not_a_finite_time_makes_the_control_file_corrupt(paths, runtime, lease):
    text = json.dumps({"mode": "custom", "generation": 2, "lease_expires_at": lease})
    atomic_write_text(paths.control, text)
    record, problem = read_control(paths.control)
    assert record is None and "lease_expires_at" in problem and "finite UNIX time" in problem
    assert runtime.control.poll_once().mode == "triton"


def test_a_finite_lease_is_accepted():
    record = ControlRecord(mode="shadow", generation=1, lease_expires_at=time.time() + 60)
    assert ControlRecord.from_json(record.to_json()) == record


def test_outgrown_buffers_no_graph_captured_are_freed():
    buffers = GrowOnlyBuffers()
    for batch in range(1, 65):  # eager calls, each the largest so far
        view = buffers.like("o", torch.empty(batch, 8, 512))
        assert view.shape == (batch, 8, 512)
    assert buffers.held_bytes == 64 * 8 * 512 * 4  # only the current buffer


CRASHING_SCHEDULER = """
import sys, time, traceback
from cutover.hostprotocol.hostlayout import ControlRecord, HostPaths, atomic_write_text
from cutover.plugin.runtime import PluginRuntime
paths = HostPaths(sys.argv[1], sys.argv[2])
atomic_write_text(paths.control, ControlRecord(mode="custom", generation=3, release_id=sys.argv[3], set_by="alice",
                                               set_at=time.time()).to_json())  # promoted: no lease
runtime = PluginRuntime(paths, 0, "cpu", poll_s=0.02)
runtime.start()
while runtime.control.mode_active != "custom":
    time.sleep(0.02)
try:  # SGLang's run_scheduler_process: log the exception, signal the parent, return normally
    raise RuntimeError("forward pass failed")
except RuntimeError:
    traceback.print_exc()
"""


def test_a_scheduler_that_dies_of_an_exception_leaves_the_armed_marker(paths, loaded_release):
    import subprocess
    import sys

    finished = subprocess.run([sys.executable, "-c", CRASHING_SCHEDULER, paths.cutover_root, paths.state_dir,
                               loaded_release],
                              capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0 and "forward pass failed" in finished.stderr
    assert os.path.exists(paths.armed_marker(0))
    beat = read_heartbeat(paths.heartbeat(0))
    assert beat.counters["stopped"] == 1 and "without an orderly stop" in beat.reason

    from cutover.plugin.runtime import PluginRuntime

    restarted = PluginRuntime(paths, 0, "cpu")
    try:
        decision = restarted.control.poll_once()
        assert decision.mode == "triton" and "exited uncleanly while armed in custom" in decision.reason
    finally:
        restarted.control.stop(clean=True)


def test_a_release_without_its_library_never_loads_another_build(tmp_path, monkeypatch):
    from cutover.plugin import kernels

    release = tmp_path / "releases" / "rel-a"
    release.mkdir(parents=True)
    (release / "manifest.json").write_text(json.dumps({"archs": ["sm_90a"], "files": {}}))
    monkeypatch.setattr(kernels, "_cuda_arch_problem", lambda device, release_dir: None)
    with pytest.raises(kernels.KernelUnavailable, match="release rel-a has no libcutover_verify.so"):
        kernels.select_kernels(torch.device("cuda", 0), str(release))


def test_shapes_the_plan_does_not_serve_fall_back_instead_of_raising():
    """The workspace is sized before the kernel's own checks; a plan that declines (more than 64 draft tokens)
    must read as "not served", as the kernel's answer would, not as a raising kernel."""
    from types import SimpleNamespace

    from cutover.plugin.kernels import CudaKernels
    from kernel_ext._lib import ERR_UNSUPPORTED, KernelCallError

    def declining_plan(*args):
        raise KernelCallError(ERR_UNSUPPORTED, "max_extend (draft tokens per request) 65 outside 1..64")

    module = SimpleNamespace(verify_attention=None, workspace_bytes=declining_plan, shadow_accumulate=None)
    batch = make_verify_batch(8, 8, 2, [30, 55], seed=0)
    args = batch.args(batch.o)
    assert CudaKernels(module).custom(args, {}, batch.o, batch.fresh_output(), None) is False
