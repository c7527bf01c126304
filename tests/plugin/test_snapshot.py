"""The gated snapshot's flow on the CPU: torch_snapshot (the kernel's specification), the staging area's reader,
the control thread's arming, the audit's truth samples and captures of calls that stand in for graph replays."""

from __future__ import annotations

import glob
import os
import re

import pytest
import torch

from cutover.hostprotocol.hostlayout import HostPaths
from cutover.plugin.audit import truth_errors
from cutover.plugin.captures import capture_args, load_capture, snapshot_call
from cutover.plugin.dispatch import verify_site
from armed import stage_test_release
from cutover.plugin.graphs import switch_mode
from cutover.plugin.snapshot import (HEADER_BYTES, GraphSnapshots, Site, Staging, graph_replay_standin,
                                     snapshot_capture, torch_snapshot)
from cutover.workflow.report import truth_sources
from kernel_ext import _lib, build
from kernel_ext.reference import reference_extend_attention_fwd, splitk_extend_attention_fwd
from kernel_ext.testing import make_verify_batch

LAYER = 2


def call(prefix_lens=(10, 20, 5), mask="tree", seed=1):
    batch = make_verify_batch(8, 4, len(prefix_lens), list(prefix_lens), mask=mask, device="cpu", seed=seed,
                              nan_unused_rows=False)
    args = batch.args()
    reference_extend_attention_fwd(*args)
    scratch = torch.empty_like(batch.o)
    splitk_extend_attention_fwd(*batch.args(scratch))
    return batch, args, scratch


def site_of(args) -> Site:
    return Site((args[6].dtype, args[7].dtype, args[8].dtype, args[11].dtype if args[9] is not None else None),
                args[9].dtype if args[9] is not None else None, {}, "stock")


GATE = torch.tensor([1, 1, 7, 0], dtype=torch.int32)
SAMPLE = torch.tensor([0, 1], dtype=torch.int32)


def test_the_header_layout_agrees_with_the_c_header():
    header = (build.CSRC / "cutover_verify.h").read_text()
    assert int(re.search(r"#define CUTOVER_SNAPSHOT_HEADER_WORDS (\d+)", header).group(1)) == _lib.SNAPSHOT_HEADER_WORDS
    assert int(re.search(r"#define CUTOVER_SNAPSHOT_FORMAT (\d+)", header).group(1)) == _lib.SNAPSHOT_FORMAT
    body = header[header.index("enum CutoverSnapshotWord {"):]
    in_header = {name: int(value) for name, value in re.findall(r"CUTOVER_SNAP_(\w+) = (\d+)", body)}
    mirrored = {name[len("SNAP_"):]: getattr(_lib, name) for name in dir(_lib)
                if name.startswith("SNAP_") and name != "SNAP_FORMAT"} | {"FORMAT": _lib.SNAP_FORMAT}
    assert in_header == mirrored


def test_unarmed_armed_elsewhere_or_unsampled_calls_leave_the_staging_area_untouched():
    _batch, args, scratch = call()
    staging = Staging("cpu", 1 << 20)
    before = staging.buffer.clone()
    torch_snapshot(staging.buffer, args, args[3], scratch, SAMPLE, GATE, LAYER, True)
    assert torch.equal(staging.buffer, before)
    staging.arm(LAYER + 1)
    armed = staging.buffer.clone()
    torch_snapshot(staging.buffer, args, args[3], scratch, SAMPLE, GATE, LAYER, True)
    token = staging.arm(LAYER)
    torch_snapshot(staging.buffer, args, args[3], scratch, torch.tensor([0, 0], dtype=torch.int32), GATE, LAYER, True)
    assert torch.equal(staging.buffer[8:], armed[8:]) and staging.take(token) is None  # still armed, waiting


