"""Watching hosts during a run: a reconnecting link per host, rank liveness and restarts, stats tailing.

Heartbeat age is measured on the operator's clock (how long since we last saw a rank's heartbeat change), so
a host whose clock is off cannot look alive or dead; an unreachable host's ranks simply age.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from checks.gates import RankObservation
from cutover.config import Host, Settings
from cutover.errors import CutoverError, HostError
from cutover.hostprotocol.hostlayout import stats_record
from cutover.hoststate import HostState, LockRecord, RankView
from cutover.transport import open_transport
from cutover.workflow.probes import ServerSample

T = TypeVar("T")


class HostLink:
    """One host's state through a transport that is reopened once when a call fails (a dropped session)."""

    def __init__(self, host: Host, settings: Settings):
        self.host = host
        self.settings = settings
        self._state: HostState | None = None
        self.last_error: str = ""

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def state(self) -> HostState:
        if self._state is None:
            self._state = HostState(self.host, open_transport(self.host), self.settings)
        return self._state

    def reset(self) -> None:
        if self._state is not None:
            try:
                self._state.transport.close()
            except Exception:  # noqa: BLE001 - closing a dead connection may fail in any way; it is gone anyway
                pass
        self._state = None

    def call(self, action: Callable[[HostState], T]) -> T:
        """Run `action` on the host state; on HostError reconnect and try once more, then raise."""
        try:
            return action(self.state)
        except HostError:
            self.reset()
        try:
            result = action(self.state)
        except HostError as exc:
            self.last_error = str(exc).splitlines()[0]
            raise
        self.last_error = ""
        return result

    def close(self) -> None:
        self.reset()


@contextlib.contextmanager
def locked_links(
    hosts: list[Host], settings: Settings, operation: str, lock_ttl_s: float
) -> Iterator[tuple[list[HostLink], dict[str, LockRecord]]]:
    """A link per host, each holding the host lock for `operation` (taken in host order; the first refusal
    raises). On exit every lock taken is released (one that cannot be is left to expire) and every link closed."""
    links = [HostLink(host, settings) for host in hosts]
    locks: dict[str, LockRecord] = {}
    try:
        for link in links:
            locks[link.name] = link.call(lambda st: st.acquire_lock(operation, lock_ttl_s))
        yield links, locks
    finally:
        for link in links:
            if link.name in locks:
                with contextlib.suppress(CutoverError):
                    link.call(lambda st: st.release_lock(locks[link.name]))
            link.close()


@dataclass
class RankTracker:
    """Liveness of one rank since the run was armed."""

    host: str
    rank: int
    armed_pid: int | None
    last_written_at: float | None = None
    changed_at: float = field(default_factory=time.monotonic)
    pid: int | None = None
    pids: list[int] = field(default_factory=list)
    mode_active: str | None = None
    release_id: str | None = None
    reason: str = ""
    kernel: str = ""
    counters: dict = field(default_factory=dict)
    stats_write_errors_at_start: int = 0
    stacks: list[dict] = field(default_factory=list)  # every serving stack its heartbeats reported (servingstack)

    def update(self, view: RankView) -> None:
        beat = view.heartbeat
        if beat is None:
            return
        if self.last_written_at is None:  # the first heartbeat seen: what the rank had counted before the run
            self.stats_write_errors_at_start = int((beat.counters or {}).get("stats_write_errors", 0))
        if beat.written_at != self.last_written_at:
            self.last_written_at = beat.written_at
            self.changed_at = time.monotonic()
        if beat.pid != self.pid:
            self.pid = beat.pid
            if beat.pid not in self.pids:
                self.pids.append(beat.pid)
        self.mode_active, self.reason, self.kernel = beat.mode_active, beat.reason, beat.kernel
        self.release_id = beat.release_id
        self.counters = beat.counters or {}
        if beat.stack not in self.stacks:
            self.stacks.append(beat.stack)

    @property
    def restarts(self) -> int:
        return len([pid for pid in self.pids if pid != self.armed_pid])

    def observation(self) -> RankObservation:
        age = None if self.last_written_at is None else time.monotonic() - self.changed_at
        why = self.reason
        if self.restarts:
            why = f"(pid {self.armed_pid} -> {self.pid}) {why}".strip()
        return RankObservation(self.host, self.rank, age, self.mode_active, self.restarts, why,
                               self.stats_write_errors)

    @property
    def stats_write_errors(self) -> int:
        """Stats lines the rank could not write since it was armed (heartbeat counter stats_write_errors)."""
        return max(0, int(self.counters.get("stats_write_errors", 0)) - self.stats_write_errors_at_start)


def with_heartbeat_counters(sample: ServerSample, trackers: list[RankTracker]) -> ServerSample:
    """Fill the counters a server's /metrics lacks (SGLang exports no cutover_* series) from the ranks'
    heartbeat counters, summed over ranks. The same rule applies in shadow and in the promote watch, so the
    baseline and the watch always compare like with like."""
    if not sample.healthy or not trackers:
        return sample
    for attribute, counter in (
        ("verify_steps_total", "verify_steps"),
        ("errors_total", "errors"),
        ("nonfinite_total", "nonfinite_custom"),
    ):
        if getattr(sample, attribute) is None and any(counter in t.counters for t in trackers):
            setattr(sample, attribute, float(sum(t.counters.get(counter, 0) for t in trackers)))
    return sample


def trackers_from_ack(host: str, views: list[RankView]) -> list[RankTracker]:
    """Trackers for every rank of a host, anchored on the pids that acknowledged the armed generation."""
    trackers = []
    for view in views:
        tracker = RankTracker(host, view.rank, view.heartbeat.pid if view.heartbeat else None)
        tracker.update(view)
        trackers.append(tracker)
    return trackers


class StatsTail:
    """New stats records of every rank of a host, read incrementally from stats/rank-<r>.jsonl."""

    def __init__(self, host: Host):
        self.host = host
        self.offsets = {rank: 0 for rank in range(host.tp_size)}

    def skip_existing(self, state: HostState) -> None:
        """Start at the current end of every rank's file: earlier runs' records are never read."""
        for rank in self.offsets:
            self.offsets[rank] = state.transport.size(state.paths.stats_file(rank)) or 0

    def read_new(self, state: HostState) -> list[dict]:
        records = []
        for rank, offset in self.offsets.items():
            chunk = state.transport.read_from(state.paths.stats_file(rank), offset)
            if chunk is None:
                continue
            text, self.offsets[rank] = chunk
            records += [record for record in map(stats_record, text.splitlines()) if record is not None]
        return records
