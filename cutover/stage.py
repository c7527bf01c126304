"""`cutover stage`: lock, preflight, stage through Ansible, restart where agreed, journal, unlock.

Every host change happens inside playbooks/preflight.yml and playbooks/stage.yml (canary first); this
module decides what to ask of them and reports per host from Ansible's stats and events. Before `current`
moves, stage.yml runs the release's kernel acceptance on the host's GPU
(cutover/hostprotocol/acceptance.py). A host that
cannot be reached is named and left out; the others go on. A failure half-way leaves the host in mode triton with
either the old or the new release current, never a half-copied one, and a re-run completes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cutover import ansible, notify
from cutover.config import DEFAULT_SERIAL, Host, Inventory, Settings
from cutover.errors import ConfigError, CutoverError, HostError, LockHeldError
from cutover.hoststate import HostState, LockRecord
from cutover.pluginwheel import kernel_ext_mismatches
from cutover.release import Release
from cutover.transport import open_transport


@dataclass
class HostStage:
    name: str
    outcome: str = "pending"  # staged | already staged | would change | unchanged (--check) | failed | unreachable
    changed: int = 0
    restarted: bool = False
    message: str = ""
    gpu_check: str = ""  # what the kernel acceptance on the host's GPU found (or why it did not run)


@dataclass
class StageReport:
    release_id: str
    check: bool
    hosts: list[HostStage] = field(default_factory=list)
    restart_declined: list[str] = field(default_factory=list)
    restart_reasons: dict[str, list[str]] = field(default_factory=dict)  # host -> why serving needs a restart
    locks_lost: list[str] = field(default_factory=list)  # stage locks another operator took while the stage ran

    @property
    def failed(self) -> list[HostStage]:
        return [h for h in self.hosts if h.outcome in ("failed", "unreachable")]


def preflight_message(outcome: ansible.HostOutcome) -> str:
    """'host X: fact: expected E, found F' for each failed check, from the module's structured result."""
    checks = outcome.failed_result.get("checks") or []
    failed = [c for c in checks if not c.get("ok")]
    if not failed:
        return f"host {outcome.name}: {outcome.message}"
    return "\n".join(f"host {outcome.name}: {c['fact']}: expected {c['expected']}, found {c['found']}"
                     + (f" ({c['note']})" if c.get("note") else "") for c in failed)


def stage_release(inventory: Inventory, hosts: list[Host], settings: Settings, release: Release, *,
                  check: bool, confirm_restart: Callable[[dict[str, list[str]]], bool], say: Callable[[str], None],
                  verbose: bool = False) -> StageReport:
    """Stage `release` on `hosts` (rollout order). Raises before changing anything if a host's phase or
    lock forbids it (also a lock taken over while the restart prompt waited) or preflight fails; per-host
    failures of the stage itself, and locks lost while it ran, are in the report."""
    _check_plugin_wheels(hosts, release)
    report = StageReport(release.release_id, check, [HostStage(h.name) for h in hosts])
    by_name = {h.name: h for h in report.hosts}
    with ExitStack() as stack:
        states = _connect(hosts, settings, stack, by_name, say)
        locks: dict[str, LockRecord] = {}
        stack.callback(_release_locks, states, locks)
        for name, state in states.items():
            state.check_phase("staged")
            if not check:
                locks[name] = state.acquire_lock("stage", settings.lock_ttl_s)

        def keep_locks():
            return _locks_kept(states, locks, settings.lock_ttl_s, say)
        reachable = [h for h in hosts if h.name in states]
        if not reachable:
            return report
        report.restart_reasons = _hosts_to_restart(states, release.release_id)
        restart = list(report.restart_reasons)
        if restart and not check:
            if confirm_restart(report.restart_reasons):
                say(f"will restart serving on {describe_restarts(report.restart_reasons)} to load "
                    f"{release.release_id}")
            else:
                report.restart_declined, restart = restart, []
        # The prompt may have outlasted lock_ttl_s: a lock another operator took meanwhile stops the stage here
        # (LockHeldError naming the holder), before anything changed.
        for name, lock in locks.items():
            states[name].renew_lock(lock, settings.lock_ttl_s)
        with keep_locks() as lost:
            preflight = ansible.run_playbook("preflight.yml", inventory, reachable, check=check, verbose=verbose,
                                             extravars=preflight_extravars(release))
        if lost:
            raise LockHeldError("; ".join(lost) + "; nothing was changed",
                                hint="run `cutover status` to see who acts on these hosts")
        _judge_preflight(preflight, reachable, states, release, check=check, say=say)
        with keep_locks() as lost:
            result = ansible.run_playbook("stage.yml", inventory, reachable, check=check, verbose=verbose,
                                          extravars=stage_extravars(release, settings, restart, inventory.serial))
        report.locks_lost = lost  # the stage ran: its hosts are reported, then the command fails (cli/stage.py)
        for host in reachable:
            _record(by_name[host.name], result.hosts[host.name], host.name in restart, check)
            if by_name[host.name].gpu_check:
                say(f"{host.name}: {by_name[host.name].gpu_check}")
            if not check and not result.hosts[host.name].unreachable:
                _journal(states[host.name], by_name[host.name], release.release_id)
    if not check:
        notify.send(settings.notify, "stage", f"release {release.release_id} staged: " + ", ".join(
            f"{h.name} {h.outcome}" for h in report.hosts), operator=settings.operator,
            release_id=release.release_id, hosts={h.name: h.outcome for h in report.hosts})
    return report


