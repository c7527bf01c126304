"""The verdict of one shadow run, as stored on every host (verdicts/<run_id>.json) and locally.

Promote trusts only this record: a host may be promoted when its latest verdict passed for the exact
release that is staged on it now.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import asdict, dataclass, field

from checks.gates import RankObservation
from cutover.hostprotocol.hostlayout import load_record

OUTCOMES = ("passed", "failed", "aborted")


def new_run_id(now: float | None = None) -> str:
    """A sortable, unique shadow run id: UTC start time plus a random suffix."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now or time.time()))
    return f"{stamp}-{secrets.token_hex(3)}"


@dataclass
class VerdictRecord:
    """Outcome of a shadow run: passed, failed (a gate breached or was not met) or aborted (operator stop)."""

    run_id: str
    release_id: str
    hosts: list[str]
    outcome: str
    reasons: list[str]
    started_at: float
    ended_at: float
    policy_source: str
    actor: str
    generations: dict[str, int] = field(default_factory=dict)
    totals: dict = field(default_factory=dict)
    gates: dict = field(default_factory=dict)  # checks.gates.Verdict.to_dict()
    baseline: dict[str, dict] = field(default_factory=dict)  # host -> server metrics measured during shadow
    # The shadow thresholds the run was judged under (checks.policy.shadow_thresholds: every ShadowPolicy field),
    # so promote can refuse a verdict judged under a looser policy (checks.policy.looser_than). None: a verdict
    # written by an older cutover, which did not record them.
    policy_shadow: dict | None = None
    # host -> the distinct serving stacks its ranks reported during the run (cutover.servingstack), so promote can
    # refuse a host that runs another SGLang, torch, plugin or GPU now. None: written by an older cutover.
    stacks: dict[str, list[dict]] | None = None

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    @property
    def duration_s(self) -> float:
        return self.ended_at - self.started_at

    def to_json(self) -> str:
        summary = {
            "passed": self.passed,
            "verdict": "pass" if self.passed else "fail",
            "reason": "; ".join(self.reasons[:3]),
        }
        return json.dumps({**asdict(self), **summary}, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "VerdictRecord":
        """The record of a verdict file; ValueError for anything that is not a usable one."""
        data = load_record(text, "verdict")
        try:
            record = cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
        except TypeError as exc:  # a required field is missing
            raise ValueError(f"verdict: {exc}") from None
        if not isinstance(record.outcome, str) or record.outcome not in OUTCOMES:
            raise ValueError(f"verdict outcome {record.outcome!r} is not one of {OUTCOMES}")
        return record


def first_to_stop(observations: list[RankObservation], expected_mode: str) -> list[str]:
    """One line per host where ranks left `expected_mode` and another rank had stopped heartbeating before them
    (it still reports the mode, from a heartbeat older than theirs): that rank died first, and the others left
    because of it (a serving process goes down with any of its ranks)."""
    lines = []
    for host in sorted({seen.host for seen in observations}):
        ranks = [seen for seen in observations if seen.host == host]
        left = [seen for seen in ranks if seen.mode_active is not None and seen.mode_active != expected_mode]
        if not left:
            continue
        latest_left = max(seen.heartbeat_age_s or 0.0 for seen in left)
        silent = [seen for seen in ranks if seen not in left
                  and (seen.heartbeat_age_s is None or seen.heartbeat_age_s > latest_left)]
        if not silent:
            continue
        first = max(silent, key=lambda seen: float("inf") if seen.heartbeat_age_s is None else seen.heartbeat_age_s)
        when = "never heartbeat" if first.heartbeat_age_s is None else \
            f"last heartbeat {first.heartbeat_age_s:.1f} s ago"
        others = ", ".join(str(seen.rank) for seen in sorted(left, key=lambda seen: seen.rank))
        lines.append(f"first to stop: {host} rank {first.rank} ({when}, still in {expected_mode}); rank(s) "
                     f"{others} left {expected_mode} after it")
    return lines


def operator_rollbacks(host: str, journal: list[dict], since: float, operator: str) -> list[str]:
    """Lines naming who rolled `host` back at or after `since` (host clock), from its journal entries: another
    operator's `cutover rollback` ends a run, and the verdict says so instead of blaming the kernel. A rollback
    journals `rollback_overrode_lock` before its flip and `rollback` after the ranks acknowledged it: either
    names the operator (the run may see the ranks leave before the second is written)."""
    by_actor: dict[str, list[dict]] = {}
    for entry in journal:
        if entry.get("action") in ("rollback", "rollback_overrode_lock") and entry.get("actor") != operator \
                and isinstance(entry.get("ts"), (int, float)) and entry["ts"] >= since:
            by_actor.setdefault(str(entry.get("actor")), []).append(entry)
    lines = []
    for actor, entries in by_actor.items():
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(entries[0]["ts"]))
        why = next((entry["reason"] for entry in entries if isinstance(entry.get("reason"), str) and entry["reason"]),
                   "")
        overrode = any(entry["action"] == "rollback_overrode_lock" for entry in entries)
        lines.append(f"rolled back: host {host} by {actor} at {stamp}" + (f" ({why})" if why else "")
                     + (", overriding this run's lock" if overrode else "") + ": an operator ended the run")
    return lines
