"""`cutover shadow`: run Triton and the custom kernel side by side under a lease, gate the divergence live.

    lock every target -> preflight (one staged release, every rank heartbeating with it) -> phase shadowing
    -> arm shadow (new generation, lease, ack from every rank) -> loop: renew lease + lock, tail stats,
    watch heartbeats, probe the server for the promote baseline, evaluate the gates
    -> end: back to Triton with ack, final gates, verdict on every host + locally, report.

A breach rolls every target back at once through `cutover.rollback`; Ctrl-C returns them to Triton and
records an aborted run. If this process dies, the lease returns every rank to Triton by itself.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import requests

from checks.gates import RankObservation, StatsSummary, Verdict, compared_progress, evaluate_shadow, gauges
from checks.prometheus import GateWatch, with_results
from cutover import notify
from checks.policy import Policy, shadow_thresholds
from cutover.config import Host, Inventory, Settings
from cutover.errors import ConfigError, CutoverError, GateFailedError, HostError, LockHeldError, PhaseError
from cutover.hostprotocol.phases import PhaseRecord
from cutover.hoststate import LockRecord
from cutover.rollback import rollback_hosts
from cutover.servingstack import distinct_stacks
from cutover.workflow.load import LoadDriver, LoadSpec
from cutover.workflow.observe import (
    HostLink, RankTracker, StatsTail, locked_links, trackers_from_ack, with_heartbeat_counters,
)
from cutover.workflow.probes import ServerSample, baseline, probe
from cutover.workflow.report import ReportFiles, write_report
from cutover.workflow.runstore import RunStore, run_meta
from cutover.workflow.verdict import VerdictRecord, first_to_stop, new_run_id, operator_rollbacks

DEFAULT_LEASE_TTL_S = 30.0


@dataclass
class ShadowOptions:
    duration_s: float
    policy: Policy
    sample_rate: int = 1
    lease_ttl_s: float = DEFAULT_LEASE_TTL_S
    poll_s: float = 1.0
    load: LoadSpec | None = None
    reports_dir: str | None = None

    @property
    def lock_ttl_s(self) -> float:
        """Long enough to survive a few missed renewals, short enough that a killed CLI frees the hosts soon."""
        return max(60.0, 4 * self.lease_ttl_s)


@dataclass
class Progress:
    """A snapshot for the live display."""

    run_id: str
    elapsed_s: float
    duration_s: float
    totals: dict
    ranks: list[RankObservation]
    host_errors: dict[str, str]
    load: dict | None
    gauges: list[tuple[str, float | None, float]] = field(default_factory=list)  # gate, observed, threshold
    compared: dict[str, tuple[int, int]] = field(default_factory=dict)  # host -> slowest rank-layer, share needed
    leases_left_s: dict[str, float] = field(default_factory=dict)  # host -> seconds until its lease would lapse


@dataclass
class ShadowOutcome:
    record: VerdictRecord
    report: ReportFiles
    # host -> the error of its ordinary return to Triton, for hosts the rollback path returned instead: their
    # phase is rolled_back, so promote refuses them although the run passed
    rolled_back: dict[str, str] = field(default_factory=dict)
    # host -> the phase someone else gave it at the end of the run (an on-call `cutover rollback`, say): promote
    # refuses it although the run passed
    moved: dict[str, str] = field(default_factory=dict)

    @property
    def unpromotable(self) -> list[str]:
        """The hosts that passed but cannot be promoted from this run."""
        return [*self.rolled_back, *self.moved]

    @property
    def warnings(self) -> list[str]:
        """The verdict's reasons that say why, one per host."""
        return rollback_path_notes(self.rolled_back) + phase_moved_notes(self.moved)


def rollback_path_notes(returned: dict[str, str]) -> list[str]:
    """One reason line per host that returned to Triton only through the rollback path (host -> the error of
    its ordinary return)."""
    return [
        f"rollback path: host {name}: its ordinary return to Triton failed ({error}); the rollback path confirmed "
        "Triton, so its phase is rolled_back and `cutover promote` refuses it until a new `cutover shadow` run "
        "passes there"
        for name, error in returned.items()
    ]


def _phase_line(phase: PhaseRecord) -> str:
    """'rolled_back (set by bob@ops: p99 alarm)'."""
    return f"{phase.phase} (set by {phase.set_by or 'someone'}: {phase.reason or 'no reason given'})"


