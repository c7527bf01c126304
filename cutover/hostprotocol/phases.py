"""The workflow phase of a host and its allowed transitions.

    idle -> staged -> shadowing -> shadow_passed -> promoted
                          |-> shadow_failed
    any phase but idle -> rolled_back (rollback is always allowed: it is the safe direction)

Standard library only: the stage playbook's host-side module uses it too, so the operator side and the host
agree on one table and one record (`PhaseRecord`, phase.json). `refusal()` says why a transition is not allowed
and what to do instead.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

PHASES = ("idle", "staged", "shadowing", "shadow_passed", "shadow_failed", "promoted", "rolled_back")

# target phase -> phases it may be entered from
ALLOWED_FROM = {
    "staged": {"idle", "staged", "shadow_passed", "shadow_failed", "rolled_back"},
    "shadowing": {"staged", "shadow_passed", "shadow_failed", "rolled_back"},
    "shadow_passed": {"shadowing"},
    "shadow_failed": {"shadowing"},
    "promoted": {"shadow_passed"},
    "rolled_back": {"staged", "shadowing", "shadow_passed", "shadow_failed", "promoted", "rolled_back"},
    "idle": set(),
}

# (current, target) -> what the operator should do instead
_ADVICE = {
    ("shadowing", "staged"): "a shadow run is in progress: let it finish, or run `cutover rollback` first",
    ("promoted", "staged"): "the custom kernel is live: run `cutover rollback` before staging another release",
    ("idle", "shadowing"): "nothing is staged: run `cutover stage` first",
    ("shadowing", "shadowing"): "a shadow run is already in progress: wait for it, or run `cutover rollback`",
    ("promoted", "shadowing"): "the custom kernel is already live: run `cutover rollback` first to shadow again",
    ("staged", "promoted"): "the staged release has not passed shadow: run `cutover shadow` first",
    ("shadow_failed", "promoted"): "the last shadow failed: fix the kernel, stage and shadow again",
    ("shadowing", "promoted"): "a shadow run is in progress: wait for its verdict",
    ("rolled_back", "promoted"): "the host was rolled back: run `cutover shadow` again before promoting",
    ("promoted", "promoted"): "already promoted: nothing to do",
    ("idle", "rolled_back"): "nothing was ever staged on this host: there is nothing to roll back",
}


@dataclass(frozen=True)
class PhaseRecord:
    """phase.json: the host's phase, the release it concerns, and who set it when and why."""

    phase: str = "idle"
    release_id: str | None = None
    updated_at: float = 0.0
    set_by: str = ""
    reason: str = ""
    run_id: str | None = None

    def to_text(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> PhaseRecord | None:
        """The record phase.json holds, or None when it is damaged (not an object naming a phase, or a field of the
        wrong type); unknown fields are ignored. An unknown phase name is kept: `refusal` explains it."""
        if len(text) > 65536:  # a phase record is a few hundred bytes
            return None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("phase"), str):
            return None
        fields = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        optional_text = (fields.get("release_id"), fields.get("run_id"))
        if (not all(value is None or isinstance(value, str) for value in optional_text)
                or not all(isinstance(fields.get(name, ""), str) for name in ("set_by", "reason"))
                or not _finite_time(fields.get("updated_at", 0.0))):
            return None
        return cls(**fields)


def _finite_time(value: object) -> bool:
    return (type(value) is float and math.isfinite(value)) or (type(value) is int and abs(value) < 2**53)


def refusal(current: str, target: str) -> str | None:
    """None if current -> target is allowed, else a sentence saying why not and what to do instead."""
    if target not in PHASES:
        return f"unknown phase {target!r} (phases: {', '.join(PHASES)})"
    if current not in PHASES:
        return f"the host records an unknown phase {current!r}: run `cutover rollback`, then `cutover stage`"
    if current in ALLOWED_FROM[target]:
        return None
    advice = _ADVICE.get((current, target))
    if advice is None:
        allowed = ", ".join(sorted(ALLOWED_FROM[target])) or "no phase"
        advice = f"{target} can only follow {allowed}"
    return f"cannot go from {current} to {target}: {advice}"


def phase_after_stage(current: str, staged_release: str | None, new_release: str) -> str:
    """The phase a successful stage leaves: a new release starts over at staged; restaging the same
    release keeps a shadow verdict that still applies to it."""
    if current in ("shadow_passed", "shadow_failed", "staged") and staged_release == new_release:
        return current
    return "staged"
