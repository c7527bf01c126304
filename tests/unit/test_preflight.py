"""The preflight module's version checks (playbooks/library/cutover_preflight.py): PEP 440 order, with
SGLang's pre-releases and dev builds refused and the rule stated in the failed check; and the pip that stage
installs the plugin with."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import write_inventory

MODULE = Path(__file__).resolve().parents[2] / "playbooks" / "library" / "cutover_preflight.py"
SPEC = importlib.util.spec_from_file_location("cutover_preflight", MODULE)
preflight = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(preflight)

PARAMS = {"serving_python": "/srv/venv/bin/python", "serving_kind": "sglang", "sglang_min": "0.5.11",
          "sglang_max": "0.5.23"}


def sglang_check(version: str) -> dict:
    env = {"python": "3.12.3", "sglang": version, "torch": "2.11.0"}
    (check,) = [c for c in preflight.serving_checks(PARAMS, env) if c["fact"] == "sglang version"]
    return check


@pytest.mark.parametrize("version", ["0.5.11", "0.5.11.post1", "0.5.13", "0.5.20", "0.5.23", "0.5.23+cu130",
                                     "0.5.11.0"])
def test_supported_sglang_releases_pass(version):
    check = sglang_check(version)
    assert (check["ok"], check["found"], check["note"]) == (True, version, "")


@pytest.mark.parametrize("version", ["0.5.2rc1", "0.5.2", "0.5.11rc1", "0.5.11.dev0", "0.5.15rc2", "0.5.23.post1",
                                     "0.5.24", "0.6.0", "1!0.5.13", "not-a-version"])
def test_unsupported_sglang_versions_are_refused_with_the_rule(version):
    check = sglang_check(version)
    assert (check["ok"], check["expected"], check["found"]) == (False, "0.5.11 .. 0.5.23", version)
    assert check["note"] == (
        "supported: releases from the oldest to the newest in PEP 440 order, both included (0.5.11rc1 is below "
        "0.5.11, 0.5.23.post1 above 0.5.23); pre-releases (a, b, rc) and .dev builds are refused: install a "
        "supported SGLang release")


def test_versions_sort_in_pep440_order():
    ordered = ["0.5.2", "0.5.11.dev0", "0.5.11a1", "0.5.11b2", "0.5.11rc1", "0.5.11", "0.5.11.post1.dev0",
               "0.5.11.post1", "0.5.12", "0.5.23", "0.5.23.post1", "1!0.1"]
    keys = [preflight.parse_version(v).key for v in ordered]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert preflight.parse_version("0.5.11") == preflight.parse_version("0.5.11.0") == preflight.parse_version(
        "0.5.11+local")
    assert preflight.parse_version("0.5.2rc1").prerelease and not preflight.parse_version("0.5.23.post1").prerelease
    assert preflight.parse_version("0.5.x") is None


@pytest.mark.parametrize("driver,ok", [("580.65.06", True), ("580.159", True), ("580.65.5", False),
                                       ("575.57.08", False), ("1000.0", True)])
def test_driver_must_reach_the_release_minimum(driver, ok):
    params = {"gpu_arch": "sm_90a", "archs": ["sm_90a"], "min_driver": "580.65.06"}
    checks = preflight.gpu_checks(params, [("sm_90", driver, "NVIDIA H200")])
    (check,) = [c for c in checks if c["fact"] == "driver version"]
    assert (check["ok"], check["expected"], check["found"]) == (ok, ">= 580.65.06", driver)


@pytest.mark.parametrize("python,ok", [("3.9.18", False), ("3.10.0", True), ("3.12.3", True)])
def test_serving_python_must_be_310_or_newer(python, ok):
    env = {"python": python, "sglang": "0.5.13", "torch": "2.11.0"}
    (check,) = [c for c in preflight.serving_checks(PARAMS, env) if c["fact"] == "serving python version"]
    assert check["ok"] is ok


@pytest.fixture
def python_without_pip(tmp_path) -> Path:
    """A serving python without pip, as a uv-made venv is: stage installs the plugin with `python -m pip`."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=300)
    return tmp_path / "venv" / "bin" / "python"


def test_a_serving_python_without_pip_is_named_with_the_fix(python_without_pip):
    python = str(python_without_pip)
    check = preflight.pip_check(python)
    assert (check["ok"], check["fact"], check["expected"]) == (False, "pip of the serving python",
                                                              f"`{python} -m pip --version` works")
    assert check["found"] == f"{python}: No module named pip"
    assert check["note"] == (f"install pip into that environment: `{python} -m ensurepip`, or "
                             f"`uv pip install --python {python} pip`")


def test_a_serving_python_with_pip_passes():
    check = preflight.pip_check(sys.executable)
    assert check["ok"] and check["found"].startswith("pip ") and check["note"] == ""


def test_stage_refuses_a_plugin_host_whose_serving_python_has_no_pip(invoke, tmp_path, release, wheel,
                                                                     python_without_pip):
    python = python_without_pip
    inventory = write_inventory(tmp_path / "inv.yml", tmp_path, serving_python=str(python),
                                cutover_install_plugin=True, cutover_plugin_wheel=str(wheel))
    result = invoke("stage", "-i", inventory, "--release", release)
    assert result.exit_code == 4
    assert (f"host local: pip of the serving python: expected `{python} -m pip --version` works, found {python}: No "
            f"module named pip (install pip into that environment: `{python} -m ensurepip`") in result.stderr
    assert not (tmp_path / "root").exists()


def test_passed_gpu_checks_carry_no_fix_and_failed_ones_do():
    """stage prints the notes of passed checks: a fix there reads as if the check had failed."""
    params = {"gpu_arch": "sm_90a", "archs": ["sm_90a"], "min_driver": "580.65.06"}
    passed = preflight.gpu_checks(params, [("sm_90", "580.65.06", "NVIDIA H200")])
    assert [(c["fact"], c["ok"], c["note"]) for c in passed] == [
        ("gpu compute capability", True, ""), ("release archs", True, ""), ("driver version", True, "")]
    failed = preflight.gpu_checks({**params, "gpu_arch": "sm_120"}, [("sm_100", "580.65.06", "NVIDIA B200")])
    assert [(c["fact"], c["ok"], c["note"]) for c in failed[:2]] == [
        ("gpu compute capability", False, "the inventory's gpu_arch must match the host's GPUs"),
        ("release archs", False, "rebuild with `cutover build --arch sm_120`")]
