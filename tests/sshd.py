"""Real test hosts: one OpenSSH daemon per host on its own loopback address (127.0.0.2, 127.0.0.3, ...).

Each host gets its own sshd_config, generated ed25519 host key, port, cutover_root and state dir under one
temporary directory, so several distinct hosts live on one machine. A generated client key logs in as the
current user (root in CI); a known_hosts file pins every host key, and the Ansible inventory written by
`TestHosts.write_inventory` makes Ansible (and cutover's paramiko reads) verify them strictly.

Fault injection for the failure-case tests: `stop`/`start` a host (unreachable), `replace_host_key`
(key mismatch), `drop_sessions` (an SSH cut: live connections die, the listener stays), `corrupt_file`.
"""

from __future__ import annotations

import atexit
import getpass
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
PRIVSEP_DIR = "/run/sshd"  # OpenSSH refuses to start without it
START_TIMEOUT_S = 10.0

_live_daemons: set[int] = set()  # listener pids of every daemon started by this process: atexit kills them


def _kill_leftover_daemons() -> None:
    for pid in list(_live_daemons):
        for victim in [*_sshd_descendants(pid), pid]:
            _signal(victim, signal.SIGKILL)
    _live_daemons.clear()


atexit.register(_kill_leftover_daemons)


def sshd_available() -> str | None:
    """None when real test hosts can run here, otherwise the reason they cannot."""
    if not os.access(SSHD, os.X_OK):
        return f"{SSHD} is missing: install openssh-server (apt-get install -y openssh-server)"
    if not os.access(SSH_KEYGEN, os.X_OK):
        return "ssh-keygen is missing: install openssh-client"
    return None


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port that is free on `address` right now."""
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc, all threads' children lists)."""
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.extend(int(child) for child in handle.read().split())
    except (FileNotFoundError, ProcessLookupError):
        pass
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _sshd_descendants(pid: int) -> list[int]:
    """The per-connection sshd processes under a listener (not the commands they run)."""
    found, todo = [], _children(pid)
    while todo:
        child = todo.pop()
        if _comm(child).startswith("sshd"):
            found.append(child)
            todo.extend(_children(child))
    return found


def _keygen(path: Path, comment: str) -> str:
    """Generate an ed25519 key pair at `path`; return the public key line."""
    for stale in (path, path.with_suffix(".pub")):
        stale.unlink(missing_ok=True)
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path.with_suffix(".pub").read_text().strip()


@dataclass
class TestHost:
    """One test host: a real sshd on `address:port` plus its own cutover directories."""

    __test__ = False  # not a pytest test class

    name: str
    address: str
    port: int
    directory: Path
    serving_port: int
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def cutover_root(self) -> Path:
        return self.directory / "cutover_root"

    @property
    def state_dir(self) -> Path:
        return self.directory / "state"

    @property
    def host_key(self) -> Path:
        return self.directory / "ssh_host_ed25519_key"

    @property
    def config(self) -> Path:
        return self.directory / "sshd_config"

    @property
    def log(self) -> Path:
        return self.directory / "sshd.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process and self.process.poll() is None else None

    def public_host_key(self) -> str:
        """The host key line `ssh-ed25519 AAAA...` (without comment)."""
        kind, blob, *_ = self.host_key.with_suffix(".pub").read_text().split()
        return f"{kind} {blob}"

    def known_hosts_line(self) -> str:
        return f"[{self.address}]:{self.port} {self.public_host_key()}"

    def session_pids(self) -> list[int]:
        """pids of the per-connection sshd processes currently serving this host's SSH sessions."""
        return _sshd_descendants(self.pid) if self.pid else []

    # -- the host's cutover files, read directly (tests assert on them) ----------------------------

    def current_release(self) -> str | None:
        """The release id `current` points at, or None without a `current` link."""
        link = self.cutover_root / "current"
        return Path(os.readlink(link)).name if link.is_symlink() else None

    def previous_release(self) -> str | None:
        link = self.cutover_root / "previous"
        return Path(os.readlink(link)).name if link.is_symlink() else None

    def _json(self, name: str) -> dict | None:
        path = self.state_dir / name
        return json.loads(path.read_text()) if path.exists() else None

    def control(self) -> dict | None:
        return self._json("control.json")

    def phase(self) -> dict | None:
        return self._json("phase.json")

    def lock(self) -> dict | None:
        return self._json("lock")

    def plant_lock(self, owner: str, expires_in_s: float, action: str = "shadow") -> dict:
        """Write the operator lock as another operator's cutover would (negative expiry: already expired)."""
        now = time.time()
        record = {"owner": owner, "action": action, "acquired_at": now - 60, "expires_at": now + expires_in_s,
                  "token": "0123456789abcdef", "pid": 4242}
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "lock").write_text(json.dumps(record))
        return record

    def journal(self) -> list[dict]:
        path = self.state_dir / "journal.jsonl"
        text = path.read_text() if path.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def snapshot(self) -> dict[str, tuple]:
        """Every path under cutover_root and the state dir: its kind and link target or content hash."""
        found: dict[str, tuple] = {}
        for base in (self.cutover_root, self.state_dir):
            for path in sorted(base.rglob("*")):
                if path.is_symlink():
                    found[str(path)] = ("link", os.readlink(path))
                elif path.is_file():
                    found[str(path)] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
                else:
                    found[str(path)] = ("dir",)
        return found


