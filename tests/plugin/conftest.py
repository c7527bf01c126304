"""Fixtures of the plugin tests: a host layout in tmp_path, control-file writes, a CPU plugin runtime."""

from __future__ import annotations

import pytest
import torch

from armed import armed_record, stage_test_release
from cutover.hostprotocol.hostlayout import ControlRecord, HostPaths, atomic_write_text
from cutover.plugin.runtime import PluginRuntime


@pytest.fixture
def paths(tmp_path) -> HostPaths:
    return HostPaths(cutover_root=str(tmp_path / "root"), state_dir=str(tmp_path / "state"))


@pytest.fixture
def loaded_release(paths) -> str:
    """TEST_RELEASE staged as <cutover_root>/current: the release a rank started here loads."""
    return stage_test_release(paths)


@pytest.fixture
def write_control(paths, loaded_release):
    """write_control(mode, generation, lease_s=60.0 | None, sample_rate=1): atomically, as the CLI does."""

    def write(mode: str, generation: int, lease_s: float | None = 60.0, sample_rate: int = 1) -> ControlRecord:
        record = armed_record(mode, generation, lease_s=lease_s, sample_rate=sample_rate)
        atomic_write_text(paths.control, record.to_json())
        return record

    return write


@pytest.fixture
def runtime(paths, loaded_release):
    """A CPU runtime (reference kernels) whose control thread is NOT running: tests drive poll_once()."""
    rt = PluginRuntime(paths, 0, torch.device("cpu"), audit_interval_s=0.0)
    yield rt
    rt.control.stop(clean=True)


@pytest.fixture(scope="session")
def sglang_extend_attention_fwd():
    """SGLang's real extend_attention_fwd under TRITON_INTERPRET=1 in a worker process (float32 CPU tensors);
    tests using it carry ``@pytest.mark.sglang`` (skipped with the reason when SGLang is not installed)."""
    from kernel_ext.testing import InterpretedSGLangExtendAttention

    kernel = InterpretedSGLangExtendAttention()
    yield kernel
    kernel.close()
