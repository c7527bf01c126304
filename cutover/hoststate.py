"""A host's state files (the layout of `cutover.hostprotocol.hostlayout`), read and written through a Transport.

control.json (atomic writes under the control write lock, generation bumps), journal.jsonl (append only), the
operator lock (owner, expiry, takeover of an expired lock), phase.json (state machine of `cutover.hostprotocol.phases`),
heartbeats and the acknowledgement wait, the latest verdict and the most recent divergence stats per rank.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass, field

from cutover.config import Host, Settings
from cutover.errors import AckTimeoutError, HostError, LockHeldError, PhaseError
from cutover.hostprotocol import phases
from cutover.hostprotocol.controlwrite import ControlLockBusy, ControlWriteLock, remove_if_unchanged
from cutover.hostprotocol.hostlayout import (MAX_LEASE_AHEAD_S, ControlRecord, Heartbeat, finite_number,
                                             generation_resets, journal_entry, load_record, next_generation)
from cutover.hostprotocol.phases import PhaseRecord
from cutover.hostprotocol.statsrecord import StatsRecord
from cutover.transport import Transport

JOURNAL_TAIL_BYTES = 16384
STATS_TAIL_BYTES = 65536  # first window for a rank's last stats line; doubled up to the cap
STATS_TAIL_MAX_BYTES = 4 << 20


@dataclass
class LockRecord:
    owner: str
    action: str
    acquired_at: float
    expires_at: float
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    pid: int = field(default_factory=os.getpid)
    client: str = field(default_factory=socket.gethostname)  # the machine the holding cutover runs on

    def running_elsewhere(self) -> bool:
        """Whether the holder is another cutover process that still runs on this machine, or one on another
        machine (whose liveness cannot be checked from here). A lock of an older format names no machine."""
        if not self.client:
            return False
        if self.client != socket.gethostname():
            return True
        return self.pid != os.getpid() and _pid_running(self.pid)

    def holder_gone(self) -> bool:
        """Whether the holder was a cutover process on this machine that ended without releasing the lock."""
        return self.client == socket.gethostname() and self.pid != os.getpid() and not _pid_running(self.pid)

    def expired(self, now: float) -> bool:
        """Whether the lock ran out at `now`, a time on the host's clock (HostState.now)."""
        return now >= self.expires_at

    @classmethod
    def from_json(cls, text: str) -> "LockRecord":
        """The record of a lock file; ValueError for anything that is not a valid one."""
        data = load_record(text, "lock file")
        try:
            record = cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except TypeError as exc:  # a required field is missing
            raise ValueError(f"lock file: {exc}") from None
        texts = all(isinstance(getattr(record, name), str) for name in ("owner", "action", "token", "client"))
        times = finite_number(record.acquired_at) and finite_number(record.expires_at)
        pid = isinstance(record.pid, int) and not isinstance(record.pid, bool) and 0 <= record.pid < 2**31
        if not (texts and times and pid):
            raise ValueError("lock file has a field of the wrong type")
        return record

    def describe(self, now: float) -> str:
        left = self.expires_at - now
        state = f"{left:.0f} s left" if left > 0 else f"expired {-left:.0f} s ago"
        where = f", pid {self.pid} on {self.client}" if self.client else ""
        gone = " - that process is gone" if self.holder_gone() else ""
        return f"{self.owner} ({self.action}, {state}{where}{gone})"


def _pid_running(pid: int) -> bool:
    """Whether process `pid` runs on this machine (one we may not signal runs too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def parse_lock(text: str) -> LockRecord:
    """A lock file's record; an unreadable one (any content that is not a valid lock) reads as long expired, so it
    can be taken over: an unparseable lock never blocks anyone."""
    try:
        return LockRecord.from_json(text)
    except ValueError:
        return LockRecord(owner="<unreadable lock file>", action="?", acquired_at=0.0, expires_at=0.0, client="")


@dataclass
class RankView:
    """What one rank's heartbeat says, and how old it is (None: no heartbeat file)."""

    rank: int
    heartbeat: Heartbeat | None
    age_s: float | None
    fresh: bool


@dataclass
class AckResult:
    generation: int
    serving: bool
    ranks: list[RankView]

    def summary(self) -> str:
        if not self.serving:
            return "no serving process (the next start reads control.json)"
        modes = sorted({v.heartbeat.mode_active for v in self.ranks if v.heartbeat})
        return f"all {len(self.ranks)} ranks acknowledged generation {self.generation} (active: {', '.join(modes)})"


