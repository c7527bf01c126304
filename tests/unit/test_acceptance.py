"""The kernel acceptance stage runs on each host's GPU (cutover/hostprotocol/acceptance.py): its verdict on parity reports, its
environment, and its refusals when the run cannot produce a passing report. The run that passes on a GPU is
tests/gpu/test_acceptance.py; the refusal through the real playbook is tests/integration/test_stage_acceptance.py.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from cutover.hostprotocol import acceptance


def parity_report(**changes) -> dict:
    """A report in kernel_ext.gpu_parity's format: two passing cases, two passing checks."""
    report = {
        "gpu": "NVIDIA H200", "subset": "tiny", "triton_reference": True, "seconds": 40.0,
        "cases": [dict(H=8, T=1, batch=1, prefix=0, mask="tree", served=True, passed=True, err_ours=1e-3),
                  dict(H=16, T=16, batch=2, prefix=300, mask="causal", served=True, passed=True, err_ours=2e-3)],
        "checks": [dict(check="enable=0 writes nothing", passed=True), dict(check="graph replay", passed=True)],
        "passed": 2, "total": 2, "checks_passed": 2, "checks_total": 2, "worst_ratio": 1.0002,
    }
    report.update(changes)
    return report


def test_a_report_with_every_case_and_check_passed_accepts_the_kernel():
    passed, summary = acceptance.judge(parity_report())
    assert passed
    assert summary == ("2/2 parity cases and 2/2 live-switch checks on NVIDIA H200, worst error 1.000x SGLang's "
                       "kernel's")


def test_a_failed_case_refuses_the_kernel_and_is_named():
    report = parity_report(passed=1)
    report["cases"][1].update(passed=False, detail="rel_l2 3.1e-01")
    passed, summary = acceptance.judge(report)
    assert not passed
    assert "1 failed case(s): H16 T16 batch 2 prefix 300 causal: rel_l2 3.1e-01" in summary


def test_a_failed_live_switch_check_refuses_the_kernel():
    report = parity_report(checks_passed=1)
    report["checks"][1]["passed"] = False
    passed, summary = acceptance.judge(report)
    assert not passed and "failed live-switch check(s): graph replay" in summary


def test_without_sglangs_kernel_to_compare_with_the_kernel_is_refused():
    passed, summary = acceptance.judge(parity_report(triton_reference=False))
    assert not passed and "SGLang's Triton kernel is not importable" in summary


def test_an_empty_report_is_no_acceptance():
    passed, summary = acceptance.judge(parity_report(cases=[], checks=[], passed=0, total=0, checks_passed=0,
                                                     checks_total=0))
    assert not passed and "no parity case ran" in summary and "no live-switch check ran" in summary


def test_a_stored_pass_counts_only_for_the_library_it_ran():
    record = {"release_id": "r1", "passed": True, "library_sha256": "a" * 64, "summary": "7/7"}
    assert acceptance.recorded_pass(record, "r1", "a" * 64) == (True, "")
    covered, why = acceptance.recorded_pass(record, "r1", "b" * 64)
    assert not covered
    assert why == (f"the acceptance recorded for release r1 ran library sha256 {'a' * 64}, this build's library is "
                   f"{'b' * 64}: another build, so it runs again")


def test_a_pass_stored_without_its_library_hash_is_run_again():
    covered, why = acceptance.recorded_pass({"release_id": "r1", "passed": True}, "r1", "b" * 64)
    assert not covered and "ran library sha256 (not recorded)" in why


def test_no_stored_pass_is_nothing_to_explain():
    for record in (None, {}, [1], {"release_id": "r1", "passed": False, "library_sha256": "a" * 64},
                   {"release_id": "r0", "passed": True, "library_sha256": "a" * 64}):
        assert acceptance.recorded_pass(record, "r1", "a" * 64) == (False, ""), record


