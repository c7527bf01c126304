"""Shared fixtures (real sshd test hosts) and the skip rules of the `gpu`, `integration`, `sglang` markers.

Each marker skips its tests with a stated reason when this machine cannot run them; nothing is skipped
silently and a skipped test never counts as passed (`pytest -ra` lists every skip with its reason).
Engineers keep fixtures of their own area in their subfolder's conftest.py.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from clirunner import Cli, cli_env, cutover_executable
from sshd import TestHosts, sshd_available

# Property-based tests (hypothesis): CUTOVER_HYPOTHESIS_PROFILE picks the budget. `ci` (the default) is small and
# fixed, so the suite's time does not grow; `long` is for a developer machine (docs/testing.md).
settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("long", max_examples=5000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("CUTOVER_HYPOTHESIS_PROFILE", "ci"))

RELEASE_TEST_ARCH = "sm_90a"  # one arch: each costs minutes of nvcc on a 2-core machine
GPU_SKIP_REASON = "needs an NVIDIA GPU and the built kernel library; run through the device tool"


@functools.cache
def _gpu_missing() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return f"{GPU_SKIP_REASON} (torch is not installed)"
    import torch

    return None if torch.cuda.is_available() else GPU_SKIP_REASON


@functools.cache
def _sglang_missing() -> str | None:
    for layout in ("sglang.kernels.ops.attention", "sglang.srt.layers.attention.triton_ops"):
        try:
            if importlib.util.find_spec(f"{layout}.extend_attention") is not None:
                return None
        except ModuleNotFoundError:
            continue
    return "needs SGLang's attention kernels: pip install --no-deps sglang==0.5.23 (scripts/setup.sh does)"


def _integration_missing() -> str | None:
    reason = sshd_available()
    if reason:
        return f"needs real sshd test hosts: {reason}"
    if importlib.util.find_spec("ansible_runner") is None:
        return "needs ansible-runner: pip install -e '.[test]'"
    return None


_MARKER_CHECKS: dict[str, Callable[[], str | None]] = {
    "gpu": _gpu_missing,
    "sglang": _sglang_missing,
    "integration": _integration_missing,
}


SLOW_FIXTURES = frozenset({"release", "ssh_hosts", "ssh_hosts_factory", "wheel"})  # built release or wheel, sshd hosts


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow tests (integration, or using a built release or sshd hosts) `slow`; skip marked tests whose
    requirement is missing (each check runs only if a marked test exists)."""
    for item in items:
        if item.get_closest_marker("integration") or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        for marker, missing in _MARKER_CHECKS.items():
            if item.get_closest_marker(marker) is None:
                continue
            reason = missing()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
                break


@pytest.fixture
def ssh_hosts_factory() -> Iterator[Callable[[int], TestHosts]]:
    """Start `n` real sshd hosts (host1 on 127.0.0.2, host2 on 127.0.0.3, ...); all stopped at teardown."""
    started: list[TestHosts] = []

    def start(count: int = 2) -> TestHosts:
        reason = _integration_missing()
        if reason:
            pytest.skip(reason)
        hosts = TestHosts(count)
        started.append(hosts)
        return hosts.setup()

    yield start
    for hosts in started:
        hosts.close()


@pytest.fixture
def ssh_hosts(ssh_hosts_factory: Callable[[int], TestHosts]) -> TestHosts:
    """Two fresh real sshd hosts, each with its own empty cutover_root and state dir."""
    return ssh_hosts_factory(2)


@pytest.fixture
def inventory_file(ssh_hosts: TestHosts) -> Path:
    """The Ansible inventory (group `serving`: host1, host2) of the `ssh_hosts` fixture."""
    return ssh_hosts.inventory


@pytest.fixture(scope="session")
def releases_dir(request: pytest.FixtureRequest) -> Path:
    """Where test releases are built: pytest's cache dir, so a release survives between sessions."""
    return Path(request.config.cache.mkdir("cutover-releases"))


@pytest.fixture(scope="session")
def release(releases_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real kernel release directory, built once by `cutover build --arch sm_90a`.

    `cutover build` is a no-op when the identical release (same sources, arch and nvcc) exists, so the
    compile happens only when the kernel sources changed since the last session.
    """
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc (the CUDA toolkit) on PATH to build a kernel release with `cutover build`")
    home = tmp_path_factory.mktemp("build-home")
    result = subprocess.run(
        [cutover_executable(), "build", "--arch", RELEASE_TEST_ARCH, "--out", str(releases_dir)],
        capture_output=True, text=True, timeout=1800, env=cli_env(home, releases_dir),
    )
    assert result.returncode == 0, f"cutover build failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
    return releases_dir / (releases_dir / "LATEST").read_text().strip()


@pytest.fixture
def cli(tmp_path: Path, releases_dir: Path) -> Cli:
    """The real `cutover` CLI as a subprocess, with an empty HOME and CUTOVER_OPERATOR=alice@test."""
    home = tmp_path / "home"
    home.mkdir()
    return Cli(home=home, releases_dir=releases_dir, cwd=tmp_path)
