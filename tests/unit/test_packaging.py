"""A built wheel carries the playbooks, inventories and default policies, and finds them when installed."""

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
