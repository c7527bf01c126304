"""`cutover rollback`: every rank back to Triton now, acknowledged; optionally the previous release or no plugin.

Fast path: control.json -> mode triton, generation + 1, written directly (local file or paramiko SFTP), then
wait until every rank's heartbeat acknowledges it. If the fast path cannot reach a host, the same flip runs
through Ansible (playbooks/rollback.yml). Needs nothing but the inventory: no local state.

The lock and an emergency: the flip to Triton is the safe direction, so it is never blocked by a lock.
A free or expired lock is taken for the duration (an expired one is taken over and journaled); a lock that
another operator holds is left in place and the override is journaled with their name (their shadow or
promote sees the generation change and stops). `--to previous` and `--uninstall` change what is installed,
so they respect another operator's live lock and are refused on that host, on either path.

`--to previous` switches once: playbooks/rollback.yml records the switch on the host before it moves
`current`, so a re-run (after a completed run or one cut off anywhere) reports "already on <id>" instead of
switching back. The playbook also journals what changed (`rollback_release`) on the host, on either path.
Serving restarts only where the operator agreed, a serving process runs, and it has not already loaded what
the host now has; the operator is asked only about hosts that may need it (`needs_restart`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from cutover import ansible, notify
from cutover.config import Host, Inventory, Settings
from cutover.errors import AckTimeoutError, CutoverError, HostError, LockHeldError
from cutover.hostprotocol.hostlayout import HostPaths, load_record, triton_in_force
from cutover.hoststate import HostState, LockRecord
from cutover.transport import Transport, open_transport


@dataclass
class HostRollback:
    name: str
    ok: bool = False
    path: str = "fast"  # fast | ansible
    already_triton: bool = False
    generation: int | None = None
    acknowledged: bool | None = None  # False: control.json says triton, but not every rank acked in time
    serving: bool | None = None  # None: not known (the fast path could not reach the host)
    serving_release: str | None = None  # the release every serving rank has loaded (fast path)
    release_after: str | None = None  # --to previous: the release current will name (fast path; None: not known)
    acked_ranks: list[int] = field(default_factory=list)
    release_switched_to: str | None = None
    already_on_release: bool = False  # --to previous found the switch done by an earlier run
    rolled_back_from: str | None = None
    uninstalled: bool = False
    restarted: bool = False
    messages: list[str] = field(default_factory=list)


def rollback_hosts(inventory: Inventory, hosts: list[Host], settings: Settings, *, reason: str = "rollback",
                   to_previous: bool = False, uninstall: bool = False,
                   confirm_restart: Callable[[list[str]], bool] = lambda names: False,
                   say: Callable[[str], None] = lambda message: None,
                   verbose: bool = False, automatic: bool = False) -> list[HostRollback]:
    """Flip every host to triton with acknowledgement; then, if asked, switch back to the previous release
    and/or uninstall the plugin (through Ansible). Returns one result per host; never raises for one host.
    Announced (cutover/notify.py) once done, as `auto_rollback` when a workflow rolled back by itself."""
    results = _roll_back(inventory, hosts, settings, reason, to_previous, uninstall, confirm_restart, say, verbose)
    outcome = ", ".join(f"{r.name} {'on triton' if r.ok else 'NOT confirmed'}" for r in results)
    notify.send(settings.notify, "auto_rollback" if automatic else "rollback", f"{reason}: {outcome}",
                operator=settings.operator, reason=reason, hosts={r.name: r.ok for r in results})
    return results


def _roll_back(inventory, hosts, settings, reason, to_previous, uninstall, confirm_restart, say,
               verbose) -> list[HostRollback]:
    results = {h.name: HostRollback(h.name) for h in hosts}
    wanted = to_previous or uninstall
    for host in hosts:
        _roll_back_directly(host, results[host.name], settings, reason, to_previous, uninstall)
    fallback = [h for h in hosts if results[h.name].path == "ansible"]
    follow_up = [h for h in hosts if wanted and _follow_up_allowed(h, results[h.name], uninstall)]
    if not (fallback or follow_up):
        return [results[h.name] for h in hosts]
    asked = [h.name for h in follow_up if needs_restart(results[h.name], uninstall)]
    for name in (h.name for h in follow_up if results[h.name].serving and h.name not in asked):
        say(f"{name}: {_already_runs(results[name].release_after)}")
    restart = asked if asked and confirm_restart(asked) else []
    targets = [h for h in hosts if h in fallback or h in follow_up]
    say(f"running playbooks/rollback.yml on {', '.join(h.name for h in targets)}")
    changing = [h.name for h in follow_up]
    run = ansible.run_playbook("rollback.yml", inventory, targets, verbose=verbose, extravars={
        "cutover_operator": settings.operator,
        "cutover_reason": reason,
        "cutover_flip_hosts": [h.name for h in fallback],
        "cutover_previous_hosts": changing if to_previous else [],
        "cutover_uninstall_hosts": changing if uninstall else [],
        "cutover_restart_hosts": restart,
        "cutover_serving_releases": {name: results[name].serving_release for name in changing
                                     if results[name].serving},
        "cutover_ack_timeout_s": settings.ack_timeout_s,
        "cutover_heartbeat_stale_s": settings.heartbeat_stale_s,
    })
    for host in targets:
        line, outcome = results[host.name], run.hosts[host.name]
        _fold_ansible_flip(line, outcome.facts.get("cutover_flip"), refused=wanted and host not in follow_up)
        if not outcome.ok:
            line.ok = False
            line.messages.append(f"{outcome.failed_task or 'ansible'}: {outcome.message}")
        elif host in follow_up:
            _fold_follow_up(line, outcome.facts, uninstall)
    return [results[h.name] for h in hosts]


def _roll_back_directly(host: Host, line: HostRollback, settings: Settings, reason: str, to_previous: bool,
                        uninstall: bool) -> None:
    """The fast path on one host: the flip, then the checks a follow-up needs. A host the flip cannot reach
    directly is marked for the Ansible path."""
    try:
        with open_transport(host) as transport:
            state = HostState(host, transport, settings)
            _fast_flip(state, line, reason)
            if to_previous or uninstall:
                _check_follow_up(host, state, to_previous, uninstall)
            if to_previous:
                line.release_after = release_after_switch(host.paths, transport)
    except HostError as err:
        if line.generation is None:  # the flip itself could not be done directly: Ansible does it
            line.messages.append(f"fast path failed ({err.message}); using Ansible")
            line.path = "ansible"
        else:
            line.ok = False
            line.messages.append(err.message)
    except CutoverError as err:  # lock refused for the follow-up, ack timeout
        line.ok = False
        line.messages.append(err.message)


def needs_restart(line: HostRollback, uninstall: bool) -> bool:
    """Whether serving on the host must restart for --to previous / --uninstall to take effect, so the operator
    is asked: a serving process runs or may run (not known through Ansible) and it has the plugin loaded
    (--uninstall) or does not already run the release that current will name."""
    if line.serving is False:
        return False
    return uninstall or line.release_after is None or line.serving_release != line.release_after


def release_after_switch(paths: HostPaths, transport: Transport) -> str | None:
    """The release current names once --to previous has run: current's own if the rollback record says an
    earlier run switched to it, else previous's. restore_previous (playbooks/library/cutover_state.py) also
    needs current to be the very link that run made, which cannot be read here: after a later stage onto the
    same release the switch goes elsewhere, and the host's line says serving was not restarted."""
    current, previous = transport.readlink(paths.current), transport.readlink(paths.previous)
    try:
        record = load_record(transport.read_text(paths.rollback_record) or "{}", "rollback record")
    except ValueError:
        record = {}  # corrupt: restore_previous reads it as no record
    target = current if current is not None and record.get("to_target") == current else previous
    return target.rsplit("/", 1)[-1] if target else None


