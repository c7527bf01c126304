"""The sandbox server process: supervises one process per rank and answers SGLang-shaped HTTP endpoints.

Like SGLang, the server is down when any rank is: a rank process that exits takes the whole server down
(the remaining ranks are stopped, exit status 1). Rank processes get SIGKILL when the server dies, even by
SIGKILL (PR_SET_PDEATHSIG), so no rank outlives its server.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cutover.hostprotocol.hostlayout import CUTOVER_ROOT_ENV, MODES, STATE_DIR_ENV, Heartbeat, HostPaths
from cutover.plugin.hooks import RANK_ENV
from cutover.plugin.metrics import MULTIPROC_ENV

log = logging.getLogger("cutover.sandbox")

HEARTBEAT_FRESH_S = 10.0
SANDBOX_NOTE = "cutover sandbox: a stand-in for an SGLang server driving synthetic verify traffic; not a model"
_PR_SET_PDEATHSIG = 1


@dataclass
class ServerConfig:
    state_dir: str
    cutover_root: str
    port: int
    ranks: int
    device: str = "cpu"
    host: str = "127.0.0.1"
    layers: int = 6
    step_interval_s: float = 0.1

    @property
    def paths(self) -> HostPaths:
        return HostPaths(cutover_root=self.cutover_root, state_dir=self.state_dir)

    @property
    def kernel_label(self) -> str:
        return "cuda" if self.device == "cuda" else "reference (no GPU)"

    @property
    def prometheus_dir(self) -> str:
        """The ranks' prometheus_client multiprocess directory, as SGLang keeps one with metrics enabled."""
        return os.path.join(self.state_dir, "sandbox", "prometheus")

    def rank_device(self, rank: int) -> str:
        if self.device != "cuda":
            return "cpu"
        import torch

        return f"cuda:{rank % max(1, torch.cuda.device_count())}"


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class RankSupervisor:
    """Starts the rank processes and watches them."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self.procs: dict[int, subprocess.Popen] = {}
        self.failures = 0
        self.lost: str = ""

    def start(self) -> None:
        logs = os.path.join(self.config.state_dir, "sandbox")
        os.makedirs(logs, exist_ok=True)
        shutil.rmtree(self.config.prometheus_dir, ignore_errors=True)  # a new server's counters start at zero
        os.makedirs(self.config.prometheus_dir)
        for rank in range(self.config.ranks):
            env = dict(os.environ, **{STATE_DIR_ENV: self.config.state_dir, MULTIPROC_ENV: self.config.prometheus_dir,
                                      CUTOVER_ROOT_ENV: self.config.cutover_root, RANK_ENV: str(rank)})
            with open(os.path.join(logs, f"rank-{rank}.log"), "ab") as out:
                self.procs[rank] = subprocess.Popen(
                    [sys.executable, "-m", "cutover.sandbox", "rank", "--rank", str(rank),
                     "--device", self.config.rank_device(rank), "--layers", str(self.config.layers),
                     "--step-interval", str(self.config.step_interval_s), "--state-dir", self.config.state_dir],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                    preexec_fn=_die_with_parent)

    def first_exit(self) -> tuple[int, int] | None:
        for rank, proc in self.procs.items():
            code = proc.poll()
            if code is not None:
                return rank, code
        return None

    def stop(self, timeout_s: float = 10.0) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def heartbeats(self) -> dict[int, Heartbeat | None]:
        beats = {}
        for rank in range(self.config.ranks):
            try:
                with open(self.config.paths.heartbeat(rank)) as handle:
                    beat = Heartbeat.from_json(handle.read())
            except (OSError, ValueError, TypeError):
                beat = None
            proc = self.procs.get(rank)
            beats[rank] = beat if beat is not None and proc is not None and beat.pid == proc.pid else None
        return beats

    def health(self) -> tuple[bool, str]:
        if self.lost:
            return False, self.lost
        now = time.time()
        for rank, beat in self.heartbeats().items():
            if beat is None:
                return False, f"rank {rank} has not written a heartbeat yet"
            if now - beat.written_at > HEARTBEAT_FRESH_S:
                return False, f"rank {rank} heartbeat is {now - beat.written_at:.0f}s old"
        return True, "ok"


def _metric(name: str, value, **labels) -> str:
    label_text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{label_text}}} {value}" if label_text else f"{name} {value}"


def render_metrics(config: ServerConfig, supervisor: RankSupervisor, generate_requests: int,
                   request_errors: int) -> str:
    """Prometheus text of the sandbox: per-rank mode and counters from the ranks' heartbeats."""
    lines = [
        "# HELP cutover_sandbox_info The cutover sandbox (a stand-in for SGLang, not a model).",
        "# TYPE cutover_sandbox_info gauge",
        _metric("cutover_sandbox_info", 1, kernel=config.kernel_label, device=config.device),
    ]
    per_rank = {
        "cutover_verify_steps_total": ("counter", "Target-verify steps seen by the plugin.", "verify_steps"),
        "cutover_verify_calls_total": ("counter", "Verify attention calls (steps x layers).", "verify_calls"),
        "cutover_shadow_compared_total": ("counter", "Verify calls compared in shadow mode.", "compared"),
    }
    beats = supervisor.heartbeats()
    rank_errors = 0
    for name, (kind, help_text, key) in per_rank.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines += [_metric(name, beat.counters.get(key, 0), rank=rank) for rank, beat in beats.items() if beat]
    lines += ["# HELP cutover_nonfinite_total Shadow comparisons with a non-finite output, per kernel.",
              "# TYPE cutover_nonfinite_total counter"]
    lines += [_metric("cutover_nonfinite_total", beat.counters.get(f"nonfinite_{kernel}", 0), rank=rank,
                      kernel=kernel) for rank, beat in beats.items() if beat for kernel in ("custom", "stock")]
    lines += ["# HELP cutover_mode 1 for the mode each rank runs now.", "# TYPE cutover_mode gauge"]
    lines += [_metric("cutover_mode", int(beat.mode_active == mode), rank=rank, mode=mode)
              for rank, beat in beats.items() if beat for mode in MODES]
    lines += ["# HELP cutover_generation_seen Control generation each rank has seen.",
              "# TYPE cutover_generation_seen gauge"]
    lines += [_metric("cutover_generation_seen", beat.generation_seen, rank=rank)
              for rank, beat in beats.items() if beat]
    for beat in beats.values():
        if beat:
            rank_errors += int(beat.counters.get("errors", 0)) + int(beat.counters.get("audit_errors", 0))
    lines += ["# HELP cutover_errors_total Rank failures, plugin errors and failed requests.",
              "# TYPE cutover_errors_total counter",
              _metric("cutover_errors_total", supervisor.failures + rank_errors + request_errors),
              "# HELP cutover_generate_requests_total /generate requests answered.",
              "# TYPE cutover_generate_requests_total counter",
              _metric("cutover_generate_requests_total", generate_requests)]
    return "\n".join(lines) + "\n" + plugin_series(config.prometheus_dir)


