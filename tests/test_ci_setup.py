"""The install and CI scripts keep their promises: a light core install, a pinned torch, one test command."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = {"torch", "triton", "sglang"}


def requirement_name(spec: str) -> str:
    return re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0].lower()


def test_core_install_pulls_no_gpu_stack():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {requirement_name(spec) for spec in project["dependencies"]}.isdisjoint(HEAVY)
    assert project["scripts"]["cutover"] == "cutover.cli.main:app"


def test_torch_is_only_ever_installed_pinned():
    """An open range would make pip download a multi-GB CUDA build of torch."""
    install_lines = [line for line in (ROOT / "scripts" / "setup.sh").read_text().splitlines()
                     if "PIP[@]" in line or "pip install" in line]
    torch_specs = [token.strip("\"'") for line in install_lines for token in line.split()
                   if token.strip("\"'").startswith("torch")]
    assert torch_specs and all(spec == "torch==2.13.0" for spec in torch_specs), torch_specs
    constraints = (ROOT / "scripts" / "constraints.txt").read_text().splitlines()
    assert "torch==2.13.0" in constraints


def test_ci_runs_the_readme_test_command():
    ci = ROOT / ".ci" / "run"
    assert os.access(ci, os.X_OK)
    text = ci.read_text()
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert "bash scripts/test.sh" in text
    assert "scripts/setup.sh" in (ROOT / "scripts" / "test.sh").read_text()