@pytest.mark.parametrize("mask", ["tree", "causal"])
def test_an_armed_snapshot_is_the_call_and_reruns_bit_for_bit(mask):
    _batch, args, scratch = call(mask=mask)
    staging = Staging("cpu", 1 << 20)
    token = staging.arm(LAYER)
    torch_snapshot(staging.buffer, args, args[3], scratch, SAMPLE, GATE, LAYER, True)
    header, data = staging.take(token)
    assert header[_lib.SNAP_ARM] == 0 and header[_lib.SNAP_CALL] == 7
    capture = snapshot_capture(header, data, site_of(args))
    assert capture["source"] == "graph" and capture["requests"] == {"kept": 3, "total": 3, "tokens_total": 12,
                                                                     "rows_total": 35}
    eager = snapshot_call(args, {}, args[3], scratch)  # the eager audit's copy of the same call
    unread = {"custom_mask"} | ({"mask_indptr"} if args[9] is None else set())  # only the mask's tails are read
    for name, value in eager["args"].items():
        if name in unread:
            continue
        if isinstance(value, torch.Tensor):
            assert torch.equal(capture["args"][name], value), name
        else:
            assert capture["args"][name] == pytest.approx(value), name
    assert truth_errors(capture) == truth_errors(eager)
    for kernel, key in ((reference_extend_attention_fwd, "o_stock"), (splitk_extend_attention_fwd, "o_custom")):
        out = torch.full_like(capture[key], float("nan"))
        kernel(*capture_args(capture, out))
        assert torch.equal(out, capture[key]), key


def test_a_call_too_big_for_the_staging_area_keeps_the_leading_requests_that_fit():
    _batch, args, scratch = call(prefix_lens=(10, 300, 5))
    per_token = 8 * 576 * 2 + 576 * 2 + 512 * 2 + 2 * 8 * 512 * 2
    fits_one = 4 * per_token + 10 * 1152 + 16 + 2 * 32 + 8 * 16 + 64  # request 0, not request 1's 300 rows
    staging = Staging("cpu", fits_one)
    token = staging.arm(LAYER)
    torch_snapshot(staging.buffer, args, args[3], scratch, SAMPLE, GATE, LAYER, False)
    header, data = staging.take(token)
    capture = snapshot_capture(header, data, site_of(args))
    assert capture["requests"]["kept"] == 1 and capture["requests"]["total"] == 3 and capture["source"] == "eager"
    assert torch.equal(capture["args"]["q_extend"], args[0][:4]) and torch.equal(capture["o_stock"], args[3][:4])
    assert torch.equal(capture["args"]["k_buffer"], args[4][args[8][:10].long()])
    out = torch.full_like(capture["o_stock"], float("nan"))
    reference_extend_attention_fwd(*capture_args(capture, out))
    assert torch.equal(out, capture["o_stock"])


def test_a_snapshot_rewritten_while_it_is_read_is_not_taken():
    _batch, args, scratch = call()
    staging = Staging("cpu", 1 << 20)
    first = staging.arm(LAYER)
    torch_snapshot(staging.buffer, args, args[3], scratch, SAMPLE, GATE, LAYER, True)
    real = staging._on_side
    copies = []

    def rewrite_after_the_data_copy(copy):
        real(copy)
        copies.append(copy)
        if len(copies) == 2:
            staging.arm(LAYER)
            torch_snapshot(staging.buffer, args, args[3], scratch, SAMPLE, GATE, LAYER, True)

    staging._on_side = rewrite_after_the_data_copy
    assert staging.take(first) is Staging.TORN
    staging._on_side = real
    header = staging.buffer[:HEADER_BYTES].view(torch.int64)
    header[_lib.SNAP_WRITING] = 12345  # a later write begun, not finished
    assert staging.take(int(header[_lib.SNAP_COMPLETED])) is Staging.TORN


class RecordingAudit:
    def __init__(self):
        self.submitted = []

    def submit(self, capture):
        self.submitted.append(capture)


