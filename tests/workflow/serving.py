"""A serving host on the local filesystem: every rank runs the real plugin runtime (CPU reference kernels,
control thread polling control.json, heartbeats, stats drain, audit), optionally with verify traffic through
its dispatcher, so shadow and promote run end to end against the real protocol without SGLang."""

from __future__ import annotations

import http.server
import os
import threading
import time
from typing import Callable

from cutover.plugin.dispatch import verify_site
from cutover.plugin.runtime import PluginRuntime
from cutover.plugin.snapshot import GraphSnapshots
from cutover.servingstack import distinct_stacks
from kernel_ext.reference import reference_extend_attention_fwd
from kernel_ext.testing import make_verify_batch

LAYERS = (0, 1)


class LocalServer:
    """The ranks of `host`, serving `release_id`; `traffic` drives verify steps over LAYERS on every rank;
    `audit_max_bytes` overrides the audit's snapshot limit."""

    def __init__(self, host, release_id: str = "rel-a", traffic: bool = True, audit_max_bytes: int | None = None):
        os.makedirs(host.paths.release(release_id), exist_ok=True)
        if not os.path.islink(host.paths.current):
            os.symlink(host.paths.release(release_id), host.paths.current)
        self.runtimes = [
            PluginRuntime(host.paths, rank, "cpu", poll_s=0.05, audit_interval_s=0.2) for rank in range(host.tp_size)
        ]
        if audit_max_bytes is not None:  # 0: every call is "too large" to audit, as big eager batches are
            for runtime in self.runtimes:  # both ways: the eager audit and the device snapshots' staging area
                runtime.audit.max_snapshot_bytes = audit_max_bytes
                runtime.snapshots = GraphSnapshots(runtime.device, runtime.audit, interval_s=0.2,
                                                   capacity_bytes=audit_max_bytes)
        for runtime in self.runtimes:
            runtime.start()
        _wait_for(lambda: all(os.path.exists(host.paths.heartbeat(r.rank)) for r in self.runtimes), "heartbeats")
        self._stop = threading.Event()
        self._traffic = threading.Thread(target=self._drive, daemon=True) if traffic else None
        if self._traffic:
            self._traffic.start()

    @property
    def stacks(self) -> list[dict]:
        """The serving stacks its ranks report, as a shadow verdict records them."""
        return distinct_stacks(runtime.stack for runtime in self.runtimes)

    def _drive(self) -> None:
        batch = make_verify_batch(8, 8, 2, [30, 55], seed=0)
        dispatchers = [runtime.wrap(reference_extend_attention_fwd) for runtime in self.runtimes]
        while not self._stop.wait(0.01):
            for dispatcher in dispatchers:
                for layer in LAYERS:
                    with verify_site(layer):
                        dispatcher(*batch.args())

    def stop(self) -> None:
        self._stop.set()
        if self._traffic:
            self._traffic.join()
        for runtime in self.runtimes:
            runtime.stop()


class MetricsFront:
    """A stand-in for the serving process's HTTP front (no model server exists here): /health answers 200 and
    /metrics what `metrics()` returns at each probe."""

    def __init__(self, metrics: Callable[[], str]):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server interface
                body = (metrics() if self.path == "/metrics" else "ok").encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()


def _wait_for(condition, what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s:g} s")
        time.sleep(0.02)
