"""Stage's kernel acceptance (cutover/hostprotocol/acceptance.py) on a GPU, with releases built from this tree.

A release built for this GPU passes: its own kernel_ext code runs the tiny parity subset against SGLang's Triton
kernel and float64, and every live-switch check. A release built for another GPU is refused on this one. The
refusals without a GPU and through the stage playbook: tests/unit/test_acceptance.py and
tests/integration/test_stage_acceptance.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cutover.hostprotocol import acceptance
from cutover.release import Release, build_release

pytestmark = pytest.mark.gpu


def this_gpus_arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}" + ("a" if major == 9 else "")  # wgmma needs the arch-specific sm_90a


def other_arch() -> str:
    return "sm_120" if this_gpus_arch() != "sm_120" else "sm_90a"


def build(tmp_path_factory: pytest.TempPathFactory, arch: str) -> Release:
    return build_release(tmp_path_factory.mktemp(f"releases-{arch}"), archs=[arch]).release


def accept(release: Release, log: Path) -> acceptance.Acceptance:
    return acceptance.run_acceptance(str(release.path), release.manifest["library"], sys.executable, 0, 900,
                                     str(log))


def test_a_release_built_for_this_gpu_passes_its_acceptance(tmp_path_factory, tmp_path):
    release = build(tmp_path_factory, this_gpus_arch())
    result = accept(release, tmp_path / "acceptance.log")
    assert result.passed, result.summary + "\n" + acceptance.log_tail(str(tmp_path / "acceptance.log"))
    report = result.report
    assert report["triton_reference"] and report["total"] > 0 and report["passed"] == report["total"]
    assert report["checks_total"] > 0 and report["checks_passed"] == report["checks_total"]
    assert result.summary.startswith(f"{report['total']}/{report['total']} parity cases and ")


def test_a_release_built_for_another_gpu_is_refused_on_this_one(tmp_path_factory, tmp_path):
    release = build(tmp_path_factory, other_arch())
    result = accept(release, tmp_path / "acceptance.log")
    assert not result.passed, result.summary
    log = (tmp_path / "acceptance.log").read_text()
    assert "KernelLibraryError" in log or "failed case(s)" in result.summary, result.summary + "\n" + log[-2000:]
