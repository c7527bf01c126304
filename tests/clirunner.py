"""The real `cutover` console script, run as a subprocess exactly as operators run it.

Each test gets an empty HOME (no personal config or known_hosts leaks in), a fixed operator name
(CUTOVER_OPERATOR) and the shared releases directory (CUTOVER_RELEASES_DIR).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

OPERATOR = "alice@test"
CLI_TIMEOUT_S = 300


def cutover_executable() -> str:
    """The console script installed next to the test interpreter (.venv/bin/cutover)."""
    return str(Path(sys.executable).parent / "cutover")


def cli_env(home: Path, releases_dir: Path, operator: str = OPERATOR) -> dict:
    env = dict(os.environ)
    env.update(
        HOME=str(home),
        CUTOVER_OPERATOR=operator,
        CUTOVER_RELEASES_DIR=str(releases_dir),
        COLUMNS="200",  # rich output unwrapped, so messages can be matched
        NO_COLOR="1",
    )
    return env


def _default_sigint() -> None:
    """In the CLI's process, before exec: SIGINT back to its default action. A test run started as a background
    job of a non-interactive shell has SIGINT ignored, exec keeps that, and the CLI would never see the Ctrl-C a
    test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class Cli:
    """`cli("stage", "-i", inv, "--yes")` -> CompletedProcess (text stdout/stderr, returncode)."""

    home: Path
    releases_dir: Path
    cwd: Path

    def env(self, operator: str = OPERATOR) -> dict:
        return cli_env(self.home, self.releases_dir, operator)

    @staticmethod
    def argv(*args) -> list[str]:
        return [cutover_executable(), *map(str, args)]

    def __call__(self, *args, operator: str = OPERATOR, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout,
                              env=self.env(operator), cwd=self.cwd)

    def json(self, *args, operator: str = OPERATOR):
        """Run with --json, assert success, return the parsed output."""
        result = self("--json", *args, operator=operator)
        assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
        return json.loads(result.stdout)

    def start(self, *args, log: Path, operator: str = OPERATOR) -> subprocess.Popen:
        """Start the CLI in its own process group, output to `log` (for tests that kill it mid-run), with
        Ctrl-C's default action as at a terminal."""
        with open(log, "w") as handle:
            return subprocess.Popen(self.argv(*args), stdout=handle, stderr=subprocess.STDOUT,
                                    env=self.env(operator), cwd=self.cwd, start_new_session=True,
                                    preexec_fn=_default_sigint)

    @staticmethod
    def kill_group(process: subprocess.Popen) -> None:
        """SIGKILL the CLI and everything it started (ansible-playbook, ssh): the operator machine dies."""
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)
