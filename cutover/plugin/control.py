"""The per-rank control protocol: read control.json, decide the mode, contain crashes, heartbeat.

Rules (docs/plugin.md, "Control protocol"):

* control.json is re-read at every poll. A strictly newer generation is applied (mode, sample rate); the same
  generation only moves the lease (renewal); an older one is ignored.
* Lease expiry forces triton. So do a missing or corrupt control file (any bytes, any size, any nesting) and
  anything else that keeps the rank from deciding. Each such forced fallback sticks for that generation:
  re-arming needs a newer generation (an explicit operator action), so a lease that comes back to life, or a
  file that reappears, never silently re-arms a rank.
* A lease further ahead than MAX_LEASE_AHEAD_S is clamped to that bound from the moment the rank first reads
  it, so a lease that is never renewed ends within MAX_LEASE_AHEAD_S whatever it says.
* Custom runs only with the fields a promote writes: the release this process loaded, and who set it when
  (set_by, set_at). Shadow runs only under a lease. Anything less is triton, with the reason.
* A triton record with `resets` re-bases the generation counter (a rollback past MAX_GENERATION): it is
  taken even below the generation seen. Only triton can reset, so a reset never arms anything.
* Each poll decides (the lease check included) and writes the heartbeat whatever control.json holds.
* Crash containment: arming shadow/custom writes runtime/armed-rank-<r>.json first; going back to triton
  and an orderly stop (PluginRuntime.stop; not interpreter exit alone) remove it. A process that starts and
  finds the marker comes up in triton, says why in the heartbeat (reason + counters["unclean_restart"] = 1),
  and refuses any generation up to the armed one. A newer generation re-arms (the operator asked again after
  the crash); deleting the marker by hand has the same effect on the next start.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cutover.hostprotocol.hostlayout import (MAX_GENERATION, MAX_RECORD_BYTES, ControlRecord, HostPaths,
                                             atomic_write_text, generation_ok, lease_bound, read_json)
from cutover.servingstack import describe, stack_key

log = logging.getLogger("cutover.plugin")

POLL_INTERVAL_S = 0.2


@dataclass
class Decision:
    mode: str
    sample_rate: int
    reason: str


class ControlState:
    """What a rank runs, derived from successive control-file reads (no I/O here)."""

    def __init__(self, refuse_up_to_generation: int | None = None, unclean_reason: str = ""):
        self.generation_seen = -1
        self.applied: ControlRecord | None = None
        self.lease_expires_at: float | None = None
        self.forced_triton_generation: int | None = None  # a fallback sticks for this generation
        self.forced_reason = ""
        self.lease_expiries = 0  # leases that expired while this process ran a non-triton mode
        self.refuse_up_to = refuse_up_to_generation
        self.unclean_reason = unclean_reason
        self.unavailable = ""  # set when this process cannot run the custom path at all
        self.release_id: str | None = None  # the release this process loaded (None: none)
        self.stack: dict = {}  # the serving stack this process runs (cutover.servingstack)
        self._ignored_generation: int | None = None
        self._lease_asked: float | None = None  # the lease control.json names; lease_expires_at is it clamped

    def observe(self, record: ControlRecord | None, problem: str, now: float) -> Decision:
        """Fold one read of control.json (``record``, or None with ``problem``) into a decision. Never raises:
        anything unexpected is a forced triton with the reason."""
        try:
            return self._checked(self._observe(record, problem, now))
        except Exception as exc:  # noqa: BLE001 - the answer is triton, never an exception
            return self.fail_safe(f"control state could not be evaluated ({type(exc).__name__}: {exc})")

    def fail_safe(self, reason: str) -> Decision:
        """Triton for this generation, with `reason` (sticks until a newer generation arrives)."""
        return self._force(f"{reason}; running triton until a newer generation arrives")

    def _checked(self, decision: Decision) -> Decision:
        """`decision`, or triton where this process may not run its mode."""
        if decision.mode == "triton":
            return decision
        if self.unavailable:
            return Decision("triton", 1, f"custom path unavailable: {self.unavailable}")
        missing = self._missing_fields(decision.mode)
        if missing:
            return Decision("triton", 1, f"control.json asks for {decision.mode} without {missing}: running triton "
                                         "(only `cutover shadow` and `cutover promote` arm a rank)")
        asked_for = self.applied.release_id
        if asked_for != self.release_id:  # the kernel it would run is not the one judged
            return Decision("triton", 1, f"control.json asks for {decision.mode} with release {asked_for}, but "
                                         f"this process loaded {self.release_id or 'no release'}: restart serving "
                                         f"to load it (`cutover stage --yes`)")
        allowed = self.applied.stacks if self.applied else None
        if allowed is not None and stack_key(self.stack) not in map(stack_key, allowed):  # e.g. SGLang upgraded
            return Decision("triton", 1, f"control.json allows {decision.mode} only on the serving stack promote "
                                         f"approved ({' | '.join(map(describe, allowed))}); this process runs "
                                         f"{describe(self.stack)}: shadow and promote again on it")
        return decision

    def _missing_fields(self, mode: str) -> str:
        """The fields a shadow or promote writes that the applied record lacks ("" when it has them)."""
        applied = self.applied
        missing = [name for name, present in (("a release_id", bool(applied.release_id)),
                                              ("set_by", bool(applied.set_by)), ("set_at", applied.set_at > 0))
                   if not present]
        if mode == "shadow" and applied.lease_expires_at is None:
            missing.append("a lease")
        return ", ".join(missing)

    def _observe(self, record: ControlRecord | None, problem: str, now: float) -> Decision:
        if record is None:
            return self.fail_safe(problem)
        if record.generation > self.generation_seen or (record.resets and record.generation != self.generation_seen):
            if record.resets and self.refuse_up_to is not None:
                self.refuse_up_to = min(self.refuse_up_to, record.generation)
            self.generation_seen = record.generation
            self.applied = record
            self.forced_triton_generation = None
            self.forced_reason = ""
            self._lease_asked = None
        elif record.generation < self.generation_seen and record.generation != self._ignored_generation:
            self._ignored_generation = record.generation  # log once, not at every poll
            log.warning("cutover: control.json generation %s is older than %s; ignored",
                        record.generation, self.generation_seen)
        if record.generation == self.generation_seen:
            self._take_lease(record.lease_expires_at, now)  # renewal: same generation, later lease
        if self.forced_triton_generation == self.generation_seen:
            return Decision("triton", 1, self.forced_reason)
        applied = self.applied
        if applied.mode == "triton":
            return Decision("triton", applied.sample_rate, "")
        if self.refuse_up_to is not None and applied.generation <= self.refuse_up_to:
            return Decision("triton", 1, self.unclean_reason)
        if self.lease_expires_at is not None and now >= self.lease_expires_at:
            self.lease_expiries += 1  # once per generation: the forced fallback answers the next polls
            return self._force(f"lease of generation {applied.generation} ({applied.mode}) expired at "
                               f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(self.lease_expires_at))}; "
                               "running triton until a newer generation arrives")
        return Decision(applied.mode, applied.sample_rate, "")

    def _take_lease(self, asked: float | None, now: float) -> None:
        """Follow the lease control.json names, clamped to lease_bound(now) when it first reads a new value."""
        if asked == self._lease_asked and (asked is None) == (self.lease_expires_at is None):
            return
        self._lease_asked = asked
        self.lease_expires_at = None if asked is None else min(asked, lease_bound(now))
        if asked is not None and asked > self.lease_expires_at:
            log.warning("cutover: control.json lease ends %.0f s ahead; clamped to %.0f s",
                        asked - now, self.lease_expires_at - now)

    def _force(self, reason: str) -> Decision:
        self.forced_triton_generation = self.generation_seen
        self.forced_reason = reason
        return Decision("triton", 1, reason)


def read_control(path: str) -> tuple[ControlRecord | None, str]:
    """(record, "") or (None, why it cannot be used). Never raises."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        return None, f"control file {path} is missing"
    except OSError as exc:
        return None, f"control file {path} unreadable: {exc}"
    try:
        return ControlRecord.from_json(data), ""
    except Exception as exc:  # noqa: BLE001 - any content is a corrupt file, never an exception
        return None, f"control file {path} is corrupt: {exc}"


