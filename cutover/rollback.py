"""`cutover rollback`: every rank back to Triton now, acknowledged; optionally the previous release or no plugin.

Fast path: control.json -> mode triton, generation + 1, written directly (local file or paramiko SFTP), then
wait until every rank's heartbeat acknowledges it. If the fast path cannot reach a host, the same flip runs
through Ansible (playbooks/rollback.yml). Needs nothing but the inventory: no local state.

The lock and an emergency: the flip to Triton is the safe direction, so it is never blocked by a lock.
A free or expired lock is taken for the duration (an expired one is taken over and journaled); a lock that
another operator holds is left in place and the override is journaled with their name (their shadow or
promote sees the generation change and stops). `--to previous` and `--uninstall` change what is installed,
so they respect another operator's live lock and are refused on that host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from cutover import ansible
from cutover.config import Host, Inventory, Settings
from cutover.errors import CutoverError, HostError, LockHeldError
from cutover.hoststate import HostState, LockRecord
from cutover.transport import open_transport


@dataclass
class HostRollback:
    name: str
    ok: bool = False
    path: str = "fast"  # fast | ansible
    already_triton: bool = False
    generation: int | None = None
    serving: bool | None = None
    acked_ranks: list[int] = field(default_factory=list)
    release_switched_to: str | None = None
    uninstalled: bool = False
    restarted: bool = False
    messages: list[str] = field(default_factory=list)


def rollback_hosts(inventory: Inventory, hosts: list[Host], settings: Settings, *, reason: str = "rollback",
                   to_previous: bool = False, uninstall: bool = False,
                   confirm_restart: Callable[[list[str]], bool] = lambda names: False,
                   say: Callable[[str], None] = lambda message: None,
                   verbose: bool = False) -> list[HostRollback]:
    """Flip every host to triton with acknowledgement; then, if asked, switch back to the previous release
    and/or uninstall the plugin (through Ansible). Returns one result per host; never raises for one host."""
    results = {h.name: HostRollback(h.name) for h in hosts}
    fallback, follow_up, serving_hosts = [], [], []
    for host in hosts:
        line = results[host.name]
        try:
            with open_transport(host) as transport:
                state = HostState(host, transport, settings)
                _fast_flip(state, line, reason)
                if to_previous or uninstall:
                    _check_follow_up(host, state, to_previous, uninstall)
                    follow_up.append(host)
                    if line.serving:
                        serving_hosts.append(host.name)
        except HostError as err:
            if line.generation is None:  # the flip itself could not be done directly: Ansible does it
                line.messages.append(f"fast path failed ({err.message}); using Ansible")
                line.path = "ansible"
                fallback.append(host)
            else:
                line.ok = False
                line.messages.append(err.message)
        except CutoverError as err:  # lock refused for the follow-up, ack timeout
            line.ok = False
            line.messages.append(err.message)
    for host in fallback:
        if uninstall and not host.manages_plugin:
            results[host.name].messages.append(_not_managed(host).message)
        elif to_previous or uninstall:
            follow_up.append(host)
    if fallback or follow_up:
        restart = _agreed_restarts(serving_hosts, results, confirm_restart)
        targets = fallback + [h for h in follow_up if h not in fallback]
        say(f"running playbooks/rollback.yml on {', '.join(h.name for h in targets)}")
        changing = [h.name for h in follow_up]
        run = ansible.run_playbook("rollback.yml", inventory, targets, verbose=verbose, extravars={
            "cutover_operator": settings.operator,
            "cutover_reason": reason,
            "cutover_flip_hosts": [h.name for h in fallback],
            "cutover_previous_hosts": changing if to_previous else [],
            "cutover_uninstall_hosts": changing if uninstall else [],
            "cutover_restart_hosts": restart,
            "cutover_ack_timeout_s": settings.ack_timeout_s,
            "cutover_heartbeat_stale_s": settings.heartbeat_stale_s,
        })
        for host in targets:
            outcome, line = run.hosts[host.name], results[host.name]
            if not outcome.ok:
                line.ok = False
                line.messages.append(f"{outcome.failed_task or 'ansible'}: {outcome.message}")
                continue
            if host in fallback:
                line.ok = not (uninstall and not host.manages_plugin)
            if host.name in changing:
                line.release_switched_to = outcome.facts.get("cutover_restored_release")
                line.uninstalled = uninstall
                line.restarted = host.name in restart
                _record_follow_up(host, settings, line, to_previous)
    return [results[h.name] for h in hosts]


def _agreed_restarts(serving_hosts: list[str], results: dict[str, HostRollback],
                     confirm_restart: Callable[[list[str]], bool]) -> list[str]:
    if serving_hosts and confirm_restart(serving_hosts):
        return serving_hosts
    for name in serving_hosts:
        results[name].messages.append("serving not restarted: it keeps the rolled-back release loaded, in mode "
                                      "triton, until restarted (`cutover rollback ... --yes`)")
    return []


def _fast_flip(state: HostState, line: HostRollback, reason: str) -> None:
    lock = _take_lock_if_free(state, line)
    try:
        try:
            control = state.read_control()
        except HostError:
            control = None  # corrupt: rewrite it
        if control is not None and control.mode == "triton":
            line.already_triton = True
            line.generation = control.generation
        else:
            line.generation = state.set_mode("triton", reason=reason).generation
        ack = state.wait_for_ack(line.generation)
        line.serving = ack.serving
        line.acked_ranks = [v.rank for v in ack.ranks if ack.serving]
        line.ok = True
        line.messages.append(("already on triton; " if line.already_triton else "")
                             + ack.summary())
        state.journal("rollback", generation=line.generation, already_triton=line.already_triton,
                      serving=ack.serving, path="fast", reason=reason)
        try:
            phase = state.read_phase().phase
        except HostError:
            phase = "unknown"  # corrupt: rollback re-establishes it
        if phase not in ("idle", "rolled_back"):
            state.set_phase("rolled_back", reason=reason, force=phase == "unknown")
    finally:
        if lock is not None:
            state.release_lock(lock)


def _take_lock_if_free(state: HostState, line: HostRollback) -> LockRecord | None:
    try:
        return state.acquire_lock("rollback", ttl_s=max(60.0, state.settings.ack_timeout_s * 4))
    except LockHeldError:
        held = state.read_lock()
        owner = held.owner if held else "another operator"
        line.messages.append(f"lock held by {owner}: rolled back to triton anyway (the safe direction)")
        state.journal("rollback_overrode_lock", lock_owner=owner, lock_action=held.action if held else None)
        return None


def _check_follow_up(host: Host, state: HostState, to_previous: bool, uninstall: bool) -> None:
    if to_previous and state.transport.readlink(host.paths.previous) is None:
        raise HostError(f"host {host.name}: there is no previous release ({host.paths.previous} is missing): "
                        f"nothing was switched (the host is on triton)")
    held = state.read_lock()
    if held is not None and not held.expired() and held.owner != state.settings.operator:
        raise LockHeldError(f"host {host.name} is locked by {held.describe()}: the release was not changed "
                            f"(the host is on triton)")
    if uninstall and not host.manages_plugin:
        raise _not_managed(host)


def _not_managed(host: Host) -> CutoverError:
    return CutoverError(f"host {host.name}: the plugin there is not installed by cutover "
                        f"(cutover_install_plugin is false): nothing was uninstalled (the host is on triton)",
                        hint="remove it from the serving environment by hand if you must")


def _record_follow_up(host: Host, settings: Settings, line: HostRollback, to_previous: bool) -> None:
    try:
        with open_transport(host) as transport:
            state = HostState(host, transport, settings)
            if to_previous and line.release_switched_to:
                phase = state.read_phase()
                if phase.phase not in ("idle",):
                    state.set_phase("rolled_back", release_id=line.release_switched_to,
                                    reason="rollback --to previous")
            state.journal("rollback_release", to_previous=to_previous, uninstall=line.uninstalled,
                          release_id=line.release_switched_to, restarted=line.restarted)
    except CutoverError as err:
        line.messages.append(f"journal not written: {err.message}")
