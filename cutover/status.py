"""`cutover status`: what every host and every rank is doing now, read over the fast path (read-only)."""

from __future__ import annotations

from dataclasses import asdict

from cutover.config import Host, Settings
from cutover.errors import CutoverError
from cutover.hoststate import HostState
from cutover.transport import open_transport


def host_status(host: Host, settings: Settings) -> dict:
    """One host's state as a JSON-ready dict; an unreachable host gives {"reachable": False, "error": ...}."""
    try:
        with open_transport(host) as transport:
            state = HostState(host, transport, settings)
            return _read(host, state, transport, state.now())
    except CutoverError as err:
        return {"host": host.name, "reachable": False, "sandbox": host.serving_kind == "sandbox", "error": str(err)}


def spent_verdict(phase: dict, verdict: dict | None) -> str | None:
    """Why a passed verdict no longer lets `cutover promote` go ahead on the host (promote reads the phase: only
    shadow_passed with that run promotes); None when it still does, or when it did not pass."""
    if not verdict or verdict.get("outcome") != "passed":
        return None
    if phase.get("phase") in ("shadow_passed", "promoted") and phase.get("run_id") == verdict.get("run_id"):
        return None
    since = "rolled back since" if phase.get("phase") == "rolled_back" else f"the phase is {phase.get('phase')} now"
    return f"{since}: promote needs a new passed shadow"


def _read(host: Host, state: HostState, transport, now: float) -> dict:
    try:
        phase, phase_error = asdict(state.read_phase()), None
    except CutoverError as err:
        phase, phase_error = {"phase": "unknown"}, err.message
    try:
        control = state.read_control()
        control_error = None
    except CutoverError as err:
        control, control_error = None, err.message
    lock = state.read_lock()
    ranks = []
    for view in state.ranks():
        beat = view.heartbeat
        ranks.append({
            "rank": view.rank,
            "live": view.fresh,
            "heartbeat_age_s": round(view.age_s, 1) if view.age_s is not None else None,
            "mode_active": beat.mode_active if beat else None,
            "generation_seen": beat.generation_seen if beat else None,
            "release_id": beat.release_id if beat else None,
            "kernel": beat.kernel if beat else None,
            "reason": beat.reason if beat else None,
            "stopped": beat.stopped if beat else False,
            "pid": beat.pid if beat else None,
            "stack": beat.stack if beat else None,
        })
    current = transport.readlink(host.paths.current)
    previous = transport.readlink(host.paths.previous)
    verdict = state.latest_verdict()
    return {
        "host": host.name,
        "reachable": True,
        "sandbox": host.serving_kind == "sandbox",
        "clock_offset_s": round(transport.clock_offset(), 3),
        "phase": phase,
        "phase_error": phase_error,
        "requested_mode": control.mode if control else None,
        "effective_mode": control.effective_mode(now) if control else None,
        "generation": control.generation if control else None,
        "lease_remaining_s": (round(control.lease_expires_at - now, 1)
                              if control and control.lease_expires_at is not None else None),
        "control_error": control_error,
        "current_release": current.rsplit("/", 1)[-1] if current else None,
        "previous_release": previous.rsplit("/", 1)[-1] if previous else None,
        "serving": any(r["live"] for r in ranks),
        "ranks": ranks,
        "lock": ({**asdict(lock), "remaining_s": round(lock.expires_at - now, 1), "description": lock.describe(now),
                  "holder_gone": lock.holder_gone()} if lock else None),
        "last_journal": state.last_journal_entry(),
        "verdict": verdict,
        "verdict_spent": spent_verdict(phase, verdict),
        "divergence": {str(rank): summary for rank, summary in state.recent_divergence().items()},
    }