class ArmedMarker:
    """runtime/armed-rank-<r>.json: present while this rank runs shadow or custom."""

    def __init__(self, paths: HostPaths, rank: int):
        self.path = paths.armed_marker(rank)

    def read(self) -> dict | None:
        """The marker's record; None when there is none; {} when it is unreadable (still an unclean exit)."""
        return read_json(self.path)

    def arm(self, mode: str, generation: int) -> None:
        atomic_write_text(self.path, json.dumps({"pid": os.getpid(), "mode": mode, "generation": generation,
                                                 "armed_at": time.time()}, sort_keys=True))

    def disarm(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def unclean_exit_state(marker: dict | None) -> ControlState:
    """The starting ControlState: normal, or refusing up to the generation a crashed process had armed."""
    if marker is None:
        return ControlState()
    generation = marker.get("generation")
    refuse = generation if generation_ok(generation) else MAX_GENERATION
    reason = (f"previous process (pid {marker.get('pid', '?')}) exited uncleanly while armed in "
              f"{marker.get('mode', '?')} at generation {generation}; staying on triton until a newer "
              "generation is written")
    return ControlState(refuse_up_to_generation=refuse, unclean_reason=reason)


class ControlLoop:
    """Daemon thread: poll, apply, drain, heartbeat. ``apply(mode, sample_rate, new_generation)`` switches
    the device; ``tick(decision, now)`` drains stats and writes the heartbeat; ``prepare_thread()`` runs in
    the thread first (a failure there leaves the rank on Triton, logged, with no heartbeat)."""

    def __init__(self, paths: HostPaths, rank: int, apply: Callable[[Decision, bool], None],
                 tick: Callable[[ControlState, Decision], None], poll_s: float = POLL_INTERVAL_S,
                 prepare_thread: Callable[[], None] = lambda: None):
        self.paths = paths
        self.rank = rank
        self.marker = ArmedMarker(paths, rank)
        self.startup_marker = self.marker.read()
        self.state = unclean_exit_state(self.startup_marker)
        self._apply = apply
        self._tick = tick
        self._prepare_thread = prepare_thread  # run in the control thread before its first poll
        self.poll_s = poll_s
        self.mode_active = "triton"
        self.sample_rate = 1
        self.applied_generation = -1
        self._owns_marker = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self, now: float | None = None) -> Decision:
        """Read, decide, switch, heartbeat. Whatever control.json holds, the decision (lease check included) is
        made and the heartbeat written; a switch that fails is retried at the next poll."""
        record, problem = read_control(self.paths.control)
        decision = self.state.observe(record, problem, time.time() if now is None else now)
        try:
            new_generation = self.state.generation_seen != self.applied_generation
            if new_generation or decision.mode != self.mode_active or decision.sample_rate != self.sample_rate:
                self._switch(decision, new_generation)
        finally:
            self._tick(self.state, decision)
        return decision

    def _switch(self, decision: Decision, new_generation: bool) -> None:
        if decision.mode != "triton":
            self.marker.arm(decision.mode, self.state.generation_seen)
            self._owns_marker = True
        self._apply(decision, new_generation)
        self.mode_active = decision.mode
        self.sample_rate = decision.sample_rate
        self.applied_generation = self.state.generation_seen
        refused = self.state.refuse_up_to is not None and self.state.generation_seen <= self.state.refuse_up_to
        if decision.mode == "triton" and not refused:
            self.marker.disarm()  # back on triton by request (or past the crashed generation)
            self._owns_marker = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"cutover-control-{self.rank}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._prepare_thread()
        except Exception as exc:  # noqa: BLE001 - the thread must not touch the device unprepared
            log.error("cutover: rank %s: control thread not started, the rank stays on Triton without "
                      "heartbeats: %s: %s", self.rank, type(exc).__name__, exc)
            return
        last_failure = ""
        while not self._stop.is_set():
            try:
                self.poll_once()
                last_failure = ""
            except Exception as exc:  # noqa: BLE001 - keep polling; log each new failure once
                failure = f"{type(exc).__name__}: {exc}"
                if failure != last_failure:
                    log.warning("cutover: control poll of rank %s failed: %s", self.rank, failure)
                last_failure = failure
            self._stop.wait(self.poll_s)

    def stop(self, clean: bool = True) -> None:
        """Stop polling; on a clean stop return the device to triton and remove the armed marker."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if clean and self.mode_active != "triton":
            self._apply(Decision("triton", 1, "process exiting"), False)
            self.mode_active = "triton"
        if clean and self._owns_marker:
            self.marker.disarm()  # a marker left by a crashed predecessor stays: its evidence is not ours
