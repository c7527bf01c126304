"""Fixtures of the kernel tests: SGLang's real Triton kernel, interpreted on the CPU."""

from __future__ import annotations

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