class TestHosts:
    """N real sshd test hosts, a client key, a known_hosts file and an Ansible inventory for them."""

    __test__ = False

    def __init__(self, count: int = 2, directory: Path | None = None, user: str | None = None):
        reason = sshd_available()
        if reason:
            raise RuntimeError(reason)
        self._owns_directory = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="cutover-hosts-"))
        self.user = user or getpass.getuser()
        self.client_key = self.directory / "client_ed25519"
        self.known_hosts = self.directory / "known_hosts"
        self.inventory = self.directory / "inventory.yml"
        self.control_path_dir = self.directory / "cp"  # Ansible's ControlPersist sockets, per harness
        self.hosts: list[TestHost] = []
        self._client_public = _keygen(self.client_key, "cutover-test-client")
        (self.directory / "authorized_keys").write_text(self._client_public + "\n")
        for index in range(count):
            self.hosts.append(self._new_host(index))

    # -- life cycle --------------------------------------------------------------------------------

    def _new_host(self, index: int) -> TestHost:
        address = f"127.0.0.{index + 2}"
        host = TestHost(
            name=f"host{index + 1}",
            address=address,
            port=free_port(address),
            directory=self.directory / f"host{index + 1}",
            serving_port=free_port(),
        )
        host.directory.mkdir(parents=True)
        host.cutover_root.mkdir()
        host.state_dir.mkdir()
        _keygen(host.host_key, host.name)
        self._write_config(host)
        return host

    def _write_config(self, host: TestHost) -> None:
        host.config.write_text(
            "\n".join(
                [
                    f"ListenAddress {host.address}",
                    f"Port {host.port}",
                    f"HostKey {host.host_key}",
                    f"PidFile {host.directory / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.directory / 'authorized_keys'}",
                    f"AllowUsers {self.user}",
                    "UsePAM no",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "StrictModes no",
                    "UseDNS no",
                    "MaxStartups 64",
                    "MaxSessions 64",
                    "Subsystem sftp internal-sftp",
                    # Debian's bash sources ~/.bashrc for top-level commands run by sshd (SHLVL < 2); a
                    # developer's .bashrc (pyenv init, ...) then costs ~0.3 s per Ansible SSH command.
                    "SetEnv SHLVL=1",
                    "LogLevel VERBOSE",
                    "",
                ]
            )
        )

    def start(self, host: TestHost | None = None) -> None:
        """Start one host's sshd (or every stopped host's) and wait until it greets with its banner."""
        for target in [host] if host else self.hosts:
            if target.pid is None:
                self._start_one(target)

    def _start_one(self, host: TestHost) -> None:
        if os.geteuid() == 0:
            os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)
        for attempt in range(3):
            log = open(host.log, "ab")
            host.process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(host.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # a Ctrl-C of the test run does not reach it first
            )
            log.close()
            _live_daemons.add(host.process.pid)
            if self._wait_for_banner(host):
                return
            self._kill(host)
            # the port may have been taken between free_port() and sshd's bind: pick another
            host.port = free_port(host.address)
            self._write_config(host)
            if self.known_hosts.exists():  # a restart: keep the client files in step with the new port
                self._write_known_hosts()
                self.write_inventory()
        raise RuntimeError(f"sshd for {host.name} did not start; see {host.log}:\n{host.log.read_text()}")

    def _wait_for_banner(self, host: TestHost) -> bool:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if host.process.poll() is not None:
                return False
            try:
                with socket.create_connection((host.address, host.port), timeout=1) as sock:
                    if sock.recv(64).startswith(b"SSH-2.0-"):
                        return True
            except OSError:
                time.sleep(0.05)
        return False

    def _kill(self, host: TestHost) -> None:
        """Kill the listener and every per-connection sshd under it; reap the listener."""
        if host.process is None:
            return
        for victim in [*_sshd_descendants(host.process.pid), host.process.pid]:
            _signal(victim, signal.SIGKILL)
        host.process.wait(timeout=10)
        _live_daemons.discard(host.process.pid)
        host.process = None

    def stop(self, host: TestHost | None = None) -> None:
        """Stop one host (unreachable from now on: connection refused) or all of them."""
        for target in [host] if host else self.hosts:
            self._kill(target)

    def close(self) -> None:
        """Stop every daemon and remove the temporary directory (if this harness created it)."""
        self.stop()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "TestHosts":
        self.setup()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def setup(self) -> "TestHosts":
        """Start every host, then write known_hosts and the inventory."""
        self.start()
        self._write_known_hosts()
        self.write_inventory()
        return self

    # -- fault injection ---------------------------------------------------------------------------

    def replace_host_key(self, host: TestHost) -> None:
        """Give `host` a new host key (known_hosts keeps the old one): every client must refuse it."""
        running = host.pid is not None
        self._kill(host)
        _keygen(host.host_key, f"{host.name}-replaced")
        if running:
            self._start_one(host)

    def drop_sessions(self, host: TestHost) -> int:
        """Cut every live SSH session of `host` (the listener keeps accepting); return how many died."""
        victims = host.session_pids()
        for pid in victims:
            _signal(pid, signal.SIGKILL)
        return len(victims)

    @staticmethod
    def corrupt_file(path: Path | str) -> None:
        """Flip one byte in the middle of a host file (same size, different content)."""
        path = Path(path)
        data = bytearray(path.read_bytes())
        if not data:
            path.write_bytes(b"\0")
            return
        middle = len(data) // 2
        data[middle] ^= 0xFF
        path.write_bytes(bytes(data))

    def host(self, name: str) -> TestHost:
        return next(h for h in self.hosts if h.name == name)

    # -- client side files -------------------------------------------------------------------------

    def _write_known_hosts(self) -> None:
        self.known_hosts.write_text("".join(h.known_hosts_line() + "\n" for h in self.hosts))

    def host_vars(self, host: TestHost) -> dict:
        """Inventory variables of one host: connection, strict host-key checking, cutover layout."""
        return {
            "ansible_host": host.address,
            "ansible_port": host.port,
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": str(self.client_key),
            "ansible_ssh_common_args": (
                f"-o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes"
                " -o GlobalKnownHostsFile=/dev/null"
            ),
            "ansible_control_path_dir": str(self.control_path_dir),
            "ansible_python_interpreter": sys.executable,
            "cutover_root": str(host.cutover_root),
            "cutover_state_dir": str(host.state_dir),
            "cutover_known_hosts": str(self.known_hosts),
            "serving_kind": "sandbox",
            "serving_python": sys.executable,
            "serving_port": host.serving_port,
            "tp_size": 2,
            "gpu_arch": "none",
            # no serving process by default; the workflow tests override it with the sandbox command
            "serving_restart_command": "true",
        }

    def inventory_data(self) -> dict:
        return {
            "all": {
                "children": {
                    "serving": {"hosts": {h.name: self.host_vars(h) for h in self.hosts}},
                }
            }
        }

    def write_inventory(self, path: Path | None = None, per_host: dict[str, dict] | None = None,
                        **overrides) -> Path:
        """Write the inventory YAML (group `serving`, default path `self.inventory`); `overrides` are extra
        vars for every host, `per_host` maps a host name to vars for that host only."""
        data = self.inventory_data()
        for name, host_vars in data["all"]["children"]["serving"]["hosts"].items():
            host_vars.update(overrides)
            host_vars.update((per_host or {}).get(name, {}))
        target = path or self.inventory
        Path(target).write_text(yaml.safe_dump(data, sort_keys=False))
        return Path(target)