class HostState:
    """The state files of one host, reached through `transport`, acted on by `settings.operator`."""

    def __init__(self, host: Host, transport: Transport, settings: Settings):
        self.host = host
        self.transport = transport
        self.settings = settings
        self.paths = host.paths

    def now(self) -> float:
        """The host's clock, as a UNIX time: what leases, locks and heartbeats on the host are measured by (the
        plugin compares a lease with the host's clock; an operator's clock may be off)."""
        return time.time() + self.transport.clock_offset()

    # control.json ---------------------------------------------------------------------------------------
    def read_control(self) -> ControlRecord | None:
        text = self.transport.read_text(self.paths.control)
        if text is None:
            return None
        try:
            return ControlRecord.from_json(text)
        except ValueError as exc:
            raise HostError(
                f"host {self.host.name}: {self.paths.control} is corrupt ({exc})",
                hint="run `cutover rollback`: it rewrites the control file in mode triton",
            ) from exc

    def set_mode(self, mode: str, *, reason: str, lease_s: float | None = None, release_id: str | None = None,
                 sample_rate: int | None = None, expect_generation: int | None = None,
                 stacks: list | None = None) -> ControlRecord:
        """Write a new control generation asking every rank for `mode`; returns the record written. With
        `expect_generation`, only on top of that generation: a change the caller has not seen (a rollback)
        is never overwritten. `stacks`: the only serving stacks the ranks may run `mode` on (None: any). Where the
        generation must restart (past MAX_GENERATION), only triton is written, as a reset the ranks take."""
        check_lease_s(lease_s)
        with self._writing_control() as lock:
            if expect_generation is not None:
                current = self._require_generation(expect_generation)
            else:
                try:
                    current = self.read_control()
                except HostError:
                    current = None  # a corrupt file is replaced: the new generation must still beat what ranks saw
            beats = [v.heartbeat for v in self.ranks() if v.heartbeat]
            resets = generation_resets(current, beats)
            if resets and mode != "triton":
                raise HostError(f"host {self.host.name}: the control generation must restart, which only a "
                                "rollback does", hint="run `cutover rollback`, then the command again")
            record = ControlRecord(
                mode=mode,
                generation=next_generation(current, beats),
                resets=resets,
                lease_expires_at=self.now() + lease_s if lease_s else None,
                release_id=release_id if release_id is not None else (current.release_id if current else None),
                sample_rate=sample_rate or (current.sample_rate if current else 1),
                set_by=self.settings.operator,
                set_at=self.now(),
                reason=reason,
                stacks=stacks,
            )
            record.validate()
            self._write_control(lock, record)
        return record

    def renew_lease(self, generation: int, ttl_s: float) -> ControlRecord:
        """Push the lease of the current generation forward; refused if the generation changed under us
        (someone rolled back or re-armed): the caller must stop, not overwrite their decision."""
        check_lease_s(ttl_s)
        with self._writing_control() as lock:
            current = self._require_generation(generation)
            current.lease_expires_at = self.now() + ttl_s
            self._write_control(lock, current)
        return current

    def _require_generation(self, generation: int) -> ControlRecord:
        """control.json's record if it still holds `generation`; HostError naming what it holds otherwise."""
        current = self.read_control()
        if current is None or current.generation != generation:
            found = f"{current.generation} ({current.mode}, set by {current.set_by or '?'})" if current else \
                "missing (no control file)"
            raise HostError(
                f"host {self.host.name}: control generation is {found}, not {generation}: "
                "someone else changed the mode",
                hint="stop; run `cutover status` to see who acted (journal)",
            )
        return current

    @contextlib.contextmanager
    def _writing_control(self):
        """Hold the control write lock (cutover/hostprotocol/controlwrite.py) for one read-modify-write of control.json."""
        lock = ControlWriteLock(self.transport, self.paths.control_lock, self.settings.operator, self.now)
        try:
            lock.acquire()
        except ControlLockBusy as exc:
            raise HostError(f"host {self.host.name}: {exc}: control.json was not changed",
                            hint="another cutover is writing control.json there; run the command again "
                                 "(`cutover status` and the journal show who acts on the host)") from exc
        try:
            if lock.broken:
                self.journal("control_lock_broken", previous_holder=lock.broken)
            yield lock
        finally:
            lock.release()

    def _write_control(self, lock: ControlWriteLock, record: ControlRecord) -> None:
        try:
            lock.confirm()
        except ControlLockBusy as exc:
            raise HostError(f"host {self.host.name}: {exc}",
                            hint="run the command again; `cutover status` shows what control.json asks now") from exc
        self.transport.write_atomic(self.paths.control, record.to_json())

    # journal --------------------------------------------------------------------------------------------
    def journal(self, action: str, **details) -> dict:
        entry = journal_entry(action, self.settings.operator, host=self.host.name, ts=self.now(), **details)
        self.transport.append_line(self.paths.journal, json.dumps(entry, sort_keys=True))
        return entry

    def last_journal_entry(self) -> dict | None:
        entries = self.journal_tail()
        return entries[-1] if entries else None

    def journal_tail(self) -> list[dict]:
        """The journal's last entries (a tail window), oldest first; a line that is not a JSON object is skipped."""
        text = self.transport.read_tail(self.paths.journal, JOURNAL_TAIL_BYTES)
        entries = []
        for line in (text or "").splitlines():
            try:
                entries.append(load_record(line, "journal line"))
            except ValueError:
                continue
        return entries

    # lock -----------------------------------------------------------------------------------------------
    def read_lock(self) -> LockRecord | None:
        text = self.transport.read_text(self.paths.lock)
        return None if text is None else parse_lock(text)

    def acquire_lock(self, action: str, ttl_s: float | None = None) -> LockRecord:
        """Take the host lock. Refused (LockHeldError, naming the owner) while another operator holds an
        unexpired lock, or we hold it in another cutover process that still runs; an expired lock is taken
        over and the takeover journaled; our own lock left by a process that is gone is renewed."""
        now = self.now()
        mine = LockRecord(self.settings.operator, action, now, now + (ttl_s or self.settings.lock_ttl_s))
        for _ in range(3):
            if self.transport.create_exclusive(self.paths.lock, json.dumps(asdict(mine))):
                return mine
            held_text = self.transport.read_text(self.paths.lock)
            if held_text is None:
                continue
            held = parse_lock(held_text)
            if not held.expired(now) and (held.owner != mine.owner or held.running_elsewhere()):
                expires = time.strftime('%H:%M:%S', time.localtime(held.expires_at - self.transport.clock_offset()))
                raise LockHeldError(
                    f"host {self.host.name} is locked by {held.describe(now)}",
                    hint=(f"its holder ended without releasing it: {held.owner}'s next cutover command takes it over; "
                          if held.holder_gone() else f"wait for {held.owner} to finish or ask them; ")
                    + f"the lock expires at {expires} (`cutover rollback` is never blocked)",
                )
            if held.owner == mine.owner:
                self.transport.write_atomic(self.paths.lock, json.dumps(asdict(mine)))
                return mine
            if remove_if_unchanged(self.transport, self.paths.lock, held_text):
                if self.transport.create_exclusive(self.paths.lock, json.dumps(asdict(mine))):
                    self.journal("lock_takeover", previous_owner=held.owner, previous_action=held.action,
                                 previous_expired_at=held.expires_at, new_action=action)
                    return mine
        held = self.read_lock()
        owner = held.describe(self.now()) if held else "another operator"
        raise LockHeldError(f"host {self.host.name} is locked by {owner}",
                            hint="another operator took the lock at the same moment: retry in a few seconds")

    def renew_lock(self, lock: LockRecord, ttl_s: float | None = None) -> LockRecord:
        held = self.read_lock()
        if held is None or held.token != lock.token:
            owner = held.describe(self.now()) if held else "nobody"
            raise LockHeldError(f"host {self.host.name}: our lock was lost (now held by {owner})",
                                hint="stop what you are doing on this host; run `cutover status` to see who acts on it")
        lock.expires_at = self.now() + (ttl_s or self.settings.lock_ttl_s)
        self.transport.write_atomic(self.paths.lock, json.dumps(asdict(lock)))
        return lock

    def release_lock(self, lock: LockRecord) -> None:
        """Drop the lock if it is still ours (a takeover by someone else is left alone)."""
        held = self.read_lock()
        if held is not None and held.token == lock.token:
            self.transport.remove(self.paths.lock)

    # phase ----------------------------------------------------------------------------------------------
    def read_phase(self) -> PhaseRecord:
        text = self.transport.read_text(self.paths.phase)
        if text is None:
            return PhaseRecord()
        record = PhaseRecord.parse(text)
        if record is None:
            try:
                load_record(text, "phase file")
                why = "phase file has a field of the wrong type"
            except ValueError as exc:
                why = str(exc)
            raise HostError(f"host {self.host.name}: {self.paths.phase} is corrupt ({why})",
                            hint="run `cutover rollback`, then `cutover stage` to re-establish the phase")
        return record

    def check_phase(self, target: str) -> PhaseRecord:
        """The current phase record, or PhaseError if `target` may not follow it."""
        current = self.read_phase()
        problem = phases.refusal(current.phase, target)
        if problem:
            raise PhaseError(f"host {self.host.name}: {problem}")
        return current

    def set_phase(self, target: str, *, release_id: str | None = None, reason: str = "",
                  run_id: str | None = None, force: bool = False) -> PhaseRecord:
        """Move to `target`; PhaseError if the state machine forbids it, unless `force` (the caller journals
        the override)."""
        if force:
            try:
                current = self.read_phase()
            except HostError:
                current = PhaseRecord(phase="unknown")  # a corrupt phase file is replaced
        else:
            current = self.check_phase(target)
        record = PhaseRecord(target, release_id if release_id is not None else current.release_id, self.now(),
                             self.settings.operator, reason, run_id)
        self.transport.write_atomic(self.paths.phase, record.to_text())
        return record

    # heartbeats and acknowledgement ---------------------------------------------------------------------
    def ranks(self) -> list[RankView]:
        """One view per expected rank (0 .. tp_size-1), each aged at the moment its heartbeat was read (over a
        slow link the reads of many ranks take seconds: one earlier `now` would make a dead rank look live)."""
        views = []
        for rank in range(self.host.tp_size):
            text = self.transport.read_text(self.paths.heartbeat(rank))
            now = self.now()
            heartbeat = None
            if text:
                try:
                    heartbeat = Heartbeat.from_json(text)
                except ValueError:
                    heartbeat = None
            age = now - heartbeat.written_at if heartbeat else None
            live = heartbeat is not None and heartbeat.live(self.settings.heartbeat_stale_s, now)
            views.append(RankView(rank, heartbeat, age, live))
        return views

    def serving_release(self) -> str | None:
        """The release every rank has loaded, if a serving process heartbeats on all ranks with one release."""
        return release_of(self.ranks())

    def wait_for_ack(self, generation: int, timeout_s: float | None = None, poll_s: float = 0.2,
                     mode: str | None = None) -> AckResult:
        """Wait until every rank's heartbeat shows generation_seen >= generation, and with `mode` also that mode
        active (a flip to triton is confirmed only once every rank runs it). A host with no live heartbeat at all
        has no serving process: nothing to wait for (a new process reads control.json)."""
        timeout_s = timeout_s if timeout_s is not None else self.settings.ack_timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            views = self.ranks()
            if not any(v.fresh for v in views):
                return AckResult(generation, serving=False, ranks=views)
            behind = [v for v in views if not v.fresh or v.heartbeat.generation_seen < generation
                      or (mode is not None and not v.heartbeat.acknowledges(generation, mode))]
            if not behind:
                return AckResult(generation, serving=True, ranks=views)
            self._check_generation_kept(generation)
            if time.monotonic() >= deadline:
                detail = ", ".join(
                    f"rank {v.rank}: " + ("no live heartbeat" if not v.fresh
                                          else f"at generation {v.heartbeat.generation_seen}, active "
                                               f"{v.heartbeat.mode_active}")
                    for v in behind)
                wanted = f"generation {generation}" + (f" in mode {mode}" if mode else "")
                raise AckTimeoutError(
                    f"host {self.host.name}: not every rank acknowledged {wanted} within "
                    f"{timeout_s:.0f} s ({detail})",
                    hint="check the serving process (cutover status); the lease, if any, still returns it to triton",
                )
            time.sleep(poll_s)

    def _check_generation_kept(self, generation: int) -> None:
        """HostError if control.json went back below `generation` while we waited: a writer that ignores the
        control write lock (a hand edit, an old cutover) replaced it, and the ranks that had not read ours yet
        never will."""
        control = self.read_control()
        if control is None or control.generation < generation:
            found = f"generation {control.generation} ({control.mode})" if control else "no control file"
            raise HostError(f"host {self.host.name}: control.json was replaced while waiting for generation "
                            f"{generation}: it now holds {found}",
                            hint="run the same command again; `cutover status` and the journal show who wrote it")

    # verdicts and divergence ----------------------------------------------------------------------------
    def latest_verdict(self) -> dict | None:
        """The verdict of the shadow run phase.json names (the one promote trusts) when the host has it, else
        the newest by name: run ids start with the operator's clock, so the last name need not be the last run."""
        names = [n for n in self.transport.listdir(self.paths.verdicts) if n.endswith(".json")]
        if not names:
            return None
        try:
            run_id = self.read_phase().run_id
        except HostError:
            run_id = None  # a corrupt phase file names no run
        if not run_id or f"{run_id}.json" not in names:
            run_id = names[-1][:-5]
        verdict = self.read_verdict(run_id)
        return verdict if verdict is not None else {"run_id": run_id, "outcome": "unreadable", "verdict": "unreadable"}

    def read_verdict(self, run_id: str) -> dict | None:
        """The verdict of shadow run `run_id` on this host; None when it is missing or not a JSON object."""
        try:
            return load_record(self.transport.read_text(self.paths.verdict(run_id)) or "", "verdict")
        except ValueError:
            return None

    def recent_divergence(self) -> dict[int, dict]:
        """Per rank, a summary of the last stats line with layers: worst relative L2 and max abs over layers,
        calls."""
        summaries = {}
        for rank in range(self.host.tp_size):
            record = self._last_stats_record(self.paths.stats_file(rank))
            if record is not None:
                summaries[rank] = summarize_stats(record)
        return summaries

    def _last_stats_record(self, path: str) -> StatsRecord | None:
        """The last whole stats line that holds layers (a line of a 61-layer model is ~16 KB; a truth-only line
        has none; the last line may be half-written), read from a tail window that doubles up to a cap."""
        window = STATS_TAIL_BYTES
        while True:
            text = self.transport.read_tail(path, window)
            if text is None:
                return None
            for line in reversed(text.splitlines()):
                record = StatsRecord.from_line(line)
                if record is not None and record.layers:
                    return record
            if window >= STATS_TAIL_MAX_BYTES or (self.transport.size(path) or 0) <= window:
                return None  # the cap, or the whole file was in the window already
            window *= 2


