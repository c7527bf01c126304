"""Fixtures of the kernel tests: SGLang's real Triton kernel, interpreted on the CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from kernel_ext.testing import InterpretedSGLangExtendAttention


@pytest.fixture(scope="session")
def sglang_extend_attention_fwd():
    """SGLang's ``extend_attention_fwd`` under TRITON_INTERPRET=1 in a worker process (float32 CPU tensors).

    Tests using it carry ``@pytest.mark.sglang``; the root conftest skips them, with the reason, when
    SGLang is not installed.
    """
    kernel = InterpretedSGLangExtendAttention()
    yield kernel
    kernel.close()


def load_device_tool(name: str) -> ModuleType:
    """kernel_ext/device/<name>.py, a script directory rather than a package, loaded as a module."""
    path = Path(__file__).resolve().parents[2] / "kernel_ext" / "device" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
