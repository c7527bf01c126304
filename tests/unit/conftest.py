"""Fixtures of the control-plane unit tests: a local-connection inventory under tmp_path, a CLI runner."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cutover.cli.main import app

OPERATOR = "alice@test"


def write_inventory(path: Path, root: Path, **overrides) -> Path:
    """A one-host local inventory (host `local`) whose root and state dir live under `root`."""
    host = {
        "ansible_connection": "local",
        "cutover_root": str(root / "root"),
        "cutover_state_dir": str(root / "state"),
        "serving_kind": "sandbox",
        "serving_port": 30099,
        "tp_size": 2,
        "gpu_arch": "none",
        "serving_restart_command": "true",
        "serving_start_timeout_s": 1,
    }
    host.update(overrides)
    path.write_text(yaml.safe_dump({"all": {"hosts": {"local": host}}}))
    return path


@pytest.fixture
def local_inventory(tmp_path: Path) -> Path:
    return write_inventory(tmp_path / "inventory.yml", tmp_path)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def invoke(tmp_path: Path):
    """Run the real typer app in-process: invoke("status", "-i", inv) -> Result (exit_code, stdout, stderr)."""
    home = tmp_path / "home"
    home.mkdir()
    runner = CliRunner()

    def run(*args, operator: str = OPERATOR, **env):
        environment = {"HOME": str(home), "CUTOVER_OPERATOR": operator, "COLUMNS": "250", "NO_COLOR": "1",
                       **env}
        return runner.invoke(app, [str(a) for a in args], env=environment)

    return run


def read_journal(state: Path) -> list[dict]:
    path = state / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The cutover wheel, built from this checkout (no build isolation: nothing is downloaded)."""
    out = tmp_path_factory.mktemp("wheel")
    repo = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(repo), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out)], check=True, capture_output=True, timeout=600)
    (path,) = out.glob("cutover-*.whl")
    return path