def test_the_control_thread_arms_one_layer_at_a_time_rotating_at_most_once_per_interval():
    from cutover.plugin.devicestate import DeviceState

    _batch, args, scratch = call()
    audit = RecordingAudit()
    snapshots = GraphSnapshots("cpu", audit, interval_s=1.0, capacity_bytes=1 << 20)
    state = DeviceState(torch.device("cpu"), max_layers=4)
    state.set_mode("shadow", 1, reset_counters=True)

    def step():
        for layer in (0, 1, 2):
            slots = state.slots(layer)
            slots.enable.copy_(SAMPLE)
            snapshots.launch(layer, slots, args, {}, args[3], scratch, "stock")

    step()
    snapshots.tick(shadow=True, now=100.0)  # arms layer 0
    snapshots.tick(shadow=True, now=100.2)  # nothing ran yet: pending
    step()
    snapshots.tick(shadow=True, now=100.4)  # takes layer 0
    snapshots.tick(shadow=True, now=100.6)  # within the interval: nothing armed
    step()
    snapshots.tick(shadow=True, now=101.5)  # arms layer 1
    step()
    snapshots.tick(shadow=True, now=101.7)
    assert [c["layer"] for c in audit.submitted] == [0, 1]
    assert snapshots.counts["armed"] == 2 and snapshots.counts["taken"] == 2
    snapshots.tick(shadow=False, now=103.0)  # not shadow: nothing armed
    step()
    assert snapshots.counts["armed"] == 2
    snapshots.tick(shadow=True, now=104.0)  # arms layer 2; no call comes: disarmed after the timeout
    snapshots.tick(shadow=True, now=104.0 + snapshots.timeout_s + 0.1)
    assert snapshots.counts["timeouts"] == 1 and snapshots.staging.read_header()[_lib.SNAP_ARM] == 0


@pytest.fixture
def cpu_runtime(tmp_path):
    from cutover.plugin.runtime import PluginRuntime

    paths = HostPaths(cutover_root=str(tmp_path / "root"), state_dir=str(tmp_path / "state"))
    stage_test_release(paths)
    runtime = PluginRuntime(paths, 0, "cpu", audit_interval_s=0.0)
    switch_mode(runtime, paths, "shadow", 1)
    yield runtime
    runtime.control.stop(clean=True)


def test_calls_standing_in_for_graph_replays_give_graph_truth_samples_and_replayable_captures(cpu_runtime):
    from cutover.replay import replay_capture

    runtime = cpu_runtime
    batch, _args, _scratch = call()
    dispatcher = runtime.wrap(reference_extend_attention_fwd)
    for tick in range(4):
        with graph_replay_standin(), verify_site(LAYER):
            dispatcher(*batch.args())
        runtime.snapshots.tick(shadow=True, now=1000.0 + tick)
    runtime.audit.drain()
    truth = runtime.audit.take_truth()
    assert truth and {sample["source"] for sample in truth} == {"graph"}, truth
    assert runtime.snapshots.counts["taken"] == len(truth)
    paths = glob.glob(os.path.join(runtime.paths.captures, "*.pt"))
    assert paths
    capture = load_capture(paths[0])
    assert capture["source"] == "graph" and capture["layer"] == LAYER and capture["rank"] == 0
    result = replay_capture(paths[0], device="cpu")
    recorded = {row.kernel: row.rel_l2 for row in result.rows if row.source == "recorded live"}
    rerun = {row.kernel: row.rel_l2 for row in result.rows if row.source == "rerun"}
    assert rerun == recorded  # the reruns reproduce the recorded outputs


def test_eager_calls_are_audited_once_from_python_and_say_so(cpu_runtime):
    runtime = cpu_runtime
    batch, _args, _scratch = call()
    dispatcher = runtime.wrap(reference_extend_attention_fwd)
    with verify_site(LAYER):
        dispatcher(*batch.args())
    runtime.audit.drain()
    assert [sample["source"] for sample in runtime.audit.take_truth()] == ["eager"]


def test_a_failing_snapshot_launch_turns_snapshots_off_and_serves_the_call(cpu_runtime):
    runtime = cpu_runtime
    batch, _args, _scratch = call()

    def broken(*_args, **_kwargs):
        raise RuntimeError("no staging")

    runtime.snapshots.launch = broken
    dispatcher = runtime.wrap(reference_extend_attention_fwd)
    with verify_site(LAYER):
        dispatcher(*batch.args())
    assert "no staging" in runtime.snapshots.disabled and any("no staging" in p for p in runtime.problems)
    assert torch.isfinite(batch.o).all()


def test_the_report_line_counts_truth_samples_by_source():
    line = truth_sources([{"source": "graph"}, {"source": "graph"}, {"source": "eager"}, {}])
    assert line == "truth anchor: 4 float64-anchored sample(s) (2 from eager calls, 2 from CUDA-graph-replayed calls)"
    assert truth_sources([]) == "truth anchor: 0 float64-anchored sample(s)"
