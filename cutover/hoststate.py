"""A host's state files (DESIGN.md host layout), read and written through a Transport.

control.json (atomic writes, generation bumps), journal.jsonl (append only), the operator lock (owner,
expiry, takeover of an expired lock), phase.json (state machine of `cutover.phases`), heartbeats and the
acknowledgement wait, the latest verdict and the most recent divergence stats per rank.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field

from cutover import phases
from cutover.config import Host, Settings
from cutover.errors import AckTimeoutError, HostError, LockHeldError, PhaseError
from cutover.hostlayout import ControlRecord, Heartbeat, journal_entry
from cutover.transport import Transport

JOURNAL_TAIL_BYTES = 16384


@dataclass
class LockRecord:
    owner: str
    action: str
    acquired_at: float
    expires_at: float
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    pid: int = field(default_factory=os.getpid)

    def expired(self, now: float | None = None) -> bool:
        return (now or time.time()) >= self.expires_at

    def describe(self, now: float | None = None) -> str:
        left = self.expires_at - (now or time.time())
        state = f"{left:.0f} s left" if left > 0 else f"expired {-left:.0f} s ago"
        return f"{self.owner} ({self.action}, {state})"


@dataclass
class PhaseRecord:
    phase: str = "idle"
    release_id: str | None = None
    updated_at: float = 0.0
    set_by: str = ""
    reason: str = ""
    run_id: str | None = None


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

    # control.json ---------------------------------------------------------------------------------------
    def read_control(self) -> ControlRecord | None:
        text = self.transport.read_text(self.paths.control)
        if text is None:
            return None
        try:
            return ControlRecord.from_json(text)
        except (ValueError, TypeError) as exc:
            raise HostError(
                f"host {self.host.name}: {self.paths.control} is corrupt ({exc})",
                hint="run `cutover rollback`: it rewrites the control file in mode triton",
            ) from exc

    def set_mode(self, mode: str, *, reason: str, lease_s: float | None = None, release_id: str | None = None,
                 sample_rate: int | None = None) -> ControlRecord:
        """Write a new control generation asking every rank for `mode`; returns the record written."""
        try:
            current = self.read_control()
        except HostError:
            current = None  # a corrupt file is replaced: the new generation must still beat what ranks saw
        previous_gen = current.generation if current else self._highest_generation_seen()
        record = ControlRecord(
            mode=mode,
            generation=previous_gen + 1,
            lease_expires_at=time.time() + lease_s if lease_s else None,
            release_id=release_id if release_id is not None else (current.release_id if current else None),
            sample_rate=sample_rate or (current.sample_rate if current else 1),
            set_by=self.settings.operator,
            set_at=time.time(),
            reason=reason,
        )
        record.validate()
        self.transport.write_atomic(self.paths.control, record.to_json())
        return record

    def renew_lease(self, generation: int, ttl_s: float) -> ControlRecord:
        """Push the lease of the current generation forward; refused if the generation changed under us
        (someone rolled back or re-armed): the caller must stop, not overwrite their decision."""
        current = self.read_control()
        if current is None or current.generation != generation:
            found = current.generation if current else "no control file"
            raise HostError(
                f"host {self.host.name}: control generation is {found}, not {generation}: "
                "someone else changed the mode",
                hint="stop renewing; run `cutover status` to see who acted (journal)",
            )
        current.lease_expires_at = time.time() + ttl_s
        self.transport.write_atomic(self.paths.control, current.to_json())
        return current

    def _highest_generation_seen(self) -> int:
        seen = [v.heartbeat.generation_seen for v in self.ranks() if v.heartbeat]
        return max(seen, default=0)

    # journal --------------------------------------------------------------------------------------------
    def journal(self, action: str, **details) -> dict:
        entry = journal_entry(action, self.settings.operator, host=self.host.name, **details)
        self.transport.append_line(self.paths.journal, json.dumps(entry, sort_keys=True))
        return entry

    def last_journal_entry(self) -> dict | None:
        text = self.transport.read_tail(self.paths.journal, JOURNAL_TAIL_BYTES)
        for line in reversed((text or "").splitlines()):
            try:
                return json.loads(line)
            except ValueError:
                continue
        return None

    # lock -----------------------------------------------------------------------------------------------
    def read_lock(self) -> LockRecord | None:
        text = self.transport.read_text(self.paths.lock)
        if text is None:
            return None
        try:
            data = json.loads(text)
            return LockRecord(**{k: data[k] for k in LockRecord.__dataclass_fields__ if k in data})
        except (ValueError, TypeError):
            return LockRecord(owner="<unreadable lock file>", action="?", acquired_at=0.0, expires_at=0.0)

    def acquire_lock(self, action: str, ttl_s: float | None = None) -> LockRecord:
        """Take the host lock. Refused (LockHeldError, naming the owner) while another operator holds an
        unexpired lock; an expired lock is taken over and the takeover journaled; our own lock is renewed."""
        now = time.time()
        mine = LockRecord(self.settings.operator, action, now, now + (ttl_s or self.settings.lock_ttl_s))
        for _ in range(3):
            if self.transport.create_exclusive(self.paths.lock, json.dumps(asdict(mine))):
                return mine
            held = self.read_lock()
            if held is None:
                continue
            if held.owner == mine.owner:
                self.transport.write_atomic(self.paths.lock, json.dumps(asdict(mine)))
                return mine
            if not held.expired(now):
                raise LockHeldError(
                    f"host {self.host.name} is locked by {held.describe(now)}",
                    hint=f"wait for {held.owner} to finish or ask them; the lock expires at "
                    f"{time.strftime('%H:%M:%S', time.localtime(held.expires_at))} "
                    "(`cutover rollback` is never blocked)",
                )
            stale = f"{self.paths.lock}.stale-{uuid.uuid4().hex[:8]}"
            if self.transport.rename_if_exists(self.paths.lock, stale):
                self.transport.remove(stale)
                if self.transport.create_exclusive(self.paths.lock, json.dumps(asdict(mine))):
                    self.journal("lock_takeover", previous_owner=held.owner, previous_action=held.action,
                                 previous_expired_at=held.expires_at, new_action=action)
                    return mine
        held = self.read_lock()
        raise LockHeldError(f"host {self.host.name} is locked by {held.describe() if held else 'another operator'}",
                            hint="another operator took the lock at the same moment: retry in a few seconds")

    def renew_lock(self, lock: LockRecord, ttl_s: float | None = None) -> LockRecord:
        held = self.read_lock()
        if held is None or held.token != lock.token:
            owner = held.describe() if held else "nobody"
            raise LockHeldError(f"host {self.host.name}: our lock was lost (now held by {owner})",
                                hint="stop what you are doing on this host; run `cutover status` to see who acts on it")
        lock.expires_at = time.time() + (ttl_s or self.settings.lock_ttl_s)
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
        try:
            data = json.loads(text)
            return PhaseRecord(**{k: data[k] for k in PhaseRecord.__dataclass_fields__ if k in data})
        except (ValueError, TypeError) as exc:
            raise HostError(f"host {self.host.name}: {self.paths.phase} is corrupt ({exc})",
                            hint="run `cutover rollback`, then `cutover stage` to re-establish the phase") from exc

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
        record = PhaseRecord(target, release_id if release_id is not None else current.release_id, time.time(),
                             self.settings.operator, reason, run_id)
        self.transport.write_atomic(self.paths.phase, json.dumps(asdict(record), sort_keys=True))
        return record

    # heartbeats and acknowledgement ---------------------------------------------------------------------
    def ranks(self, now: float | None = None) -> list[RankView]:
        """One view per expected rank (0 .. tp_size-1)."""
        now = now or time.time()
        views = []
        for rank in range(self.host.tp_size):
            text = self.transport.read_text(self.paths.heartbeat(rank))
            heartbeat = None
            if text:
                try:
                    heartbeat = Heartbeat.from_json(text)
                except (ValueError, TypeError):
                    heartbeat = None
            age = now - heartbeat.written_at if heartbeat else None
            live = (age is not None and age <= self.settings.heartbeat_stale_s
                    and not heartbeat.counters.get("stopped"))  # a clean exit's final heartbeat says stopped
            views.append(RankView(rank, heartbeat, age, live))
        return views

    def serving_release(self) -> str | None:
        """The release every rank has loaded, if a serving process heartbeats on all ranks with one release."""
        views = self.ranks()
        releases = {v.heartbeat.release_id for v in views if v.fresh}
        if len(releases) == 1 and all(v.fresh for v in views):
            return releases.pop()
        return None

    def wait_for_ack(self, generation: int, timeout_s: float | None = None, poll_s: float = 0.2) -> AckResult:
        """Wait until every rank's heartbeat shows generation_seen >= generation. A host with no live
        heartbeat at all has no serving process: nothing to wait for (a new process reads control.json)."""
        timeout_s = timeout_s if timeout_s is not None else self.settings.ack_timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            views = self.ranks()
            if not any(v.fresh for v in views):
                return AckResult(generation, serving=False, ranks=views)
            behind = [v for v in views if not v.fresh or v.heartbeat.generation_seen < generation]
            if not behind:
                return AckResult(generation, serving=True, ranks=views)
            if time.monotonic() >= deadline:
                detail = ", ".join(
                    f"rank {v.rank}: " + ("no live heartbeat" if not v.fresh
                                          else f"at generation {v.heartbeat.generation_seen}")
                    for v in behind)
                raise AckTimeoutError(
                    f"host {self.host.name}: not every rank acknowledged generation {generation} within "
                    f"{timeout_s:.0f} s ({detail})",
                    hint="check the serving process (cutover status); the lease, if any, still returns it to triton",
                )
            time.sleep(poll_s)

    # verdicts and divergence ----------------------------------------------------------------------------
    def latest_verdict(self) -> dict | None:
        names = [n for n in self.transport.listdir(self.paths.verdicts) if n.endswith(".json")]
        if not names:
            return None
        text = self.transport.read_text(f"{self.paths.verdicts}/{names[-1]}")
        try:
            verdict = json.loads(text or "")
        except ValueError:
            return {"run_id": names[-1][:-5], "verdict": "unreadable"}
        return verdict if isinstance(verdict, dict) else None

    def recent_divergence(self) -> dict[int, dict]:
        """Per rank, a summary of the last stats line: worst relative L2 and max abs over layers, calls."""
        summaries = {}
        for rank in range(self.host.tp_size):
            text = self.transport.read_tail(self.paths.stats_file(rank), JOURNAL_TAIL_BYTES)
            lines = [line for line in (text or "").splitlines() if line.strip()]
            if not lines:
                continue
            try:
                record = json.loads(lines[-1])
            except ValueError:
                continue
            summaries[rank] = summarize_stats(record)
        return summaries


def summarize_stats(record: dict) -> dict:
    """Collapse one stats record (architecture.md) to the worst values over its layers."""
    layers = (record.get("layers") or {}).values()
    return {
        "ts": record.get("ts"),
        "mode": record.get("mode"),
        "kernel": record.get("kernel"),
        "calls": sum(layer.get("calls", 0) for layer in layers),
        "compared": sum(layer.get("compared", 0) for layer in layers),
        "rel_l2_max": max((layer.get("rel_l2_max", 0.0) for layer in layers), default=None),
        "max_abs": max((layer.get("max_abs", 0.0) for layer in layers), default=None),
        "nonfinite": sum(layer.get("nonfinite_custom", 0) + layer.get("nonfinite_stock", 0) for layer in layers),
    }
