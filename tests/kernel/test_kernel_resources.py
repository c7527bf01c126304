"""Registers, stack and spills of every kernel on every release arch, as ptxas reports them (kernel_ext.build).

The mma.sync kernels run at or near 255 registers (configuration 2 at exactly 255 on sm_120), so a change that
fits on one arch can spill, or move an array to local memory, on the other; only a compile says so.
"""

from __future__ import annotations

import shutil

import pytest

from kernel_ext import build

PTXAS_SAMPLE = """\
ptxas info    : Compiling entry function '_ZN7cutover18verify_gate_kernelEPiPKvPvliS0_' for 'sm_90a'
ptxas info    : Function properties for _ZN7cutover18verify_gate_kernelEPiPKvPvliS0_
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 14 registers, used 0 barriers
ptxas info    : Compiling entry function '_ZN7cutover18verify_main_kernelIiEEvv' for 'sm_120'
ptxas info    : Function properties for _ZN7cutover18verify_main_kernelIiEEvv
    104 bytes stack frame, 120 bytes spill stores, 220 bytes spill loads
ptxas info    : Used 255 registers, used 3 barriers, 104 bytes cumulative stack size
"""


def test_the_ptxas_report_is_read_entry_by_entry_spills_included():
    gate, main = build.parse_ptxas_report(PTXAS_SAMPLE)
    assert (gate.arch, gate.registers, gate.stack_bytes, gate.spills) == ("sm_90a", 14, 0, False)
    assert (main.kernel, main.arch, main.registers) == ("_ZN7cutover18verify_main_kernelIiEEvv", "sm_120", 255)
    assert (main.stack_bytes, main.spill_store_bytes, main.spill_load_bytes, main.spills) == (104, 120, 220, True)


def test_an_entry_without_its_registers_is_an_error_not_a_row():
    cut = PTXAS_SAMPLE.rsplit("ptxas info    : Used", 1)[0]
    with pytest.raises(build.KernelBuildError, match=r"no registers for _ZN7cutover18verify_main_kernelIiEEvv \(sm_120\)"):
        build.parse_ptxas_report(cut)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit) on PATH to compile the kernels")
def test_no_kernel_spills_or_uses_local_memory_on_any_release_arch():
    rows = build.kernel_resources(build.DEFAULT_ARCHS)
    for arch in build.DEFAULT_ARCHS:
        assert any(r.arch == arch and "verify_main_kernel" in r.kernel for r in rows), f"no main kernel for {arch}"
    offenders = [f"{r.arch} {r.kernel}: {r.registers} registers, stack {r.stack_bytes} B, spill stores "
                 f"{r.spill_store_bytes} B, loads {r.spill_load_bytes} B" for r in rows if r.spills or r.stack_bytes]
    assert not offenders, "\n".join(offenders)
