"""The control protocol: generations, acks, leases, missing/corrupt control files, crash containment."""

from __future__ import annotations

import json
import os
import time

from cutover.hostprotocol.hostlayout import Heartbeat, atomic_write_text
from cutover.plugin.control import ControlLoop, ControlState
from armed import TEST_RELEASE


def loaded_state(release_id: str = TEST_RELEASE) -> ControlState:
    """A rank's control state that loaded `release_id`."""
    state = ControlState()
    state.release_id = release_id
    return state


def promoted(mode: str, generation: int, release_id: str = TEST_RELEASE, **fields):
    """A record with every field a promote writes (release, who, when)."""
    from cutover.hostprotocol.hostlayout import ControlRecord

    return ControlRecord(mode=mode, generation=generation, release_id=release_id, set_by="alice", set_at=1.0, **fields)


def heartbeat(paths, rank=0) -> Heartbeat:
    with open(paths.heartbeat(rank)) as handle:
        return Heartbeat.from_json(handle.read())


def test_newer_generation_is_applied_and_acknowledged(runtime, paths, write_control):
    write_control("shadow", 3, sample_rate=4)
    runtime.control.poll_once()
    beat = heartbeat(paths)
    assert (beat.mode_active, beat.generation_seen, beat.reason) == ("shadow", 3, "")
    assert beat.pid == os.getpid() and beat.kernel == "reference (no GPU)"
    assert int(runtime.state.gate[0, 0]) == 1 and int(runtime.state.gate[7, 1]) == 4  # every layer's gate row
    write_control("custom", 4)
    runtime.control.poll_once()
    assert (heartbeat(paths).mode_active, heartbeat(paths).generation_seen) == ("custom", 4)
    assert int(runtime.state.gate[0, 0]) == 2


def test_older_or_equal_generation_does_not_change_the_mode(runtime, paths, write_control):
    write_control("shadow", 5)
    runtime.control.poll_once()
    write_control("custom", 5)  # same generation, different mode: not a new request
    runtime.control.poll_once()
    write_control("custom", 2)
    runtime.control.poll_once()
    assert (heartbeat(paths).mode_active, heartbeat(paths).generation_seen) == ("shadow", 5)


def test_lease_renewal_with_the_same_generation_keeps_the_mode(paths, write_control):
    state = loaded_state()
    now = time.time()
    record = write_control("shadow", 1, lease_s=5)
    assert state.observe(record, "", now).mode == "shadow"
    renewed = write_control("shadow", 1, lease_s=30)
    assert state.observe(renewed, "", now + 10).mode == "shadow"  # would have expired without the renewal
    decision = state.observe(renewed, "", now + 40)
    assert decision.mode == "triton" and "lease of generation 1 (shadow) expired" in decision.reason


def test_lease_expiry_forces_triton_and_sticks_until_a_newer_generation(runtime, paths, write_control):
    write_control("shadow", 7, lease_s=0.3)
    runtime.control.poll_once()
    assert heartbeat(paths).mode_active == "shadow"
    time.sleep(0.4)
    runtime.control.poll_once()
    beat = heartbeat(paths)
    assert beat.mode_active == "triton" and "expired" in beat.reason and int(runtime.state.gate[0, 0]) == 0
    write_control("shadow", 7, lease_s=60)  # a late renewal of the expired generation does not re-arm
    runtime.control.poll_once()
    assert heartbeat(paths).mode_active == "triton"
    write_control("shadow", 8, lease_s=60)
    runtime.control.poll_once()
    assert (heartbeat(paths).mode_active, heartbeat(paths).reason) == ("shadow", "")


def test_missing_control_file_means_triton_with_the_reason(runtime, paths):
    runtime.control.poll_once()
    beat = heartbeat(paths)
    assert beat.mode_active == "triton" and "control file" in beat.reason and "missing" in beat.reason


def test_corrupt_control_file_forces_triton_with_the_reason(runtime, paths, write_control):
    write_control("custom", 2)
    runtime.control.poll_once()
    assert heartbeat(paths).mode_active == "custom"
    atomic_write_text(paths.control, '{"mode": "custom", "generation": ')
    runtime.control.poll_once()
    beat = heartbeat(paths)
    assert beat.mode_active == "triton" and "corrupt" in beat.reason
    atomic_write_text(paths.control, json.dumps({"mode": "warp-speed", "generation": 3}))
    runtime.control.poll_once()
    assert "warp-speed" in heartbeat(paths).reason and heartbeat(paths).mode_active == "triton"


def test_armed_marker_is_written_when_arming_and_removed_on_return_to_triton(runtime, paths, write_control):
    write_control("shadow", 1)
    runtime.control.poll_once()
    with open(paths.armed_marker(0)) as handle:
        marker = json.load(handle)
    assert (marker["mode"], marker["generation"], marker["pid"]) == ("shadow", 1, os.getpid())
    write_control("triton", 2, lease_s=None)
    runtime.control.poll_once()
    assert not os.path.exists(paths.armed_marker(0))


def test_clean_stop_returns_to_triton_and_removes_the_marker(runtime, paths, write_control):
    write_control("custom", 1)
    runtime.control.poll_once()
    runtime.control.stop(clean=True)
    assert not os.path.exists(paths.armed_marker(0)) and int(runtime.state.gate[0, 0]) == 0


