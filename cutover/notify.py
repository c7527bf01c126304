"""Announce workflow events (stage, shadow start and verdict, promote, auto-rollback, rollback) to webhooks.

The operator config's `notify:` section names the targets: generic JSON webhooks (the event as a JSON object)
and Slack-compatible incoming webhooks (`{"text": ...}`). Deliveries run on one background thread, in event
order, each attempt bounded by `timeout_s` and retried `retries` times, so sending never delays the workflow
(a rollback finishes before its announcement is even attempted). At exit the process waits at most
`timeout_s` for deliveries still queued, then drops them with a log line.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
from dataclasses import dataclass

import requests

from cutover.errors import ConfigError

log = logging.getLogger("cutover.notify")

KINDS = ("webhook", "slack")
EVENTS = ("stage", "shadow_start", "shadow_verdict", "promote", "auto_rollback", "rollback")
RETRY_PAUSE_S = 0.5


@dataclass(frozen=True)
class Target:
    kind: str
    url: str


@dataclass(frozen=True)
class NotifyConfig:
    targets: tuple[Target, ...]
    timeout_s: float = 5.0
    retries: int = 2


def parse_config(file, body) -> NotifyConfig:
    """The config file's `notify:` section, validated (ConfigError naming the field)."""
    def fail(name: str, problem: str) -> ConfigError:
        return ConfigError(f"{file}: field 'notify.{name}' {problem}",
                           hint="notify holds targets (each kind: webhook or slack, and url), timeout_s, retries")

    if not isinstance(body, dict):
        raise fail("", "must be a mapping with targets, timeout_s and retries")
    unknown = sorted(set(body) - {"targets", "timeout_s", "retries"})
    if unknown:
        raise fail(unknown[0], "is not a known field")
    timeout, retries = body.get("timeout_s", 5.0), body.get("retries", 2)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 60:
        raise fail("timeout_s", f"must be a number of seconds in (0, 60], found {timeout!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 10:
        raise fail("retries", f"must be a whole number 0..10, found {retries!r}")
    entries = body.get("targets")
    if not isinstance(entries, list) or not entries:
        raise fail("targets", "must be a non-empty list of {kind, url}")
    targets = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or entry.get("kind") not in KINDS or sorted(entry) != ["kind", "url"]:
            raise fail(f"targets[{index}]", f"must be a mapping of kind ({' or '.join(KINDS)}) and url, "
                                            f"found {entry!r}")
        if not isinstance(entry["url"], str) or not entry["url"].startswith(("http://", "https://")):
            raise fail(f"targets[{index}].url", f"must be an http(s) URL, found {entry['url']!r}")
        targets.append(Target(entry["kind"], entry["url"]))
    return NotifyConfig(tuple(targets), float(timeout), retries)


def send(config: NotifyConfig | None, event: str, summary: str, **fields) -> None:
    """Queue `event` for every target of `config` (nothing without one); returns at once."""
    if config is None:
        return
    payload = {"event": event, "summary": summary,
               "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **fields}
    _sender().put(config, payload)


def flush(timeout_s: float) -> bool:
    """Wait at most `timeout_s` for queued deliveries; True when none is left."""
    return _SENDER is None or _SENDER.flush(timeout_s)


def body_for(target: Target, payload: dict) -> dict:
    if target.kind == "slack":
        return {"text": f"cutover {payload['event']}: {payload['summary']}"}
    return payload


class _Sender:
    """One daemon thread delivering queued events in order."""

    def __init__(self):
        self.pending: queue.Queue = queue.Queue()
        self.longest_timeout_s = 0.0
        threading.Thread(target=self._run, name="cutover-notify", daemon=True).start()
        atexit.register(self._at_exit)

    def put(self, config: NotifyConfig, payload: dict) -> None:
        self.longest_timeout_s = max(self.longest_timeout_s, config.timeout_s)
        for target in config.targets:
            self.pending.put((config, target, payload))

    def flush(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.pending.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self.pending.unfinished_tasks

    def _at_exit(self) -> None:
        if not self.flush(self.longest_timeout_s):
            log.warning("cutover: %d notification(s) not delivered before exit", self.pending.unfinished_tasks)

    def _run(self) -> None:
        session = requests.Session()
        while True:
            config, target, payload = self.pending.get()
            try:
                _deliver(session, config, target, payload)
            finally:
                self.pending.task_done()


def _deliver(session: requests.Session, config: NotifyConfig, target: Target, payload: dict) -> None:
    problem = ""
    for attempt in range(config.retries + 1):
        if attempt:
            time.sleep(RETRY_PAUSE_S)
        try:
            reply = session.post(target.url, json=body_for(target, payload), timeout=config.timeout_s)
        except requests.RequestException as exc:
            problem = f"{type(exc).__name__}: {exc}"
            continue
        if reply.ok:
            return
        problem = f"HTTP {reply.status_code}"
        if reply.status_code < 500 and reply.status_code != 429:
            break  # refused for good: retrying sends the same
    log.warning("cutover: notification %s to %s not delivered: %s", payload["event"], target.url, problem)


_SENDER: _Sender | None = None
_SENDER_LOCK = threading.Lock()


def _sender() -> _Sender:
    global _SENDER
    with _SENDER_LOCK:
        if _SENDER is None:
            _SENDER = _Sender()
        return _SENDER