def _follow_up_allowed(host: Host, line: HostRollback, uninstall: bool) -> bool:
    """Whether --to previous / --uninstall may run on the host: the fast path checked it already; a fallback
    host is checked here for what needs no connection (the playbook checks the lock and the links)."""
    if line.path == "fast":
        return line.ok
    if uninstall and not host.manages_plugin:
        line.messages.append(_not_managed(host).message)
        return False
    return True


def _fast_flip(state: HostState, line: HostRollback, reason: str) -> None:
    """control.json -> triton (unless already), wait for every rank, journal it, phase rolled_back. An
    acknowledgement timeout is journaled and phased too (control.json asks for triton by then), then raised."""
    lock = _take_lock_if_free(state, line, reason)
    try:
        try:
            control = state.read_control()
        except HostError:
            control = None  # corrupt: rewrite it
        if triton_in_force(control, [view.heartbeat for view in state.ranks() if view.heartbeat]):
            line.already_triton = True
            line.generation = control.generation
        else:
            line.generation = state.set_mode("triton", reason=reason).generation
        try:
            ack = state.wait_for_ack(line.generation, mode="triton")
        except AckTimeoutError:
            line.serving, line.acknowledged = True, False  # only live ranks can time out
            _record_flip(state, line, reason)
            raise
        line.serving, line.acknowledged = ack.serving, True
        line.serving_release = state.serving_release() if ack.serving else None
        line.acked_ranks = [v.rank for v in ack.ranks if ack.serving]
        line.ok = True
        line.messages.append(("already on triton; " if line.already_triton else "") + ack.summary())
        _record_flip(state, line, reason)
    finally:
        if lock is not None:
            state.release_lock(lock)


