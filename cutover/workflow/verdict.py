"""The verdict of one shadow run, as stored on every host (verdicts/<run_id>.json) and locally.

Promote trusts only this record: a host may be promoted when its latest verdict passed for the exact
release that is staged on it now.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import asdict, dataclass, field

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
        data = json.loads(text)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        record = cls(**known)
        if record.outcome not in OUTCOMES:
            raise ValueError(f"verdict outcome {record.outcome!r} is not one of {OUTCOMES}")
        return record