def stage_extravars(release: Release, settings: Settings, restart: list[str],
                    serial: int | str | list = DEFAULT_SERIAL) -> dict:
    """What playbooks/stage.yml is told: the release, who stages it, where serving restarts, and the rollout's
    batches (Ansible reads a play's `serial` before any host's variables exist)."""
    return {
        "cutover_serial": serial,
        "cutover_release_id": release.release_id,
        "cutover_release_src": str(release.path.resolve()),
        "cutover_release_files": release.manifest["files"],
        "cutover_operator": settings.operator,
        "cutover_restart_hosts": restart,
        "cutover_heartbeat_stale_s": settings.heartbeat_stale_s,
    }


def _check_plugin_wheels(hosts: list[Host], release: Release) -> None:
    """Every wheel a host installs exists and carries the release's kernel_ext Python (cutover/pluginwheel.py)."""
    for host in hosts:
        wheel = host.vars.get("cutover_plugin_wheel")
        if not host.manages_plugin:
            continue
        where = f"{host.inventory_file}: host {host.name!r}: field 'cutover_plugin_wheel': {wheel}"
        rebuild = "build it with `pip wheel --no-deps -w dist/wheels .`"
        if not os.path.isfile(wheel):
            raise ConfigError(f"{where} does not exist", hint=rebuild)
        differing = kernel_ext_mismatches(wheel, release.manifest["files"])
        if differing:
            raise ConfigError(
                f"{where} carries other kernel_ext code than release {release.release_id} "
                f"({', '.join(differing)}): serving would run Python around the kernel library that the release's "
                f"acceptance never ran",
                hint=f"{rebuild} from the checkout that built the release (or `cutover build` the wheel's checkout)")


def _connect(hosts: list[Host], settings: Settings, stack: ExitStack, by_name: dict[str, HostStage],
             say: Callable[[str], None]) -> dict[str, HostState]:
    """A HostState per reachable host; unreachable hosts are marked in the report and left out."""
    states = {}
    for host in hosts:
        try:
            transport = stack.enter_context(open_transport(host))
        except HostError as err:
            by_name[host.name].outcome, by_name[host.name].message = "unreachable", err.message
            say(f"[red]{err.message}[/red]: leaving it out")
            continue
        states[host.name] = HostState(host, transport, settings)
    return states


def preflight_extravars(release: Release) -> dict:
    """What playbooks/preflight.yml is told: what the release's library needs of a host."""
    return {"cutover_release_archs": release.manifest["archs"],
            "cutover_release_min_driver": release.manifest["min_driver"]}


@contextlib.contextmanager
def _locks_kept(states: dict[str, HostState], locks: dict[str, LockRecord], ttl_s: float,
                say: Callable[[str], None]):
    """Renew `locks` every third of `ttl_s` from a background thread while a playbook runs: the GPU check and
    the restarts of a rollout can outlast any fixed lock. Yields the list of failed renewals (one per host),
    complete once the block ends: they are said then (stopping Ansible half-way would leave more to explain),
    and the caller fails the command on them."""
    stop, problems, lost = threading.Event(), [], set()

    def renew() -> None:
        while not stop.wait(ttl_s / 3):
            for name, lock in locks.items():
                if name in lost:
                    continue  # a lost lock stays lost: named once
                try:
                    states[name].renew_lock(lock, ttl_s)
                except CutoverError as err:
                    lost.add(name)
                    problems.append(f"{name}: the stage lock could not be renewed: {err.message}")

    keeper = threading.Thread(target=renew, name="cutover-stage-lock", daemon=True)
    keeper.start()
    try:
        yield problems
    finally:
        stop.set()
        keeper.join()
        for problem in problems:
            say(problem)