def _record_flip(state: HostState, line: HostRollback, reason: str) -> None:
    """Journal the flip and move the phase to rolled_back (a corrupt phase file is rewritten)."""
    state.journal("rollback", generation=line.generation, already_triton=line.already_triton,
                  serving=line.serving, acknowledged=line.acknowledged, path="fast", reason=reason)
    try:
        phase = state.read_phase().phase
    except HostError:
        phase = "unknown"  # corrupt: rollback re-establishes it
    if phase not in ("idle", "rolled_back"):
        state.set_phase("rolled_back", reason=reason, force=phase == "unknown")


def _take_lock_if_free(state: HostState, line: HostRollback, reason: str) -> LockRecord | None:
    try:
        return state.acquire_lock("rollback", ttl_s=max(60.0, state.settings.ack_timeout_s * 4))
    except LockHeldError:
        held = state.read_lock()
        owner = held.owner if held else "another operator"
        line.messages.append(f"lock held by {owner}: rolled back to triton anyway (the safe direction)")
        state.journal("rollback_overrode_lock", lock_owner=owner, lock_action=held.action if held else None,
                      reason=reason)
        return None


def _check_follow_up(host: Host, state: HostState, to_previous: bool, uninstall: bool) -> None:
    if to_previous and state.transport.readlink(host.paths.previous) is None:
        raise HostError(f"host {host.name}: there is no previous release ({host.paths.previous} is missing): "
                        f"nothing was switched (the host is on triton)")
    held = state.read_lock()
    now = state.now()
    if held is not None and not held.expired(now) and held.owner != state.settings.operator:
        raise LockHeldError(f"host {host.name} is locked by {held.describe(now)}: the release was not changed "
                            f"(the host is on triton)")
    if uninstall and not host.manages_plugin:
        raise _not_managed(host)


def _not_managed(host: Host) -> CutoverError:
    return CutoverError(f"host {host.name}: the plugin there is not installed by cutover "
                        f"(cutover_install_plugin is false): nothing was uninstalled (the host is on triton)",
                        hint="remove it from the serving environment by hand if you must")


def _fold_ansible_flip(line: HostRollback, flip: dict | None, refused: bool) -> None:
    """What the playbook's flip did on a host the fast path could not reach (None: it did not run there)."""
    if flip is None:
        return
    line.generation, line.already_triton = int(flip["generation"]), bool(flip["already_triton"])
    line.serving, line.acknowledged = bool(flip["serving"]), True
    line.ok = not refused
    line.messages.append(("already on triton; " if line.already_triton else "")
                         + (f"every rank acknowledged generation {line.generation}" if line.serving
                            else "no serving process (the next start reads control.json)"))


def _fold_follow_up(line: HostRollback, facts: dict, uninstall: bool) -> None:
    """Say what --to previous / --uninstall did on the host and whether serving was restarted."""
    if "cutover_restored_release" in facts:
        line.release_switched_to = facts["cutover_restored_release"]
        line.rolled_back_from = facts["cutover_rolled_back_from"] or None
        line.already_on_release = bool(facts["cutover_already_switched"])
        line.messages.append(_switch_note(line, float(facts["cutover_switched_at"])))
    if uninstall:
        line.uninstalled = True
        line.messages.append("plugin uninstalled from serving_python")
    line.restarted = facts.get("cutover_restart") == "restarted"
    line.messages.append(_restart_note(line, facts.get("cutover_restart"), uninstall))


def _switch_note(line: HostRollback, switched_at: float) -> str:
    if not line.already_on_release:
        return f"current switched to {line.release_switched_to} (previous: {line.rolled_back_from})"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(switched_at))
    return (f"already on {line.release_switched_to} (rolled back from {line.rolled_back_from} at {when}): "
            "nothing switched")


def _restart_note(line: HostRollback, restart: str | None, uninstall: bool) -> str:
    """restart: the playbook's cutover_restart fact (restarted, not serving, already loaded), or None where the
    operator was not asked or did not agree."""
    change = f"release {line.release_switched_to}" if line.release_switched_to else "the change"
    if line.serving is False or restart == "not serving":
        return f"no serving process: its next start loads {change}"
    if restart == "restarted":
        return f"serving restarted to load {change}"
    if not uninstall and line.release_switched_to and line.serving_release == line.release_switched_to:
        return _already_runs(line.release_switched_to)
    why = ("not agreed" if needs_restart(line, uninstall)
           else f"not asked: current was expected to name {line.release_after}")
    return (f"serving NOT restarted ({why}): it keeps what it loaded, in mode triton, until restarted "
            f"(re-run with --yes to restart it and load {change})")


def _already_runs(release_id: str | None) -> str:
    return f"serving already runs {release_id}: no restart needed"
