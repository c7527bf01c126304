"""A built wheel carries the playbooks, inventories and default policies, and finds them when installed."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_wheel_lists_playbooks_inventories_and_policies(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("cutover/data/playbooks/preflight.yml", "cutover/data/playbooks/stage.yml",
                     "cutover/data/playbooks/rollback.yml", "cutover/data/playbooks/library/cutover_state.py",
                     "cutover/data/playbooks/library/cutover_preflight.py",
                     "cutover/data/playbooks/module_utils/cutover_hostprotocol/__init__.py",
                     "cutover/data/playbooks/module_utils/cutover_hostprotocol/hostlayout.py",
                     "cutover/data/playbooks/module_utils/cutover_hostprotocol/phases.py",
                     "cutover/data/inventories/local.yml", "cutover/data/inventories/ct200.yml",
                     "checks/policies/default.yml"):
        assert required in names, f"{required} missing from {wheel.name}"


def test_installed_wheel_resolves_its_own_resources(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from cutover import resources; "
             "from checks.policy import DEFAULT_POLICY_PATH; "
             "print(resources.playbook('stage.yml')); print(resources.inventories_dir() / 'local.yml'); "
             "print(DEFAULT_POLICY_PATH)")  # the path `cutover shadow` and `promote` load their default from
    out = subprocess.run([sys.executable, "-c", probe, str(site)], capture_output=True, text=True, check=True)
    paths = [Path(line) for line in out.stdout.splitlines()]
    for path in paths:
        assert path.is_file() and not path.is_symlink() and site in path.parents, path
    module_util = site / "cutover/data/playbooks/module_utils/cutover_hostprotocol/hostlayout.py"
    assert module_util.read_text() == (REPO / "cutover/hostprotocol/hostlayout.py").read_text()


def test_an_installed_wheel_takes_a_packaged_policy_by_name_outside_the_repo(wheel, tmp_path):
    """`--policy sandbox` from a wheel installed with no repository around: the packaged checks/policies/sandbox.yml
    is loaded (its scope then refuses a non-sandbox target, naming the file it read)."""
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(site),
                    str(wheel)], check=True, capture_output=True, timeout=600)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "prod.yml").write_text(
        "all:\n  hosts:\n    gpu1:\n      ansible_connection: local\n      serving_kind: sglang\n      tp_size: 8\n"
        "      gpu_arch: sm_120\n      cutover_root: /nonexistent/root\n      cutover_state_dir: /nonexistent/state\n"
        "      serving_python: /usr/bin/python3\n      serving_restart_command: 'true'\n")
    run_cli = "import sys; from cutover.cli.main import app; app(prog_name='cutover')"
    env = {**os.environ, "PYTHONPATH": str(site), "HOME": str(tmp_path), "COLUMNS": "250"}
    env.pop("CUTOVER_POLICY", None)

    def cutover(*args):
        return subprocess.run([sys.executable, "-c", run_cli, *args], capture_output=True, text=True, env=env,
                              cwd=elsewhere, timeout=300)

    where = subprocess.run([sys.executable, "-c", "import checks.policy as p; print(p.DEFAULT_POLICY_PATH)"],
                           capture_output=True, text=True, env=env, cwd=elsewhere, check=True).stdout.strip()
    assert Path(where).parent.parent.parent == site  # the installed copy, not the checkout
    result = cutover("shadow", "--minutes", "3", "--policy", "sandbox", "-i", "prod.yml")
    assert result.returncode == 2
    assert f"policy {site / 'checks/policies/sandbox.yml'} has scope sandbox: it may gate only sandbox hosts" in \
        result.stderr, result.stderr
    missing = cutover("shadow", "--minutes", "3", "--policy", "nightly", "-i", "prod.yml")
    assert missing.returncode == 2
    assert missing.stderr.startswith("error: policy nightly: file not found\n  fix: pass an existing file to "
                                     "--policy, or a packaged policy: default, sandbox"), missing.stderr
