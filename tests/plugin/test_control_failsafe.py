"""The control protocol on hostile control files: whatever control.json holds, the lease is enforced, the
heartbeat is written, and the answer is triton or the valid mode asked for."""

from __future__ import annotations

import json
import os
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cutover.hostprotocol.hostlayout import (MAX_LEASE_AHEAD_S, ControlRecord, Heartbeat, atomic_write_text,
                                             read_heartbeat)
from cutover.plugin.control import ControlLoop, ControlState, read_control
from armed import TEST_RELEASE

DEEP = "[" * 100_000 + "]" * 100_000


def write_bytes(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


def heartbeat(paths) -> Heartbeat:
    beat = read_heartbeat(paths.heartbeat(0))
    assert beat is not None
    return beat


@pytest.mark.parametrize("content", [b"\xff\xfe{\"mode\": \"shadow\"}", DEEP.encode(),
                                     b'{"mode": "shadow", "generation": ' + b"9" * 4300 + b"}",
                                     b"{" * 5000, b'{"mode": "shadow", "generation": 2, "lease_expires_at": "soon"}'],
                         ids=["non-utf8", "deep-nesting", "4300-digit-generation", "unclosed", "lease-as-text"])
def test_an_unreadable_control_file_ends_shadow_and_the_heartbeat_says_why(runtime, paths, write_control, content):
    write_control("shadow", 1)
    assert runtime.control.poll_once().mode == "shadow"
    write_bytes(paths.control, content)
    decision = runtime.control.poll_once()
    beat = heartbeat(paths)
    assert (decision.mode, runtime.control.mode_active, beat.mode_active) == ("triton", "triton", "triton")
    assert "is corrupt" in beat.reason and "running triton" in beat.reason


def test_a_lease_years_ahead_is_clamped_to_the_maximum_from_the_first_read():
    state = ControlState()
    state.release_id = TEST_RELEASE
    now = time.time()
    record = ControlRecord(mode="shadow", generation=1, release_id=TEST_RELEASE, set_by="alice", set_at=now,
                           lease_expires_at=now + 10 * 365 * 86400)
    assert state.observe(record, "", now).mode == "shadow"
    assert state.lease_expires_at == pytest.approx(now + MAX_LEASE_AHEAD_S)
    assert state.observe(record, "", now + MAX_LEASE_AHEAD_S - 1).mode == "shadow"  # the same lease read again
    decision = state.observe(record, "", now + MAX_LEASE_AHEAD_S + 1)
    assert decision.mode == "triton" and "lease of generation 1 (shadow) expired" in decision.reason
    renewed = ControlRecord(**{**record.__dict__, "lease_expires_at": now + 10 * 365 * 86400 + 30})
    assert state.observe(renewed, "", now + MAX_LEASE_AHEAD_S + 2).mode == "triton"  # the fallback sticks


@pytest.mark.parametrize("fields, missing", [
    ({}, "a release_id, set_by, set_at"),
    ({"release_id": TEST_RELEASE}, "set_by, set_at"),
    ({"release_id": TEST_RELEASE, "set_by": "mallory"}, "set_at"),
])
def test_custom_without_the_fields_a_promote_writes_is_triton_with_the_reason(runtime, paths, fields, missing):
    atomic_write_text(paths.control, json.dumps({"mode": "custom", "generation": 999, **fields}))
    decision = runtime.control.poll_once()
    beat = heartbeat(paths)
    assert (decision.mode, beat.mode_active) == ("triton", "triton")
    assert f"control.json asks for custom without {missing}" in beat.reason


def test_shadow_without_a_lease_is_triton(runtime, paths):
    atomic_write_text(paths.control, ControlRecord(mode="shadow", generation=3, release_id=TEST_RELEASE,
                                                   set_by="alice", set_at=time.time()).to_json())
    decision = runtime.control.poll_once()
    assert decision.mode == "triton" and "without a lease" in decision.reason


def test_a_rollback_reset_record_is_taken_below_the_generation_seen_and_newer_ones_follow(runtime, paths,
                                                                                          write_control):
    write_control("custom", 2**53 - 1, lease_s=None)
    assert runtime.control.poll_once().mode == "custom"
    atomic_write_text(paths.control, ControlRecord(mode="triton", generation=1, resets=True, set_by="bob",
                                                   set_at=time.time()).to_json())
    assert runtime.control.poll_once().mode == "triton"
    assert heartbeat(paths).generation_seen == 1
    write_control("shadow", 2)
    assert runtime.control.poll_once().mode == "shadow"


def test_a_reset_cannot_arm_a_rank():
    with pytest.raises(ValueError, match="true only in mode triton"):
        ControlRecord.from_json(json.dumps({"mode": "custom", "generation": 1, "resets": True}))


def test_a_switch_that_fails_still_writes_the_heartbeat(paths, write_control):
    ticks = []

    def apply(decision, new_generation):
        raise RuntimeError("device busy")

    loop = ControlLoop(paths, 0, apply, lambda state, decision: ticks.append(decision.mode))
    loop.state.release_id = TEST_RELEASE
    write_control("shadow", 1)
    with pytest.raises(RuntimeError):
        loop.poll_once()
    assert ticks == ["shadow"] and loop.mode_active == "triton"


JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                 st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4)), max_leaves=20)
CONTROL_FIELDS = st.fixed_dictionaries({}, optional={
    "mode": st.one_of(st.sampled_from(["triton", "shadow", "custom"]), JSON_VALUES),
    "generation": st.one_of(st.integers(min_value=-5, max_value=2**60), JSON_VALUES),
    "lease_expires_at": st.one_of(st.floats(), st.integers(min_value=-(10**20), max_value=10**20), JSON_VALUES),
    "release_id": st.one_of(st.just(TEST_RELEASE), JSON_VALUES),
    "set_by": st.one_of(st.just("alice"), JSON_VALUES),
    "set_at": st.one_of(st.floats(), JSON_VALUES),
    "sample_rate": st.one_of(st.integers(), JSON_VALUES),
    "stacks": JSON_VALUES,
    "resets": JSON_VALUES,
})