def _judge_preflight(preflight: ansible.PlaybookResult, hosts: list[Host], states: dict[str, HostState],
                     release: Release, *, check: bool, say: Callable[[str], None]) -> None:
    """HostError (and a journaled refusal) if preflight.yml failed on any host; print the checks' notes."""
    if not preflight.ok:
        problems = "\n".join(preflight_message(o) if not o.unreachable else
                             f"host {o.name} is unreachable: {o.message}" for o in preflight.failed())
        if not check:
            for outcome in preflight.failed():
                if not outcome.unreachable:
                    states[outcome.name].journal("stage_refused", release_id=release.release_id,
                                                 stage="preflight", reason=problems)
        raise HostError(f"preflight failed; nothing was changed:\n{problems}",
                        hint="fix the host or rebuild the release for it, then run `cutover stage` again")
    for host in hosts:
        for result in preflight.hosts[host.name].facts.get("cutover_preflight", {}).get("checks", []):
            if result.get("note") and result.get("ok"):
                say(f"{host.name}: {result['note']}")


RELEASE_NOT_LOADED, PLUGIN_CHANGED = "release not loaded", "plugin wheel changed"


def _hosts_to_restart(states: dict[str, HostState], release_id: str) -> dict[str, list[str]]:
    """Why each host's serving needs a restart: its process (if any) does not have this release loaded on every
    rank, or stage installs another plugin wheel (a reinstall under a live process does not reach its ranks)."""
    reasons = {}
    for name, state in states.items():
        why = [RELEASE_NOT_LOADED] if state.serving_release() != release_id else []
        if _plugin_wheel_changed(state):
            why.append(PLUGIN_CHANGED)
        if why:
            reasons[name] = why
    return reasons


def _plugin_wheel_changed(state: HostState) -> bool:
    """Whether the host's installed-wheel marker (written by stage.yml) differs from the local wheel's sha1, the
    checksum the playbook's copy module records there."""
    if not state.host.manages_plugin:
        return False
    marker = state.transport.read_text(state.paths.installed_wheel_marker)
    wheel = Path(state.host.vars["cutover_plugin_wheel"]).read_bytes()
    return (marker or "").strip() != hashlib.sha1(wheel, usedforsecurity=False).hexdigest()


def describe_restarts(reasons: dict[str, list[str]]) -> str:
    """'host1 (release not loaded), host2 (plugin wheel changed)'."""
    return ", ".join(f"{name} ({', '.join(why)})" for name, why in reasons.items())


def _record(line: HostStage, outcome: ansible.HostOutcome, restarting: bool, check: bool) -> None:
    line.changed = outcome.changed
    line.gpu_check = outcome.facts.get("cutover_acceptance", {}).get("note", "")
    if outcome.unreachable:
        line.outcome, line.message = "unreachable", outcome.message or ""
    elif not outcome.ok:
        line.outcome = "failed"
        line.message = (f"task '{outcome.failed_task}': {outcome.message}" if outcome.failed_task
                        else outcome.message or "failed")
    elif check:
        line.outcome = "would change" if outcome.changed else "unchanged"
    else:
        line.outcome = "staged" if outcome.changed else "already staged"
        line.restarted = restarting


def _journal(state: HostState, line: HostStage, release_id: str) -> None:
    try:
        if line.outcome == "failed":
            state.journal("stage_refused", release_id=release_id, stage="stage", reason=line.message)
        else:
            state.journal("stage", release_id=release_id, outcome=line.outcome, changed=line.changed,
                          restarted=line.restarted)
    except CutoverError as err:
        line.message = (line.message + "; " if line.message else "") + f"journal not written: {err.message}"


def _release_locks(states: dict[str, HostState], locks: dict[str, LockRecord]) -> None:
    for name, lock in locks.items():
        try:
            states[name].release_lock(lock)
        except CutoverError:
            pass  # the lock expires on its own
