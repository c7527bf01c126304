"""`--load FILE`: drive prompts at the inventory's serving hosts' /generate endpoint at a bounded rate.

The load file (YAML or JSON):

    rate_per_s: 2          # requests per second, per host (at most 20)
    max_new_tokens: 32     # per request (at most 512)
    timeout_s: 30          # per request
    prompts: ["...", "..."]

Requests go only to the serving URLs of the hosts in the run; at most MAX_IN_FLIGHT per host are open at
once, and a tick whose request cannot start is counted as skipped, never queued.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import requests
import yaml

from cutover.config import Host
from cutover.errors import ConfigError
from cutover.workflow.probes import server_url

MAX_RATE_PER_S = 20.0
MAX_NEW_TOKENS = 512
MAX_IN_FLIGHT = 4


@dataclass(frozen=True)
class LoadSpec:
    prompts: tuple[str, ...]
    rate_per_s: float = 1.0
    max_new_tokens: int = 32
    timeout_s: float = 30.0


def load_spec(path: str | Path) -> LoadSpec:
    """Read and validate a load file; messages name the file and the field."""
    source = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(
            f"load file {source}: cannot read it ({exc.strerror})", hint="pass an existing file to --load"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"load file {source}: not valid YAML/JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"load file {source}: must be a mapping with 'prompts' and 'rate_per_s'")
    unknown = sorted(set(data) - {"prompts", "rate_per_s", "max_new_tokens", "timeout_s"})
    if unknown:
        raise ConfigError(
            f"load file {source}: field '{unknown[0]}' is not known",
            hint="known fields: prompts, rate_per_s, max_new_tokens, timeout_s",
        )
    prompts = data.get("prompts")
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) and p for p in prompts):
        raise ConfigError(f"load file {source}: field 'prompts' must be a non-empty list of strings")
    limits = {
        "rate_per_s": (float, MAX_RATE_PER_S),
        "max_new_tokens": (int, MAX_NEW_TOKENS),
        "timeout_s": (float, 600.0),
    }
    values = {}
    for name, (kind, top) in limits.items():
        if name not in data:
            continue
        value = data[name]
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 < value <= top
            or (kind is int and not float(value).is_integer())
        ):
            raise ConfigError(f"load file {source}: field '{name}' must be a number in (0, {top:g}], got {value!r}")
        values[name] = kind(value)
    return LoadSpec(prompts=tuple(prompts), **values)


@dataclass
class LoadCounters:
    sent: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    last_error: str = ""


@dataclass
class LoadDriver:
    """Background thread sending `spec`'s prompts round-robin to every host's /generate."""

    spec: LoadSpec
    hosts: list[Host]
    counters: dict[str, LoadCounters] = field(default_factory=dict)

    def __post_init__(self):
        self._urls = {host.name: f"{server_url(host)}/generate" for host in self.hosts}
        self.counters = {name: LoadCounters() for name in self._urls}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._in_flight = {name: 0 for name in self._urls}
        self._pool = ThreadPoolExecutor(max_workers=MAX_IN_FLIGHT * len(self._urls), thread_name_prefix="cutover-load")
        self._thread = threading.Thread(target=self._run, name="cutover-load", daemon=True)

    def start(self) -> "LoadDriver":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def snapshot(self) -> dict:
        with self._lock:
            return {name: vars(c).copy() for name, c in self.counters.items()}

    def _run(self) -> None:
        interval = 1.0 / self.spec.rate_per_s
        index = 0
        next_at = time.monotonic()
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += interval
            prompt = self.spec.prompts[index % len(self.spec.prompts)]
            index += 1
            for name in self._urls:
                with self._lock:
                    if self._in_flight[name] >= MAX_IN_FLIGHT:
                        self.counters[name].skipped += 1
                        continue
                    self._in_flight[name] += 1
                    self.counters[name].sent += 1
                self._pool.submit(self._send, name, prompt)

    def _send(self, name: str, prompt: str) -> None:
        body = {"text": prompt, "sampling_params": {"max_new_tokens": self.spec.max_new_tokens}}
        error = ""
        try:
            response = requests.post(self._urls[name], json=body, timeout=self.spec.timeout_s)
            if response.status_code != 200:
                error = f"HTTP {response.status_code}"
        except requests.RequestException as exc:
            error = type(exc).__name__
        with self._lock:
            self._in_flight[name] -= 1
            counter = self.counters[name]
            if error:
                counter.failed += 1
                counter.last_error = error
            else:
                counter.ok += 1
