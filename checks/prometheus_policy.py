"""The `prometheus:` section of a gate policy: PromQL gates for shadow and the promote watch (docs/gates.md).

Each gate is a PromQL query that must return one sample, a comparison (`must_be`) and a threshold; a
`relative` gate compares `value / value before the flip` with the threshold. `checks/prometheus.py` runs them.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

from cutover.errors import ConfigError

COMPARISONS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
STAGES = ("shadow", "promote")
GATE_FIELDS = {"name", "query", "must_be", "threshold", "relative"}
SECTION_FIELDS = {"url", "timeout_s", "max_failed_queries"} | set(STAGES)


@dataclass(frozen=True)
class PromGate:
    name: str
    query: str
    must_be: str
    threshold: float
    relative: bool = False

    def describe(self, value: float, before: float | None) -> str:
        need = f"must be {self.must_be} {self.threshold:g}"
        if self.relative:
            return f"{value:g} / {before:g} before the flip = {value / before:g}, {need}"
        return f"{value:g}, {need}"


@dataclass(frozen=True)
class PrometheusPolicy:
    url: str
    timeout_s: float = 10.0
    max_failed_queries: int = 3
    shadow: tuple[PromGate, ...] = ()
    promote: tuple[PromGate, ...] = ()


def parse_section(source: str, body) -> PrometheusPolicy:
    """The policy's `prometheus:` section, validated (ConfigError naming the field)."""
    def fail(name: str, problem: str) -> ConfigError:
        return ConfigError(f"policy {source}: field 'prometheus.{name}' {problem}",
                           hint="see docs/gates.md (Gates on Prometheus series) for the section's fields")

    if not isinstance(body, dict):
        raise fail("", "must be a mapping with url and shadow and/or promote gates")
    unknown = sorted(set(body) - SECTION_FIELDS)
    if unknown:
        raise fail(unknown[0], f"is not a known field (known: {', '.join(sorted(SECTION_FIELDS))})")
    url = body.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise fail("url", f"must be the Prometheus server's http(s) URL, got {url!r}")
    timeout = body.get("timeout_s", 10.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise fail("timeout_s", f"must be a positive number of seconds, got {timeout!r}")
    failures = body.get("max_failed_queries", 3)
    if isinstance(failures, bool) or not isinstance(failures, int) or failures < 1:
        raise fail("max_failed_queries", f"must be a whole number >= 1, got {failures!r}")
    gates = {stage: tuple(_parse_gate(fail, f"{stage}[{i}]", gate) for i, gate in enumerate(_list(fail, stage, body)))
             for stage in STAGES}
    return PrometheusPolicy(url=url.rstrip("/"), timeout_s=float(timeout), max_failed_queries=failures, **gates)


def _list(fail, stage: str, body: dict) -> list:
    gates = body.get(stage) or []
    if not isinstance(gates, list):
        raise fail(stage, "must be a list of gates (name, query, must_be, threshold, relative)")
    return gates


def _parse_gate(fail, where: str, gate) -> PromGate:
    if not isinstance(gate, dict):
        raise fail(where, "must be a mapping with name, query, must_be and threshold")
    unknown = sorted(set(gate) - GATE_FIELDS)
    if unknown:
        raise fail(f"{where}.{unknown[0]}", f"is not a known field of a gate (known: {', '.join(sorted(GATE_FIELDS))})")
    for name in ("name", "query"):
        if not isinstance(gate.get(name), str) or not gate[name].strip():
            raise fail(f"{where}.{name}", f"must be a non-empty string, got {gate.get(name)!r}")
    if gate.get("must_be") not in COMPARISONS:
        raise fail(f"{where}.must_be", f"must be one of {', '.join(COMPARISONS)}, got {gate.get('must_be')!r}")
    threshold = gate.get("threshold")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise fail(f"{where}.threshold", f"must be a finite number, got {threshold!r}")
    relative = gate.get("relative", False)
    if not isinstance(relative, bool):
        raise fail(f"{where}.relative", f"must be true or false, got {relative!r}")
    return PromGate(gate["name"], gate["query"], gate["must_be"], float(threshold), relative)