def phase_moved_notes(moved: dict[str, str]) -> list[str]:
    """One reason line per host whose phase someone else moved off shadowing before the run's end (host -> its
    phase now, with who set it and why)."""
    return [
        f"phase moved: host {name}: its phase became {phase} before the run ended, so the run did not record "
        "shadow_passed there and `cutover promote` refuses it until a new `cutover shadow` run passes there"
        for name, phase in moved.items()
    ]


@dataclass
class _HostRun:
    link: HostLink
    generation: int
    trackers: list[RankTracker]
    tail: StatsTail
    samples: list[ServerSample] = field(default_factory=list)
    renewed_at: float = field(default_factory=time.monotonic)  # the last successful lease renewal (or the arm)
    renew_error: str = ""  # why the renewals since renewed_at failed (the last error); empty while they succeed


class _Breach(Exception):
    """A gate failed, or the run lost control of a host: stop and roll back."""

    def __init__(self, reasons: list[str]):
        super().__init__("; ".join(reasons))
        self.reasons = reasons


def run_shadow(
    inventory: Inventory,
    hosts: list[Host],
    settings: Settings,
    options: ShadowOptions,
    on_progress: Callable[[Progress], None] | None = None,
) -> ShadowOutcome:
    """Shadow `hosts` for `options.duration_s`; returns the passed outcome or raises GateFailedError
    (after everything is recorded and every host is back on Triton)."""
    minimum = options.policy.shadow.min_duration_s
    if options.duration_s < minimum:
        raise ConfigError(
            f"a {options.duration_s:g} s shadow can never pass: policy {options.policy.source} requires at least "
            f"{minimum:g} s (shadow.min_duration_s)",
            hint="shadow longer, or pass a policy with a smaller min_duration_s "
            "(checks/policies/sandbox.yml for the sandbox)",
        )
    with locked_links(hosts, settings, "shadow", options.lock_ttl_s) as (links, locks):
        release_id = _preflight(links)
        run = _ShadowRun(inventory, links, locks, settings, options, release_id, on_progress)
        return run.execute()


def _preflight(links: list[HostLink]) -> str:
    """The one release staged and loaded on every target; refuses anything else, naming host and fix."""
    releases: dict[str, str] = {}
    for link in links:
        phase = link.call(lambda st: st.check_phase("shadowing"))
        if not phase.release_id:
            raise PhaseError(f"host {link.name}: no release is staged", hint="run `cutover stage` first")
        views = link.call(lambda st: st.ranks())
        silent = [view.rank for view in views if not view.fresh]
        if silent:
            raise HostError(
                f"host {link.name}: rank(s) {', '.join(map(str, silent))} have no live heartbeat: the serving "
                f"process is down or the plugin is not loaded",
                hint="check `cutover status`; start the server (or `cutover stage --yes` restarts it)",
            )
        loaded = sorted({view.heartbeat.release_id or "none" for view in views})
        if loaded != [phase.release_id]:
            raise PhaseError(
                f"host {link.name}: release {phase.release_id} is staged but the ranks run {', '.join(loaded)}",
                hint="restart the serving process so it loads the staged release (`cutover stage --yes`)",
            )
        releases[link.name] = phase.release_id
    if len(set(releases.values())) > 1:
        listing = ", ".join(f"{name}: {release}" for name, release in releases.items())
        raise PhaseError(
            f"the targets have different releases staged ({listing})",
            hint="stage the same release on every target, or shadow them separately with --limit",
        )
    return next(iter(releases.values()))