def plugin_series(prometheus_dir: str) -> str:
    """The series the ranks wrote into the multiprocess directory, as SGLang's own /metrics shows them: the
    plugin's (docs/metrics.md) and rank 0's stand-ins for SGLang's generated tokens and accept length."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    if not os.path.isdir(prometheus_dir):
        return ""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=prometheus_dir)
    return generate_latest(registry).decode()


def synthetic_completion(prompt: str, max_new_tokens: int) -> dict:
    words = max(1, min(int(max_new_tokens), 64))
    return {
        "text": " ".join(["sandbox"] * words),
        "meta_info": {"sandbox": True, "note": SANDBOX_NOTE, "prompt_tokens": len(prompt.split()),
                      "completion_tokens": words, "finish_reason": {"type": "length", "length": words}},
    }


class SandboxServer:
    """HTTP front of the sandbox."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self.supervisor = RankSupervisor(config)
        self.generate_requests = 0
        self.request_errors = 0
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((config.host, config.port), self._handler())
        self.httpd.daemon_threads = True

    def server_info(self) -> dict:
        beats = self.supervisor.heartbeats()
        return {
            "sandbox": True, "note": SANDBOX_NOTE, "version": "cutover-sandbox", "tp_size": self.config.ranks,
            "state_dir": self.config.state_dir,
            "device": self.config.device, "kernel": self.config.kernel_label, "layers": self.config.layers,
            "attention_backend": "triton (stand-in)", "speculative_algorithm": "synthetic DDTree verify",
            "ranks": {str(r): (beat.mode_active if beat else None) for r, beat in beats.items()},
        }

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt, *args):  # keep the log for lifecycle events
                return

            def _send(self, code: int, body: str, content_type: str = "application/json") -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/health":
                    ok, why = server.supervisor.health()
                    self._send(200 if ok else 503, json.dumps({"status": "ok" if ok else "unavailable",
                                                               "reason": why, "sandbox": True, "pid": os.getpid(),
                                                               "state_dir": server.config.state_dir}))
                elif self.path == "/get_server_info":
                    self._send(200, json.dumps(server.server_info()))
                elif self.path == "/metrics":
                    self._send(200, render_metrics(server.config, server.supervisor, server.generate_requests,
                                                   server.request_errors), "text/plain; version=0.0.4")
                else:
                    self._send(404, json.dumps({"error": f"no such endpoint {self.path}", "sandbox": True}))

            def do_POST(self):
                if self.path != "/generate":
                    self._send(404, json.dumps({"error": f"no such endpoint {self.path}", "sandbox": True}))
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                    text = body["text"]
                    max_new = int((body.get("sampling_params") or {}).get("max_new_tokens", 16))
                    if isinstance(text, list):
                        answer = [synthetic_completion(str(t), max_new) for t in text]
                    else:
                        answer = synthetic_completion(str(text), max_new)
                except (ValueError, KeyError, TypeError) as exc:
                    with server._lock:
                        server.request_errors += 1
                    self._send(400, json.dumps({"error": f"bad /generate request: {exc}; expected "
                                                         '{"text": ..., "sampling_params": {...}}',
                                                "sandbox": True}))
                    return
                with server._lock:
                    server.generate_requests += 1
                self._send(200, json.dumps(answer))

        return Handler

    def serve(self) -> int:
        """Run until SIGTERM/SIGINT (exit 0) or until a rank dies (exit 1)."""
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        self.supervisor.start()
        threading.Thread(target=self.httpd.serve_forever, name="sandbox-http", daemon=True).start()
        log.warning("sandbox serving on %s:%s with %d ranks (%s)", self.config.host, self.config.port,
                    self.config.ranks, self.config.kernel_label)
        code = 0
        while not stop.wait(0.2):
            exited = self.supervisor.first_exit()
            if exited:
                rank, status = exited
                self.supervisor.failures += 1
                self.supervisor.lost = f"rank {rank} exited with status {status}; the sandbox goes down with it"
                log.error("sandbox: %s", self.supervisor.lost)
                code = 1
                break
        self.supervisor.stop()
        self.httpd.shutdown()
        log.warning("sandbox stopped (exit %d)", code)
        return code
