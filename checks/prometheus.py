"""Gates on the operators' own Prometheus series (a policy's `prometheus:` section, checks/prometheus_policy.py).

A `relative` gate compares the value against the same query's value just before the flip (to shadow, or to
custom for the promote watch): `value / before`, so `must_be: "<="` with `threshold: 1.05` means "must not rise
by more than 5%". Shadow gates are checked while the run lasts and at its verdict; promote gates at every watch
probe, a failure rolling the host back. A query that cannot be answered counts as a failed probe: `max_failed_queries`
in a row fail the gate (at a shadow verdict, one is enough: a verdict is never given on a value not read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import requests

from checks.gates import GateResult, Verdict
from checks.prometheus_policy import COMPARISONS, PromGate, PrometheusPolicy
from cutover.errors import GateFailedError


class QueryError(Exception):
    """A PromQL query that gave no single finite value."""


def query_value(policy: PrometheusPolicy, query: str, session: requests.Session) -> float:
    """The one sample an instant query returns (QueryError: unreachable, refused, or not exactly one sample)."""
    try:
        reply = session.get(f"{policy.url}/api/v1/query", params={"query": query}, timeout=policy.timeout_s)
        data = reply.json()
    except (requests.RequestException, ValueError) as exc:
        raise QueryError(f"Prometheus at {policy.url} did not answer: {exc}") from None
    if data.get("status") != "success":
        raise QueryError(f"Prometheus refused the query: {data.get('error', reply.text[:200])}")
    result = data["data"]
    if result["resultType"] == "scalar":
        value = result["result"][1]
    elif len(result["result"]) == 1:
        value = result["result"][0]["value"][1]
    else:
        raise QueryError(f"the query returned {len(result['result'])} samples, not one (aggregate it, e.g. max(...))")
    value = float(value)
    if not math.isfinite(value):
        raise QueryError(f"the query returned {value}")
    return value


@dataclass
class GateWatch:
    """The gates of one stage: the values before the flip, then a check per probe."""

    policy: PrometheusPolicy | None
    stage: str
    session: requests.Session = field(default_factory=requests.Session)
    before: dict[str, float] = field(default_factory=dict)
    failed_queries: dict[str, int] = field(default_factory=dict)

    @property
    def gates(self) -> tuple[PromGate, ...]:
        return getattr(self.policy, self.stage) if self.policy else ()

    def record_before(self) -> None:
        """Read each relative gate's value before the flip; GateFailedError (nothing flipped yet) if one cannot be."""
        for gate in self.gates:
            if gate.relative:
                try:
                    self.before[gate.name] = query_value(self.policy, gate.query, self.session)
                except QueryError as exc:
                    raise GateFailedError(
                        f"PromQL gate {gate.name!r} ({self.stage}): its value before the flip cannot be read: {exc}",
                        hint="nothing was switched; fix the query or the Prometheus server, or drop the gate "
                             "from the policy") from None
                if self.before[gate.name] == 0:
                    raise GateFailedError(f"PromQL gate {gate.name!r} ({self.stage}): its value before the flip is 0, "
                                          "so a relative threshold means nothing",
                                          hint="make the gate absolute (relative: false), or query a series that "
                                               "is not 0 before the flip")

    def check(self, final: bool = False) -> list[GateResult]:
        """One result per gate. A query that cannot be answered fails its gate after `max_failed_queries` in a
        row, or at once when `final`."""
        results = []
        for gate in self.gates:
            label = f"prometheus {gate.name}"
            try:
                value = query_value(self.policy, gate.query, self.session)
            except QueryError as exc:
                misses = self.failed_queries.get(gate.name, 0) + 1
                self.failed_queries[gate.name] = misses
                passed = not final and misses < self.policy.max_failed_queries
                results.append(GateResult(label, passed, f"query not answered ({misses} in a row): {exc}"))
                continue
            self.failed_queries[gate.name] = 0
            before = self.before.get(gate.name)
            compared = value / before if gate.relative else value
            passed = COMPARISONS[gate.must_be](compared, gate.threshold)
            results.append(GateResult(label, passed, gate.describe(value, before)))
        return results


def with_results(verdict: Verdict, results: list[GateResult]) -> Verdict:
    """`verdict` with the PromQL gates' results added."""
    merged = verdict.results + results
    return Verdict(passed=all(r.passed for r in merged), final=verdict.final, results=merged)


def first_failure(results: list[GateResult]) -> str | None:
    """"<gate>: <detail>" of the first failed result, or None."""
    failed = [f"{r.gate}: {r.detail}" for r in results if not r.passed]
    return failed[0] if failed else None