def test_the_run_uses_the_releases_code_and_library_on_one_gpu():
    env = acceptance.parity_env("/opt/cutover/releases/r1", "libcutover_verify.so", 3, {"PYTHONPATH": "/x"})
    assert env["PYTHONPATH"] == "/opt/cutover/releases/r1/python" + os.pathsep + "/x"
    assert env["CUTOVER_KERNEL_LIB"] == "/opt/cutover/releases/r1/libcutover_verify.so"
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_a_release_carries_the_kernel_ext_code_it_is_accepted_with(release: Path):
    files = json.loads((release / "manifest.json").read_text())["files"]
    carried = {name for name in files if name.startswith("python/kernel_ext/")}
    source = Path(acceptance.__file__).resolve().parents[2] / "kernel_ext"
    assert carried == {f"python/kernel_ext/{p.name}" for p in source.glob("*.py")}
    assert (release / "python/kernel_ext/gpu_parity.py").read_bytes() == (source / "gpu_parity.py").read_bytes()


def test_without_a_gpu_the_run_is_refused_and_its_log_shows_the_releases_code(release: Path, tmp_path: Path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU, where the acceptance passes (tests/gpu/test_acceptance.py)")
    library = json.loads((release / "manifest.json").read_text())["library"]
    log = tmp_path / "acceptance.log"
    result = acceptance.run_acceptance(str(release), library, sys.executable, 0, 600, str(log))
    assert not result.passed
    assert result.summary == "the parity run exited with status 1 before writing its report"
    text = log.read_text()
    ran = re.findall(r'File "([^"]*/kernel_ext/[^"]*)"', text)
    assert "Traceback" in text and ran, text
    assert all(path.startswith(str(release / "python" / "kernel_ext")) for path in ran), ran
    assert not list(release.rglob("__pycache__")), "the run must not write into the release directory"


def test_a_run_past_its_time_limit_is_killed_and_refused(release: Path, tmp_path: Path):
    result = acceptance.run_acceptance(str(release), "libcutover_verify.so", sys.executable, 0, 0.2,
                                       str(tmp_path / "acceptance.log"))
    assert not result.passed
    assert result.summary == "the parity run did not finish within 0.2 s and was killed"


def test_a_second_run_of_the_same_release_is_refused_while_the_first_runs(release: Path, tmp_path: Path):
    log = str(tmp_path / "acceptance.log")
    with acceptance.exclusive_run(log) as first:
        assert first.busy is None
        second = acceptance.run_acceptance(str(release), "libcutover_verify.so", sys.executable, 0, 60, log)
    assert not second.passed
    assert re.fullmatch(r"an acceptance run of this release is still running on the host \(pid \d+, started "
                        r"[-0-9: ]+\), probably from a stage that was cut off: wait for it to end \(its log: "
                        + re.escape(log) + r"\), then stage again", second.summary), second.summary
    assert not Path(log).exists()  # the first run's log is untouched (here: never created)
    with acceptance.exclusive_run(log) as again:
        assert again.busy is None  # free again once the first run ended


def test_the_parity_process_holds_the_lock_and_is_named_in_it(release: Path, tmp_path: Path):
    """The lock must outlive a stage cut off mid-run (its module process gone, the parity run going on): the
    parity process inherits it, and the lock file names that process."""
    seen = tmp_path / "seen"
    fake_python = tmp_path / "python"
    fake_python.write_text(f"#!/bin/sh\nls -l /proc/$$/fd > {seen}\necho $$ >> {seen}\nexit 1\n")
    fake_python.chmod(0o755)
    log = tmp_path / "acceptance.log"
    acceptance.run_acceptance(str(release), "libcutover_verify.so", str(fake_python), 0, 60, str(log))
    *fds, pid = seen.read_text().splitlines()
    assert any(line.endswith(f"{log}.lock") for line in fds), fds
    assert Path(f"{log}.lock").read_text().startswith(f"pid {pid}, started ")


def test_a_serving_python_that_does_not_exist_is_refused(release: Path, tmp_path: Path):
    result = acceptance.run_acceptance(str(release), "libcutover_verify.so", str(tmp_path / "no-python"), 0, 60,
                                       str(tmp_path / "acceptance.log"))
    assert not result.passed and result.summary.startswith("the serving Python ")
    assert "could not be started" in result.summary


def test_an_mps_daemon_is_found_by_its_control_pipe(tmp_path: Path):
    assert acceptance.mps_control_pipe({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}) is None
    (tmp_path / "control").touch()
    assert acceptance.mps_control_pipe({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}) == str(tmp_path / "control")