def test_restart_after_unclean_exit_comes_up_in_triton_and_refuses_that_generation(paths, write_control):
    write_control("custom", 9)
    atomic_write_text(paths.armed_marker(0), json.dumps({"pid": 4242, "mode": "custom", "generation": 9}))
    applied = []
    loop = ControlLoop(paths, 0, lambda decision, new: applied.append(decision.mode), lambda state, d: None)
    loop.state.release_id = TEST_RELEASE
    decision = loop.poll_once()
    assert decision.mode == "triton" and loop.mode_active == "triton"
    assert "pid 4242" in decision.reason and "uncleanly" in decision.reason and "generation 9" in decision.reason
    assert loop.state.refuse_up_to == 9 and os.path.exists(paths.armed_marker(0))
    loop.stop(clean=True)  # a clean exit of this process keeps its predecessor's evidence
    assert os.path.exists(paths.armed_marker(0))
    write_control("custom", 10)
    assert loop.poll_once().mode == "custom" and applied[-1] == "custom"


def test_unclean_restart_is_flagged_in_the_heartbeat(paths, write_control):
    from cutover.plugin.runtime import PluginRuntime

    write_control("shadow", 4)
    atomic_write_text(paths.armed_marker(0), json.dumps({"pid": 1, "mode": "shadow", "generation": 4}))
    rt = PluginRuntime(paths, 0, "cpu")
    rt.control.poll_once()
    beat = heartbeat(paths)
    assert beat.mode_active == "triton" and beat.counters["unclean_restart"] == 1 and "uncleanly" in beat.reason
    rt.control.stop(clean=True)


def test_control_thread_acknowledges_within_a_poll(paths, write_control):
    from cutover.plugin.runtime import PluginRuntime

    rt = PluginRuntime(paths, 0, "cpu")
    rt.start()
    try:
        write_control("shadow", 11)
        deadline = time.time() + 1.0
        while time.time() < deadline:
            if os.path.exists(paths.heartbeat(0)) and heartbeat(paths).generation_seen == 11:
                break
            time.sleep(0.02)
        assert heartbeat(paths).mode_active == "shadow"
    finally:
        rt.stop()
    assert heartbeat(paths).counters["stopped"] == 1 and heartbeat(paths).mode_active == "triton"


def test_a_request_for_another_release_than_the_one_loaded_runs_triton_and_says_so():
    """promote and shadow name the release they judged; a rank that loaded another (serving not restarted after
    a stage) must not run that one's kernel in its place."""
    from cutover.hostprotocol.hostlayout import ControlRecord

    state = loaded_state("0123456789-aaaaaa")
    asked = promoted("custom", 2, release_id="0123456789-bbbbbb")
    decision = state.observe(asked, "", time.time())
    assert decision.mode == "triton"
    assert decision.reason == ("control.json asks for custom with release 0123456789-bbbbbb, but this process "
                               "loaded 0123456789-aaaaaa: restart serving to load it (`cutover stage --yes`)")
    same = promoted("custom", 3, release_id="0123456789-aaaaaa")
    assert state.observe(same, "", time.time()).mode == "custom"
    unnamed = ControlRecord(mode="custom", generation=4, set_by="alice", set_at=1.0)  # names no release
    decision = state.observe(unnamed, "", time.time())
    assert decision.mode == "triton" and "without a release_id" in decision.reason


def test_custom_runs_only_on_a_serving_stack_control_json_approves():
    """promote names the stacks it approved custom on: a rank that restarted on another (SGLang upgraded after the
    promote) runs triton and says why; no limit (None) leaves any stack alone."""

    approved = {"sglang": "0.5.23", "torch": "2.11.0", "plugin": "0123456789ab", "gpu": "NVIDIA H200"}
    state = loaded_state()
    state.stack = {**approved, "sglang": "0.5.24"}
    decision = state.observe(promoted("custom", 2, stacks=[approved]), "", time.time())
    assert decision.mode == "triton"
    assert decision.reason == (
        "control.json allows custom only on the serving stack promote approved (sglang 0.5.23, torch 2.11.0, plugin "
        "0123456789ab, gpu NVIDIA H200); this process runs sglang 0.5.24, torch 2.11.0, plugin 0123456789ab, gpu "
        "NVIDIA H200: shadow and promote again on it")
    state.stack = dict(approved)
    assert state.observe(promoted("custom", 3, stacks=[approved]), "", time.time()).mode == "custom"
    state.stack = {}
    assert state.observe(promoted("custom", 4), "", time.time()).mode == "custom"
    assert state.observe(promoted("custom", 5, stacks=[approved]), "", time.time()).mode == "triton"


def test_a_control_file_with_malformed_stacks_is_corrupt():
    from cutover.hostprotocol.hostlayout import ControlRecord

    for stacks in ("sglang 0.5.23", [["0.5.23"]], {"sglang": "0.5.23"}):
        try:
            ControlRecord.from_json(json.dumps({"mode": "custom", "generation": 2, "stacks": stacks}))
        except ValueError as exc:
            assert "control stacks" in str(exc)
        else:
            raise AssertionError(f"stacks {stacks!r} accepted")
