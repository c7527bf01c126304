"""Start, stop and inspect the sandbox server as a daemon (setsid, pid file and logs in the state dir).

    <state_dir>/sandbox/server.pid    pid of the server (a session leader: its process group holds the ranks)
    <state_dir>/sandbox/server.json   the running server's configuration (port, ranks, device, started_at)
    <state_dir>/sandbox/server.log    server log; rank-<r>.log per rank

``up`` is idempotent (a healthy server with the same port and ranks is left alone), returns only once
/health answers 200, and on failure stops what it started and raises with the log's tail. ``restart`` is
``down`` then ``up``. ``down`` of a stopped sandbox is a no-op.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass

from cutover.errors import HostError
from cutover.hostprotocol.hostlayout import Heartbeat, atomic_write_text
from cutover.sandbox.server import ServerConfig

START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 15.0


def _dir(state_dir: str) -> str:
    return os.path.join(state_dir, "sandbox")


def _pidfile(state_dir: str) -> str:
    return os.path.join(_dir(state_dir), "server.pid")


def _configfile(state_dir: str) -> str:
    return os.path.join(_dir(state_dir), "server.json")


def _logfile(state_dir: str) -> str:
    return os.path.join(_dir(state_dir), "server.log")


def running_pid(state_dir: str) -> int | None:
    """The pid in the pid file if that process is alive and is a sandbox server, else None."""
    try:
        with open(_pidfile(state_dir)) as handle:
            pid = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().split(b"\0")
    except OSError:
        return None
    return pid if b"cutover.sandbox" in cmdline and b"serve" in cmdline else None


@dataclass
class Probe:
    """What answered /health on a port: nothing, something else, or a sandbox (healthy or not)."""

    answered: bool
    healthy: bool = False
    reason: str = ""
    state_dir: str | None = None  # set when the answer came from a cutover sandbox


def probe_health(host: str, port: int, timeout_s: float = 2.0) -> Probe:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=timeout_s) as reply:
            body, healthy = reply.read(), reply.status == 200
    except urllib.error.HTTPError as exc:
        body, healthy = exc.read(), False
    except (OSError, ValueError) as exc:
        return Probe(False, reason=f"no answer on {host}:{port}: {exc}")
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not data.get("sandbox"):
        return Probe(True, reason=f"{host}:{port} answers, but not as a cutover sandbox")
    return Probe(True, healthy, data.get("reason", ""), data.get("state_dir"))


def _refuse_taken_port(config: ServerConfig) -> None:
    """HostError when another program (or another state dir's sandbox) already serves the port."""
    probe = probe_health(config.host, config.port)
    if not probe.answered:
        return
    if probe.state_dir is None:
        raise HostError(f"port {config.port} on {config.host} is in use by another program ({probe.reason})",
                        hint="stop that program or pick another serving_port")
    if probe.state_dir != config.state_dir:
        raise HostError(f"port {config.port} is used by the sandbox of state dir {probe.state_dir}",
                        hint=f"run `python -m cutover.sandbox down --state-dir {probe.state_dir}` "
                             "or pick another serving_port")


def _log_tail(state_dir: str, lines: int = 15) -> str:
    try:
        with open(_logfile(state_dir), errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return "(no server log)"


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): .+$")


def _startup_cause(state_dir: str) -> tuple[str, str] | None:
    """The exception that ended a rank or the server while starting (e.g. "ModuleNotFoundError: No module named
    'torch'") and the log that holds it, read from the last lines of the rank logs, then the server log."""
    logs = sorted(glob.glob(os.path.join(_dir(state_dir), "rank-*.log"))) + [_logfile(state_dir)]
    for path in logs:
        try:
            with open(path, errors="replace") as handle:
                lines = handle.readlines()[-40:]
        except OSError:
            continue
        for line in reversed(lines):
            if _EXCEPTION_LINE.match(line.strip()):
                return line.strip(), path
    return None


def status(state_dir: str) -> dict:
    """Whether the sandbox runs, its configuration, health and each rank's heartbeat."""
    pid = running_pid(state_dir)
    try:
        with open(_configfile(state_dir)) as handle:
            config = json.load(handle)
    except (OSError, ValueError):
        config = {}
    result = {"running": pid is not None, "pid": pid, "config": config, "healthy": False, "health": "not running",
              "ranks": {}, "sandbox": True}
    if pid is None or not config:
        return result
    probe = probe_health(config.get("host", "127.0.0.1"), config["port"])
    mine = probe.state_dir == state_dir
    result["healthy"] = probe.healthy and mine
    result["health"] = ("ok" if probe.healthy else probe.reason) if mine or not probe.answered else (
        f"port {config['port']} answered by another sandbox ({probe.state_dir})")
    for rank in range(int(config.get("ranks", 0))):
        try:
            with open(os.path.join(state_dir, "runtime", f"rank-{rank}.json")) as handle:
                beat = Heartbeat.from_json(handle.read())
            result["ranks"][str(rank)] = {"mode_active": beat.mode_active, "generation_seen": beat.generation_seen,
                                          "pid": beat.pid, "kernel": beat.kernel, "reason": beat.reason,
                                          "age_s": round(time.time() - beat.written_at, 1)}
        except (OSError, ValueError, TypeError):
            result["ranks"][str(rank)] = None
    return result


def up(config: ServerConfig, timeout_s: float = START_TIMEOUT_S) -> str:
    """Start the sandbox unless the same one is already healthy; return once /health answers 200."""
    state = status(config.state_dir)
    if state["running"]:
        same = (state["config"].get("port"), state["config"].get("ranks"), state["config"].get("device")) == (
            config.port, config.ranks, config.device)
        if same and state["healthy"]:
            return f"sandbox already running (pid {state['pid']}, port {config.port}); nothing changed"
        down(config.state_dir)
    _refuse_taken_port(config)
    os.makedirs(_dir(config.state_dir), exist_ok=True)
    command = [sys.executable, "-m", "cutover.sandbox", "serve", "--state-dir", config.state_dir,
               "--cutover-root", config.cutover_root, "--port", str(config.port), "--ranks", str(config.ranks),
               "--device", config.device, "--host", config.host, "--layers", str(config.layers),
               "--step-interval", str(config.step_interval_s)]
    with open(_logfile(config.state_dir), "ab") as log:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    atomic_write_text(_pidfile(config.state_dir), f"{proc.pid}\n")
    atomic_write_text(_configfile(config.state_dir), json.dumps(dict(asdict(config), started_at=time.time()),
                                                                sort_keys=True))
    deadline = time.monotonic() + timeout_s
    why = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            cause = _startup_cause(config.state_dir)
            raise HostError(f"sandbox server exited with status {proc.returncode} while starting"
                            + (f": {cause[0]} (in {cause[1]})" if cause else "")
                            + f"; log tail:\n{_log_tail(config.state_dir)}",
                            hint=(f"install what is missing into the environment of {sys.executable} "
                                  "(scripts/setup.sh installs everything the sandbox needs)"
                                  if cause and "ModuleNotFoundError" in cause[0]
                                  else f"read {_logfile(config.state_dir)}; is port {config.port} free?"))
        probe = probe_health(config.host, config.port)
        why = probe.reason
        if probe.healthy and probe.state_dir == config.state_dir:
            return f"sandbox up (pid {proc.pid}, port {config.port}, {config.ranks} ranks, {config.kernel_label})"
        time.sleep(0.2)
    down(config.state_dir)
    raise HostError(f"sandbox did not become healthy within {timeout_s:.0f}s ({why}); stopped it. Log tail:\n"
                    f"{_log_tail(config.state_dir)}", hint="raise --timeout on a slow machine, or read the logs")


def down(state_dir: str, timeout_s: float = STOP_TIMEOUT_S) -> str:
    """Stop the sandbox (SIGTERM to its process group, SIGKILL after ``timeout_s``); no-op when stopped."""
    pid = running_pid(state_dir)
    if pid is None:
        _remove(_pidfile(state_dir))
        return "sandbox not running; nothing to stop"
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _group_alive(pid):
        time.sleep(0.1)
    if _group_alive(pid):
        os.killpg(pid, signal.SIGKILL)
        _group_alive(pid)
    _remove(_pidfile(state_dir))
    return f"sandbox stopped (pid {pid})"


def restart(config: ServerConfig, timeout_s: float = START_TIMEOUT_S) -> str:
    down(config.state_dir)
    return up(config, timeout_s)


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group lives (reaping the leader first when it is our own child)."""
    try:
        os.waitpid(pgid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
