"""HTTP probes of a serving host: /health and the counters of /metrics (Prometheus text), over requests.

The same sample feeds the shadow baseline and the post-promote watch, so both measure the same things:
verify steps per second, error counters, and, when the server exposes them, SGLang's speculative accept length and
its generated tokens per second.
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
GENERATION_TOKENS = "sglang:generation_tokens_total"  # counter: tokens of the requests finished so far
GEN_THROUGHPUT = "sglang:gen_throughput"  # gauge: tokens/s over the scheduler's last log interval
AVERAGED_SERIES = frozenset({ACCEPT_LENGTH})
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def server_url(host: Host) -> str:
    """http://<serving_address or ansible_host>:<serving_port> of the host's server."""
    return f"http://{host.serving_address}:{host.serving_port}"


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {metric name: value summed over its label sets}; a per-scheduler average (the accept
    length, one label set per data-parallel rank) is averaged instead."""
    seen: dict[str, list[float]] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or line.startswith("#"):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        seen.setdefault(match.group(1), []).append(value)
    return {name: sum(values) / len(values) if name in AVERAGED_SERIES else sum(values)
            for name, values in seen.items()}


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
    generation_tokens_total: float | None = None
    gen_throughput: float | None = None

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
    throughput = values.get(GEN_THROUGHPUT)
    return ServerSample(
        at=now,
        healthy=True,
        verify_steps_total=values.get(VERIFY_STEPS),
        errors_total=values.get(ERRORS),
        nonfinite_total=values.get(NONFINITE),
        accept_length=accept if accept is not None and math.isfinite(accept) and accept > 0 else None,
        generation_tokens_total=values.get(GENERATION_TOKENS),
        gen_throughput=throughput if throughput is not None and math.isfinite(throughput) and throughput >= 0 else None,
    )


def counter_rate(samples: list[ServerSample], counter: str, minimum: int = 2) -> float | None:
    """How fast `counter` rose per second from the first to the last of `samples` that carry it (None below
    `minimum` such samples or without time between them)."""
    counted = [s for s in samples if getattr(s, counter) is not None]
    if len(counted) < minimum or counted[-1].at <= counted[0].at:
        return None
    return (getattr(counted[-1], counter) - getattr(counted[0], counter)) / (counted[-1].at - counted[0].at)


def mean_of(samples: list[ServerSample], attribute: str) -> float | None:
    """The mean of `attribute` over the samples that carry it (None when none does)."""
    values = [getattr(s, attribute) for s in samples if getattr(s, attribute) is not None]
    return sum(values) / len(values) if values else None


def tokens_per_s(samples: list[ServerSample], minimum: int = 2) -> float | None:
    """Generated tokens/s: the rise of SGLang's generation-token counter over `samples` (at least `minimum` of
    them), else the mean of its throughput gauge; None when the server exposes neither."""
    rate = counter_rate(samples, "generation_tokens_total", minimum)
    return rate if rate is not None else mean_of(samples, "gen_throughput")


DRIVEN_LOAD_NOTE = "the shadow run drove its own load (--load), so its rate is not the host's own traffic"


def baseline(samples: list[ServerSample], driven_load: bool = False) -> dict:
    """Summarise healthy samples of a window: verify steps/s, errors/s, mean accept length and tokens/s. Under a
    load the run drove itself no verify rate or tokens/s is kept (a watch without that load would read them as a
    regression)."""
    healthy = [s for s in samples if s.healthy and s.verify_steps_total is not None]
    result: dict = {
        "samples": len(healthy),
        "verify_rate": None if driven_load else counter_rate(healthy, "verify_steps_total"),
        "error_rate": counter_rate(healthy, "errors_total"),
        "accept_length": mean_of(healthy, "accept_length"),
        "tokens_per_s": None if driven_load else tokens_per_s(healthy),
    }
    if driven_load:
        result["verify_rate_note"] = DRIVEN_LOAD_NOTE
    return result
