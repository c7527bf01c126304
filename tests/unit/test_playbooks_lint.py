"""The playbooks pass ansible-lint's production profile."""

import subprocess
import sys
from pathlib import Path

import pytest

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


@pytest.mark.slow  # ansible-lint over every playbook
def test_playbooks_pass_ansible_lint_production_profile():
    lint = Path(sys.executable).parent / "ansible-lint"
    result = subprocess.run([str(lint), "--profile", "production", "--nocolor", str(PLAYBOOKS)],
                            capture_output=True, text=True, timeout=600, cwd=PLAYBOOKS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
