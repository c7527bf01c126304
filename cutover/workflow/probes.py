"""HTTP probes of a serving host: /health and the counters of /metrics (Prometheus text), over requests.

The same sample feeds the shadow baseline and the post-promote watch, so both measure the same things:
verify steps per second, error counters, and SGLang's speculative accept length when the server exposes it.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import asdict, dataclass

import requests

from cutover.config import Host

VERIFY_STEPS = "cutover_verify_steps_total"
ERRORS = "cutover_errors_total"
NONFINITE = "cutover_nonfinite_total"
ACCEPT_LENGTH = "sglang:spec_accept_length"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def server_url(host: Host) -> str:
    """http://<serving_address or ansible_host>:<serving_port> of the host's server."""
    return f"http://{host.serving_address}:{host.serving_port}"


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {metric name: value summed over its label sets}."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or line.startswith("#"):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        values[match.group(1)] = values.get(match.group(1), 0.0) + value
    return values


@dataclass
class ServerSample:
    """One probe of one host's server."""

    at: float
    healthy: bool
    error: str = ""
    verify_steps_total: float | None = None
    errors_total: float | None = None
    nonfinite_total: float | None = None
    accept_length: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def probe(host: Host, session: requests.Session, timeout_s: float = 3.0) -> ServerSample:
    """Probe /health, then /metrics; a failure is recorded in the sample, never raised."""
    base = server_url(host)
    now = time.time()
    try:
        health = session.get(f"{base}/health", timeout=timeout_s)
        if health.status_code != 200:
            return ServerSample(at=now, healthy=False, error=f"/health answered HTTP {health.status_code}")
        metrics = session.get(f"{base}/metrics", timeout=timeout_s)
        metrics.raise_for_status()
    except requests.RequestException as exc:
        return ServerSample(at=now, healthy=False, error=f"{base} unreachable: {type(exc).__name__}")
    values = parse_metrics(metrics.text)
    accept = values.get(ACCEPT_LENGTH)
    return ServerSample(
        at=now,
        healthy=True,
        verify_steps_total=values.get(VERIFY_STEPS),
        errors_total=values.get(ERRORS),
        nonfinite_total=values.get(NONFINITE),
        accept_length=accept if accept is not None and math.isfinite(accept) and accept > 0 else None,
    )


DRIVEN_LOAD_NOTE = "the shadow run drove its own load (--load), so its rate is not the host's own traffic"


def baseline(samples: list[ServerSample], driven_load: bool = False) -> dict:
    """Summarise healthy samples of a window: verify steps/s, errors/s and mean accept length. Under a load
    the run drove itself no verify rate is kept (a watch without that load would read it as a regression)."""
    healthy = [s for s in samples if s.healthy and s.verify_steps_total is not None]
    result: dict = {"samples": len(healthy), "verify_rate": None, "error_rate": None, "accept_length": None}
    if driven_load:
        result["verify_rate_note"] = DRIVEN_LOAD_NOTE
    if len(healthy) >= 2 and healthy[-1].at > healthy[0].at:
        span = healthy[-1].at - healthy[0].at
        if not driven_load:
            result["verify_rate"] = (healthy[-1].verify_steps_total - healthy[0].verify_steps_total) / span
        if healthy[0].errors_total is not None and healthy[-1].errors_total is not None:
            result["error_rate"] = (healthy[-1].errors_total - healthy[0].errors_total) / span
    accepts = [s.accept_length for s in healthy if s.accept_length is not None]
    if accepts:
        result["accept_length"] = sum(accepts) / len(accepts)
    return result
