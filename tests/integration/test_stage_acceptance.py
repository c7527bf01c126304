"""Stage's kernel acceptance (cutover/hostprotocol/acceptance.py) through the real stage playbook on a real sshd host.

The test hosts have no GPU, so `cutover stage` would stop at preflight (which checks the GPU against the
inventory's gpu_arch) before the stage playbook runs. These tests run playbooks/stage.yml as cutover stage does
after a passed preflight, on a host that declares a GPU arch: its acceptance run then fails for want of a GPU,
which is what a GPU that cannot run the kernel looks like to stage.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import pytest

from cutover import ansible, config
from cutover.stage import stage_extravars
from cutover.release import load_release
from sshd import TestHost

pytestmark = pytest.mark.integration

ACCEPT_TASK = "Accept the kernel on the host's GPU before it goes live"


@pytest.fixture
def gpu_host(ssh_hosts_factory) -> tuple[TestHost, object]:
    """One test host, and a function writing its inventory with extra vars (a GPU arch by default)."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU, where the acceptance passes (tests/gpu/test_acceptance.py)")
    hosts = ssh_hosts_factory(1)

    def inventory(**host_vars) -> Path:
        return hosts.write_inventory(**{"gpu_arch": "sm_90a", **host_vars})
    return hosts.hosts[0], inventory


def run_stage_playbook(inventory_path: Path, release: Path) -> ansible.HostOutcome:
    inventory = config.load_inventory(str(inventory_path))
    settings = config.Settings(operator="alice@test")
    result = ansible.run_playbook("stage.yml", inventory, inventory.hosts,
                                  extravars=stage_extravars(load_release(release), settings, []))
    return result.hosts[inventory.hosts[0].name]


def gpu_checks(host: TestHost) -> list[dict]:
    return [e for e in host.journal() if e["action"] == "gpu_check"]


def library_sha256(release: Path) -> str:
    manifest = json.loads((release / "manifest.json").read_text())
    return hashlib.sha256((release / manifest["library"]).read_bytes()).hexdigest()


def record_pass(host: TestHost, release: Path) -> None:
    """A passed acceptance of `release`'s library on the host, as an earlier stage recorded it."""
    record = host.state_dir / "acceptance" / f"{release.name}.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"release_id": release.name, "library_sha256": library_sha256(release),
                                  "passed": True, "at": time.time(),
                                  "summary": "7/7 parity cases and 10/10 live-switch checks on NVIDIA RTX PRO 6000"}))


def another_build(release: Path, directory: Path) -> Path:
    """The same sources built elsewhere: the same release id, another library (nvcc output differs by build dir)."""
    other = directory / release.name
    shutil.copytree(release, other)
    manifest = json.loads((other / "manifest.json").read_text())
    library = other / manifest["library"]
    library.write_bytes(library.read_bytes() + b"\0")
    manifest["files"][manifest["library"]] = library_sha256(other)
    (other / "manifest.json").write_text(json.dumps(manifest))
    return other


def test_a_host_whose_gpu_cannot_run_the_kernel_refuses_it_and_switches_nothing(gpu_host, release):
    host, inventory = gpu_host
    outcome = run_stage_playbook(inventory(), release)

    assert not outcome.ok and outcome.failed_task == ACCEPT_TASK
    assert outcome.message.startswith("kernel acceptance on GPU 0 failed: the parity run exited with status 1 "
                                      "before writing its report; nothing was switched")
    assert host.current_release() is None and host.control() is None and host.phase() is None
    assert (host.cutover_root / "releases" / release.name / "manifest.json").exists(), "the verified copy stays"
    log = host.state_dir / "acceptance" / f"{release.name}.log"
    assert "Traceback" in log.read_text() and str(log) in outcome.message
    assert not (host.state_dir / "acceptance" / f"{release.name}.json").exists(), "no pass recorded"
    [entry] = gpu_checks(host)
    assert entry["outcome"] == "failed" and entry["release_id"] == release.name and entry["log"] == str(log)


def test_a_release_accepted_before_is_not_run_again(gpu_host, release):
    host, inventory = gpu_host
    record_pass(host, release)
    outcome = run_stage_playbook(inventory(), release)

    assert outcome.ok, outcome.message
    assert outcome.facts["cutover_acceptance"]["note"] == ("kernel already accepted on this host: 7/7 parity cases "
                                                           "and 10/10 live-switch checks on NVIDIA RTX PRO 6000")
    assert host.current_release() == release.name and gpu_checks(host) == []


def test_another_build_under_an_accepted_release_id_is_checked_again(gpu_host, release, tmp_path):
    # the runbook's recovery from "intact, different build of this release id": the host's copy was removed and
    # the other build is staged; the pass recorded for the removed build does not cover this one's library
    host, inventory = gpu_host
    record_pass(host, release)
    other = another_build(release, tmp_path)
    outcome = run_stage_playbook(inventory(), other)

    assert not outcome.ok and outcome.failed_task == ACCEPT_TASK
    why = (f"the acceptance recorded for release {release.name} ran library sha256 {library_sha256(release)}, this "
           f"build's library is {library_sha256(other)}: another build, so it runs again")
    assert outcome.message.startswith("kernel acceptance on GPU 0 failed: the parity run exited with status 1 "
                                      f"before writing its report ({why}); nothing was switched")
    assert host.current_release() is None and host.control() is None
    [entry] = gpu_checks(host)
    assert entry["outcome"] == "failed" and entry["rerun"] == why
    assert entry["library_sha256"] == library_sha256(other)


def test_gpu_check_false_stages_without_running_the_kernel_and_journals_it(gpu_host, release):
    host, inventory = gpu_host
    outcome = run_stage_playbook(inventory(gpu_check=False), release)

    assert outcome.ok, outcome.message
    assert "the kernel was NOT run on this host's GPU" in outcome.facts["cutover_acceptance"]["note"]
    assert host.current_release() == release.name
    assert not (host.state_dir / "acceptance").exists()
    [entry] = gpu_checks(host)
    assert entry["outcome"] == "skipped" and entry["reason"] == "gpu_check: false in the inventory"


def test_a_sandbox_host_without_a_gpu_has_nothing_to_accept(gpu_host, release):
    host, inventory = gpu_host
    outcome = run_stage_playbook(inventory(gpu_arch="none"), release)

    assert outcome.ok, outcome.message
    assert outcome.facts["cutover_acceptance"]["note"].startswith("no GPU (sandbox host)")
    assert host.current_release() == release.name and gpu_checks(host) == []
