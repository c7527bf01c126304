"""The heartbeat and generation rules of the on-host protocol (cutover/hostprotocol/hostlayout.py) that both the operator side
and the host-side Ansible modules apply: which rank is live, and which generation the next control record needs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cutover.hostprotocol.hostlayout import (
    ControlRecord,
    Heartbeat,
    HostPaths,
    live_heartbeats,
    next_generation,
    recorded_heartbeats,
)


@pytest.fixture
def paths(tmp_path: Path) -> HostPaths:
    paths = HostPaths(cutover_root=str(tmp_path / "root"), state_dir=str(tmp_path / "state"))
    os.makedirs(paths.runtime)
    return paths


def beat(rank: int = 0, generation: int = 3, mode: str = "triton", age_s: float = 0.0, stopped: bool = False):
    return Heartbeat(rank=rank, pid=42, host="h", mode_active=mode, generation_seen=generation, release_id="r",
                     kernel="cuda", counters={"stopped": int(stopped)}, written_at=time.time() - age_s)


def write(paths: HostPaths, heartbeat: Heartbeat) -> None:
    Path(paths.heartbeat(heartbeat.rank)).write_text(heartbeat.to_json())


def test_a_rank_is_live_while_its_heartbeat_is_fresh(paths):
    assert live_heartbeats(paths, 2, 10) == {}
    write(paths, beat(rank=1))
    assert set(live_heartbeats(paths, 2, 10)) == {1}
    write(paths, beat(rank=1, age_s=11))
    assert live_heartbeats(paths, 2, 10) == {}


def test_a_rank_that_stopped_cleanly_is_not_live_however_fresh_its_last_heartbeat(paths):
    write(paths, beat(rank=0, stopped=True))
    write(paths, beat(rank=1))
    assert set(live_heartbeats(paths, 2, 10)) == {1}


def test_crash_markers_and_unreadable_files_are_no_heartbeats(paths):
    Path(paths.armed_marker(0)).write_text('{"pid": 42, "mode": "shadow", "generation": 9}')
    Path(paths.heartbeat(1)).write_text("[1, 2]")
    Path(paths.heartbeat(2)).write_text("{not json")
    assert live_heartbeats(paths, 3, 10) == {} and recorded_heartbeats(paths) == []


def test_recorded_heartbeats_keep_what_stale_stopped_and_extra_ranks_saw(paths):
    for heartbeat in (beat(rank=0, generation=4, age_s=3600), beat(rank=1, generation=6, stopped=True),
                      beat(rank=5, generation=2)):
        write(paths, heartbeat)
    assert [(b.rank, b.generation_seen) for b in recorded_heartbeats(paths)] == [(0, 4), (1, 6), (5, 2)]
    assert recorded_heartbeats(HostPaths(cutover_root="/nonexistent", state_dir="/nonexistent")) == []


def test_the_next_generation_is_above_the_file_and_every_generation_a_rank_saw():
    assert next_generation(None, []) == 1
    assert next_generation(None, [beat(generation=7), beat(generation=3)]) == 8, "a lost file restarts above G"
    assert next_generation(ControlRecord(generation=4), [beat(generation=7)]) == 8
    assert next_generation(ControlRecord(generation=9), [beat(generation=7)]) == 10


def test_a_rank_acknowledges_the_requested_generation_only_in_the_requested_mode():
    assert beat(generation=5, mode="triton").acknowledges(5, "triton")
    assert beat(generation=6, mode="triton").acknowledges(5, "triton")
    assert not beat(generation=4, mode="triton").acknowledges(5, "triton")
    assert not beat(generation=5, mode="custom").acknowledges(5, "triton")