def release_of(views: list[RankView]) -> str | None:
    """The release every rank of `views` has loaded, if all heartbeat freshly with one release."""
    releases = {v.heartbeat.release_id for v in views if v.fresh}
    if len(releases) == 1 and all(v.fresh for v in views):
        return releases.pop()
    return None


def summarize_stats(record: StatsRecord) -> dict:
    """Collapse one stats record to the worst values over its layers; the divergence figures are None when no
    layer compared a call (custom or triton mode: nothing was run twice)."""
    layers = record.layers.values()
    compared = [layer for layer in layers if layer.compared > 0]
    return {
        "ts": record.ts,
        "mode": record.mode,
        "kernel": record.kernel,
        "calls": sum(layer.calls for layer in layers),
        "compared": sum(layer.compared for layer in layers),
        "rel_l2_max": max((layer.rel_l2_max for layer in compared), default=None),
        "max_abs": max((layer.max_abs for layer in compared), default=None),
        "nonfinite": sum(layer.nonfinite_custom + layer.nonfinite_stock for layer in layers),
    }


def check_lease_s(lease_s: float | None) -> None:
    """HostError unless `lease_s` is None (leaseless) or a finite duration up to MAX_LEASE_AHEAD_S."""
    if lease_s is not None and not (finite_number(lease_s) and 0 < lease_s <= MAX_LEASE_AHEAD_S):
        raise HostError(f"a lease of {lease_s!r} s is refused: it must be more than 0 and at most "
                        f"{MAX_LEASE_AHEAD_S:.0f} s (the plugin clamps any longer lease to that)",
                        hint=f"pass --lease-ttl between 1 and {MAX_LEASE_AHEAD_S:.0f}")