def _control_texts():
    dumped = CONTROL_FIELDS.map(lambda fields: json.dumps(fields).encode())
    return st.one_of(st.binary(max_size=256), dumped, JSON_VALUES.map(lambda value: json.dumps(value).encode()),
                     st.integers(min_value=1, max_value=50_000).map(lambda depth: b"[" * depth + b"]" * depth))


@given(first=_control_texts(), second=_control_texts())
def test_any_control_bytes_give_triton_or_a_valid_mode_and_a_heartbeat(runtime, paths, first, second):
    """Two successive reads of arbitrary content: no exception escapes, the heartbeat is written each time, and
    a non-triton answer is only ever the mode of a valid, complete, unexpired record for the loaded release."""
    for content in (first, second):
        write_bytes(paths.control, content)
        now = time.time()
        decision = runtime.control.poll_once(now)
        record, _ = read_control(paths.control)
        assert heartbeat(paths).mode_active == runtime.control.mode_active == decision.mode
        if decision.mode != "triton":
            assert record is not None and record.mode == decision.mode and record.release_id == TEST_RELEASE
            assert record.set_by and record.set_at > 0
            assert runtime.control.state.lease_expires_at is None or runtime.control.state.lease_expires_at > now
            assert (runtime.control.state.lease_expires_at or 0) <= now + MAX_LEASE_AHEAD_S


def test_a_drain_that_fails_still_lets_the_heartbeat_through(runtime, paths, write_control, monkeypatch):
    def broken_drain(write):
        raise RuntimeError("device lost")

    monkeypatch.setattr(runtime, "drain", broken_drain)
    write_control("shadow", 1)
    assert runtime.control.poll_once().mode == "shadow"
    beat = heartbeat(paths)
    assert beat.mode_active == "shadow" and beat.counters["errors"] >= 1