@contextlib.contextmanager
def sigint_deferred():
    """Let the cleanup that returns hosts to Triton finish even if Ctrl-C is pressed again."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _ShadowRun:
    def __init__(self, inventory, links, locks, settings, options, release_id, on_progress):
        self.inventory: Inventory = inventory
        self.links: list[HostLink] = links
        self.locks: dict[str, LockRecord] = locks
        self.settings: Settings = settings
        self.options: ShadowOptions = options
        self.policy = options.policy
        self.release_id: str = release_id
        self.on_progress = on_progress
        self.run_id = new_run_id()
        self.store = RunStore(options.reports_dir, self.run_id)
        self.entered: list[HostLink] = []  # phase moved to shadowing: rolled back and recorded on failure
        self.runs: list[_HostRun] = []
        self.clock_offsets: dict[str, float] = {}  # host -> its clock minus ours (run.json: the report's time axis)
        self.confirmed_by_rollback: set[str] = set()  # hosts the rollback path confirmed on Triton
        self.unconfirmed: bool = False  # a rollback could not confirm Triton somewhere (the lease does it)
        self.returned_by_rollback: dict[str, str] = {}  # end of run: host -> why its ordinary return failed
        self.moved: dict[str, str] = {}  # end of run: host -> the phase someone else gave it (`_phases_moved`)
        self.return_failed: set[str] = set()  # end of run: hosts whose ordinary return to Triton failed
        self.summary = StatsSummary(
            generations={}, truth_k=self.policy.shadow.truth_anchor_k, truth_floor=self.policy.shadow.truth_anchor_floor
        )
        self.started = time.time()
        self.started_mono = time.monotonic()
        self.session = requests.Session()
        self.load: LoadDriver | None = None
        self.ended_by_operator = False  # another operator's rollback ended the run (_causes)
        self.prometheus_gates = GateWatch(self.policy.prometheus, "shadow")

    # --- lifecycle ------------------------------------------------------------------------------------
    def execute(self) -> ShadowOutcome:
        try:
            self._start()
            self._arm()
            if self.options.load:
                self.load = LoadDriver(self.options.load, [link.host for link in self.links]).start()
            self._loop()
        except _Breach as breach:
            reasons = self._causes() + breach.reasons + self._renewal_failures()
            with sigint_deferred():
                return self._finish("failed", reasons, rolled_back=self._roll_back(reasons))
        except KeyboardInterrupt:
            reasons = ["stopped by the operator (Ctrl-C) before the end of the run"] + self._renewal_failures()
            with sigint_deferred():
                return self._finish("aborted", reasons)
        except BaseException as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            with sigint_deferred():
                self._roll_back([f"shadow run interrupted: {reason}"])
                self._record("failed", [f"shadow run interrupted: {reason}"] + self._renewal_failures(), None)
            raise
        with sigint_deferred():
            return self._finish_normally()

    def _start(self) -> None:
        """Phase shadowing and journal shadow_start, host by host; a host whose phase moved has entered the run
        (a failure on a later host rolls back and records exactly the hosts that entered)."""
        for link in self.links:
            link.call(
                lambda st: st.set_phase(
                    "shadowing", release_id=self.release_id, run_id=self.run_id, reason=f"shadow run {self.run_id}"
                )
            )
            self.entered.append(link)
            link.call(
                lambda st: st.journal(
                    "shadow_start",
                    run_id=self.run_id,
                    release_id=self.release_id,
                    duration_s=self.options.duration_s,
                    policy=self.policy.source,
                )
            )

    def _arm(self) -> None:
        """Arm shadow with a lease on every host and wait for every rank; record where we armed."""
        self.store.save_run(self._meta(kernels=[]))
        self.prometheus_gates.record_before()  # a relative PromQL gate's value before the flip
        for link in self.links:
            tail = StatsTail(link.host)
            link.call(tail.skip_existing)  # before the flip: every record of the new generation lands after
            control = link.call(
                lambda st: st.set_mode(
                    "shadow",
                    reason=f"shadow run {self.run_id}",
                    lease_s=self.options.lease_ttl_s,
                    release_id=self.release_id,
                    sample_rate=self.options.sample_rate,
                )
            )
            self.runs.append(_HostRun(link, control.generation, [], tail))
            self.summary.generations[link.name] = control.generation
            self.clock_offsets[link.name] = link.call(lambda st: st.transport.clock_offset())  # measured to arm
            self.store.save_run(self._meta(kernels=[]))
        for run in self.runs:
            ack = run.link.call(lambda st: st.wait_for_ack(run.generation))
            if not ack.serving:
                raise HostError(
                    f"host {run.link.name}: the serving process stopped heartbeating while shadow was armed"
                )
            run.trackers = trackers_from_ack(run.link.name, ack.ranks)
            run.link.call(
                lambda st: st.journal(
                    "shadow_armed", run_id=self.run_id, generation=run.generation, lease_ttl_s=self.options.lease_ttl_s
                )
            )
        self.store.save_run(self._meta(kernels=sorted({t.kernel for r in self.runs for t in r.trackers})))
        notify.send(self.settings.notify, "shadow_start", f"shadow run {self.run_id} of release {self.release_id} "
                    f"armed on {', '.join(r.link.name for r in self.runs)} for {self.options.duration_s:g} s",
                    operator=self.settings.operator, run_id=self.run_id, release_id=self.release_id,
                    hosts=[r.link.name for r in self.runs])

    def _meta(self, kernels: list[str]) -> dict:
        return run_meta(
            self.run_id,
            self.release_id,
            self.summary.generations,
            self.started,
            self.policy,
            self.options.sample_rate,
            kernels,
            self.clock_offsets,
            [link.name for link in self.links if link.host.serving_kind == "sandbox"],
        )

    def _loop(self) -> None:
        last_probe = 0.0
        while True:
            elapsed = time.monotonic() - self.started_mono
            probe_due = time.monotonic() - last_probe >= self.policy.promote.probe_interval_s
            for run in self.runs:
                self._tick_host(run, probe_due)
            last_probe = time.monotonic() if probe_due else last_probe
            verdict = evaluate_shadow(self.policy.shadow, self.summary, self._observations(), elapsed, final=False)
            if probe_due:
                verdict = with_results(verdict, self.prometheus_gates.check())
            self._report_progress(elapsed)
            if not verdict.passed:
                raise _Breach(verdict.reasons())
            if elapsed >= self.options.duration_s:
                return
            time.sleep(min(self.options.poll_s, max(0.0, self.options.duration_s - elapsed)) or 0.05)

    # --- per tick -------------------------------------------------------------------------------------
    def _tick_host(self, run: _HostRun, probe_due: bool) -> None:
        if time.monotonic() - run.renewed_at >= self.options.lease_ttl_s / 3:
            self._renew(run)
        try:
            views = run.link.call(lambda st: st.ranks())
            for tracker, view in zip(run.trackers, views):
                tracker.update(view)
            self._ingest(run)
        except HostError:
            pass  # its ranks age on our clock (silence gate); unread stats are read later, or fail the volume gate
        if probe_due:
            run.samples.append(with_heartbeat_counters(probe(run.link.host, self.session), run.trackers))

    def _renew(self, run: _HostRun) -> None:
        name = run.link.name
        try:
            run.link.call(lambda st: st.renew_lease(run.generation, self.options.lease_ttl_s))
            run.link.call(lambda st: st.renew_lock(self.locks[name], self.options.lock_ttl_s))
            run.renewed_at, run.renew_error = time.monotonic(), ""
        except LockHeldError as exc:
            raise _Breach([f"lock: {exc.message}"]) from exc
        except HostError as exc:
            control = None
            with contextlib.suppress(HostError):
                control = run.link.call(lambda st: st.read_control())
            if control is not None and control.generation != run.generation:
                raise _Breach(
                    [
                        f"control: host {name}: the mode was changed to {control.mode} (generation "
                        f"{control.generation}) by {control.set_by or 'someone'}: {control.reason}"
                    ]
                ) from None
            # unreachable or busy (the control write lock): keep trying; the lease returns the host to Triton and a
            # gate trips, and the breach names this error (a lapsed lease alone reads "lease expired")
            run.renew_error = exc.message

    def _causes(self) -> list[str]:
        """What ended the run before the gates say how: another operator's rollback (from each host's journal),
        or the rank that stopped first."""
        rollbacks = []
        for run in self.runs:
            offset = self.clock_offsets.get(run.link.name, 0.0)
            with contextlib.suppress(HostError):
                journal = run.link.call(lambda st: st.journal_tail())
                rollbacks += operator_rollbacks(run.link.name, journal, self.started + offset - 1.0,
                                                self.settings.operator)
        self.ended_by_operator = bool(rollbacks)
        return rollbacks + first_to_stop(self._observations(), "shadow")

    def _renewal_failure(self, run: _HostRun) -> str:
        """The reason line of a host whose lease renewals are failing ("" while they succeed)."""
        if not run.renew_error:
            return ""
        since = time.monotonic() - run.renewed_at
        return f"lease: host {run.link.name}: not renewed for {since:.0f} s: {run.renew_error}"

    def _renewal_failures(self) -> list[str]:
        """One line per host whose renewals were failing when the run stopped: the lease lapsing there (ranks
        on Triton, "lease expired") has this cause."""
        return [line for line in map(self._renewal_failure, self.runs) if line]

    def _ingest(self, run: _HostRun) -> None:
        for record in run.tail.read_new(run.link.state):
            if self.summary.add(run.link.name, record):
                self.store.append_stats(run.link.name, record)

    def _observations(self) -> list[RankObservation]:
        return [tracker.observation() for run in self.runs for tracker in run.trackers]

    def _report_progress(self, elapsed: float) -> None:
        if self.on_progress is None:
            return
        observations = self._observations()
        now = time.monotonic()
        self.on_progress(
            Progress(
                run_id=self.run_id,
                elapsed_s=elapsed,
                duration_s=self.options.duration_s,
                totals=self.summary.totals(),
                ranks=observations,
                host_errors={
                    run.link.name: self._renewal_failure(run) or run.link.last_error
                    for run in self.runs
                    if run.renew_error or run.link.last_error
                },
                load=self.load.snapshot() if self.load else None,
                gauges=gauges(self.policy.shadow, self.summary),
                compared=compared_progress(self.policy.shadow, self.summary, observations),
                leases_left_s={run.link.name: self.options.lease_ttl_s - (now - run.renewed_at) for run in self.runs},
            )
        )

    # --- ending ---------------------------------------------------------------------------------------
    def _roll_back(self, reasons: list[str], hosts: list[Host] | None = None, why: str | None = None) -> list[str]:
        """Every host that entered the run (or `hosts`) back to Triton at once (phase rolled_back, journaled
        with `why`); returns what could not be confirmed."""
        self._stop_load()
        problems = []
        try:
            results = rollback_hosts(
                self.inventory,
                hosts or [link.host for link in self.entered],
                self.settings,
                reason=why or f"shadow run {self.run_id} failed: {reasons[0]}",
                automatic=True,
            )
        except CutoverError as exc:
            results = []
            problems.append(f"rollback: {exc.message}")
        for result in results:
            if result.ok:
                self.confirmed_by_rollback.add(result.name)
            else:
                problems.append(f"rollback: host {result.name}: {'; '.join(result.messages) or 'not confirmed'}")
        if problems:
            self.unconfirmed = True
            problems.append(f"the lease returns any unconfirmed rank to Triton within {self.options.lease_ttl_s:.0f} s")
        return problems

    def _return_to_triton(self, why: str) -> list[str]:
        """End of run (or Ctrl-C): set Triton with ack on every host; fall back to rollback where that fails.
        A host the rollback path confirmed is noted in returned_by_rollback: its phase is rolled_back."""
        self._stop_load()
        failed: dict[str, str] = {}
        for run in self.runs:
            try:
                control = run.link.call(lambda st: st.set_mode("triton", reason=why, release_id=self.release_id))
                run.link.call(lambda st: st.wait_for_ack(control.generation, mode="triton"))
            except CutoverError as exc:
                failed[run.link.name] = exc.message
        self.return_failed = set(failed)
        if not failed:
            return []
        hosts = [run.link.host for run in self.runs if run.link.name in failed]
        problems = self._roll_back([why], hosts, why=f"{why}: the ordinary return to Triton failed there")
        self.returned_by_rollback = {name: err for name, err in failed.items() if name in self.confirmed_by_rollback}
        return problems

    def _stop_load(self) -> None:
        if self.load:
            self.load.stop()
            self.load = None

    def _finish_normally(self) -> ShadowOutcome:
        ranks_at_end = self._observations()  # before the flip back, while every rank should be in shadow
        prometheus_results = self.prometheus_gates.check(final=True)  # the operators' series, still in shadow
        elapsed = time.monotonic() - self.started_mono
        renewals = self._renewal_failures()
        problems = self._return_to_triton(f"shadow run {self.run_id} finished")
        problems += self._ingest_last()
        self.moved = self._phases_moved()
        verdict = evaluate_shadow(self.policy.shadow, self.summary, ranks_at_end, elapsed, final=True)
        verdict = with_results(verdict, prometheus_results)
        notes = rollback_path_notes(self.returned_by_rollback) + phase_moved_notes(self.moved)
        if verdict.passed and not problems:  # the notes first: they are what the operator must act on
            return self._conclude("passed", notes + verdict.reasons() + renewals, verdict)
        if verdict.passed:  # the gates passed: what failed is the return to Triton or the last read, say it first
            return self._conclude("failed", problems + notes + renewals + verdict.reasons(), verdict)
        return self._conclude("failed", verdict.reasons() + problems + notes + renewals, verdict)

    def _ours(self, phase: PhaseRecord) -> bool:
        """Whether `phase` is still this run's shadowing: only then does the run record its outcome as the phase."""
        return phase.phase == "shadowing" and phase.run_id == self.run_id

    def _phases_moved(self) -> dict[str, str]:
        """Hosts whose phase someone else moved off this run's shadowing: an on-call rollback between the last
        tick and the end, say, which no gate sees. Hosts whose ordinary return to Triton failed are left out
        (the rollback path moved theirs), and an unreadable phase is left to `_record`, which cannot write there
        either."""
        moved = {}
        for link in self.entered:
            if link.name in self.return_failed:
                continue
            try:
                phase = link.call(lambda st: st.read_phase())
            except CutoverError:
                continue
            if not self._ours(phase):
                moved[link.name] = _phase_line(phase)
        return moved

    def _finish(self, outcome: str, reasons: list[str], rolled_back: list[str] | None = None) -> ShadowOutcome:
        if rolled_back is None:
            rolled_back = self._return_to_triton(f"shadow run {self.run_id}: {reasons[0]}")
            rolled_back += rollback_path_notes(self.returned_by_rollback)
        return self._conclude(outcome, reasons + rolled_back + self._ingest_last(), None)

    def _ingest_last(self) -> list[str]:
        """Read every host's last stats records (the final drain); name each host that cannot be read."""
        problems = []
        for run in self.runs:
            try:
                self._ingest(run)
            except HostError as exc:
                problems.append(f"stats: host {run.link.name}: its last records could not be read ({exc.message})")
        return problems

    def _where_targets_are(self) -> str:
        if not self.unconfirmed:
            return "every target is back on Triton."
        return (f"Triton is NOT confirmed on every target (the rollback lines say where): the lease returns those "
                f"ranks to Triton within {self.options.lease_ttl_s:.0f} s; check with `cutover status`.")

    def _conclude(self, outcome: str, reasons: list[str], verdict: Verdict | None) -> ShadowOutcome:
        record = self._record(outcome, reasons, verdict)
        notify.send(self.settings.notify, "shadow_verdict",
                    f"shadow run {self.run_id} {outcome}: {'; '.join(reasons[:1])}", operator=self.settings.operator,
                    run_id=self.run_id, release_id=self.release_id, outcome=outcome, reasons=reasons)
        report = write_report(self.store)
        if not record.passed:
            headline = "aborted" if outcome == "aborted" else "failed"
            raise GateFailedError(
                f"shadow run {self.run_id} {headline}: "
                + "; ".join(reasons[:3])
                + f"\n{self._where_targets_are()} report: {report.markdown}",
                hint=(
                    "ask who rolled back why (`cutover status` shows the journal), then shadow again"
                    if self.ended_by_operator
                    else "read the report; fix and re-stage the kernel, then shadow again"
                    if outcome == "failed"
                    else "run `cutover shadow` again when ready"
                ),
            )
        return ShadowOutcome(record, report, dict(self.returned_by_rollback), dict(self.moved))

    def _record(self, outcome: str, reasons: list[str], verdict: Verdict | None) -> VerdictRecord:
        """Store the verdict locally and on every reachable host that entered the run (file, phase, journal)."""
        record = VerdictRecord(
            run_id=self.run_id,
            release_id=self.release_id,
            hosts=[link.name for link in self.links],
            outcome=outcome,
            reasons=reasons,
            started_at=self.started,
            ended_at=time.time(),
            policy_source=self.policy.source,
            policy_shadow=shadow_thresholds(self.policy.shadow),
            actor=self.settings.operator,
            generations=dict(self.summary.generations),
            totals=self.summary.totals(),
            gates=verdict.to_dict() if verdict else {},
            baseline={run.link.name: baseline(run.samples, driven_load=self.options.load is not None)
                      for run in self.runs},
            stacks={run.link.name: distinct_stacks(stack for tracker in run.trackers for stack in tracker.stacks)
                    for run in self.runs},
        )
        self.store.save_verdict(record)
        phase = "shadow_passed" if record.passed else "shadow_failed"
        for link in self.entered:
            # a host the rollback path returned to Triton is rolled_back, not shadowing: it keeps that phase
            returned = self.returned_by_rollback.get(link.name)
            extra = {"returned_through_rollback": returned} if returned is not None else {}
            with contextlib.suppress(CutoverError):
                link.call(lambda st: st.transport.write_atomic(st.paths.verdict(self.run_id), record.to_json()))
                now = link.call(lambda st: st.read_phase())
                if self._ours(now):
                    link.call(
                        lambda st: st.set_phase(
                            phase, release_id=self.release_id, run_id=self.run_id, reason="; ".join(reasons[:2])
                        )
                    )
                elif record.passed and link.name not in self.return_failed:  # moved after `_phases_moved` read it
                    self.moved.setdefault(link.name, _phase_line(now))
                link.call(
                    lambda st: st.journal(
                        "shadow_end",
                        run_id=self.run_id,
                        outcome=outcome,
                        release_id=self.release_id,
                        reasons=reasons[:5],
                        **extra,
                    )
                )
        return record
