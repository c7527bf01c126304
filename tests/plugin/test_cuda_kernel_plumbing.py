"""CudaKernels' calls into kernel_ext's API, checked on the CPU against a stand-in that enforces the API contract.

The CUDA kernel cannot run here; this stand-in checks every argument the way kernel_ext.api documents it
(enable: the int32 pair {serve, sample} with o_alt, the output chosen from it as the kernel does on the device;
early_start: a bool, which the dispatcher may set only because its gate launch comes right before;
custom_enable: int32 with >= 2; workspaces: contiguous uint8 of at least workspace_bytes() /
SHADOW_WORKSPACE_BYTES; gate rows contiguous) and computes with the split-K reference and the torch epilogue,
so the dispatcher's use of the real API is exercised in all three modes. tests/gpu/test_plugin_graph.py runs
the real thing on the H200.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from cutover.plugin.devicestate import CALLS, COMPARED, torch_gate, torch_shadow_epilogue
from cutover.plugin.dispatch import verify_site
from cutover.plugin.kernels import CudaKernels
from kernel_ext.reference import reference_extend_attention_fwd, splitk_extend_attention_fwd
from kernel_ext import _lib
from kernel_ext.testing import make_verify_batch


class KernelExtContract:
    """kernel_ext.api's surface (verify_attention, verify_gate, workspace_bytes, shadow_accumulate), checked."""

    def __init__(self):
        self.launches = []  # (serve, sample) flags each verify launch saw
        self.early_starts = []  # early_start of each verify launch
        self.last_launch = None  # "gate" or "verify": what the launch before this one was
        self.epilogues = 0

    @staticmethod
    def workspace_bytes(batch, heads, max_len_extend, device):
        return batch * heads * max_len_extend * 8

    def verify_attention(self, *args, enable=None, o_alt=None, workspace=None, early_start=False, **kwargs):
        assert isinstance(early_start, bool) and (not early_start or self.last_launch == "gate")
        self.early_starts.append(early_start)
        self.last_launch = "verify"
        assert enable is not None and enable.dtype == torch.int32 and enable.numel() == 2 and enable.is_contiguous()
        assert o_alt is not None and o_alt.shape == args[3].shape and o_alt.dtype == args[3].dtype
        need = self.workspace_bytes(args[6].numel() - 1, args[0].shape[1], args[12], None)
        assert workspace.dtype == torch.uint8 and workspace.is_contiguous() and workspace.numel() >= need
        assert isinstance(args[12], int)
        serve, sample = int(enable[0]), int(enable[1])
        self.launches.append((serve, sample))
        if not (serve or sample):
            return True
        out = args[3] if serve else o_alt
        return splitk_extend_attention_fwd(*args[:3], out, *args[4:], **kwargs)

    def shadow_accumulate(self, o, scratch, enable, counters, bin_edges, workspace):
        assert scratch.shape == o.shape and enable.numel() == 2 and counters.dtype == torch.float64
        self.last_launch = "epilogue"
        assert workspace.dtype == torch.uint8 and workspace.numel() >= _lib.SHADOW_WORKSPACE_BYTES
        self.epilogues += 1
        torch_shadow_epilogue(o, scratch, enable, counters, bin_edges)

    def verify_gate(self, gate_state, qo_indptr, qo_indptr_gated, custom_enable):
        for t in (gate_state, qo_indptr, qo_indptr_gated, custom_enable):
            assert t.is_contiguous()
        assert gate_state.dtype == torch.int32 and gate_state.numel() == 4
        assert custom_enable.dtype == torch.int32 and custom_enable.numel() >= 2
        assert qo_indptr_gated.dtype == qo_indptr.dtype and qo_indptr_gated.numel() == qo_indptr.numel()
        torch_gate(gate_state, qo_indptr, qo_indptr_gated, custom_enable)
        self.last_launch = "gate"


@pytest.mark.parametrize("mode", ["triton", "shadow", "custom"])
def test_cuda_kernel_set_drives_the_api_correctly(runtime, write_control, mode):
    contract = KernelExtContract()
    runtime.kernels = CudaKernels(SimpleNamespace(verify_attention=contract.verify_attention,
                                                  verify_gate=contract.verify_gate,
                                                  workspace_bytes=contract.workspace_bytes,
                                                  shadow_accumulate=contract.shadow_accumulate))
    write_control(mode, 1)
    runtime.control.poll_once()
    batch = make_verify_batch(8, 8, 2, [25, 60], qo_indptr_dtype=torch.int64, mask_dtype=torch.uint8)
    seen = []
    out = batch.fresh_output()
    with verify_site(1):
        runtime.wrap(lambda *a, **k: (seen.append(a[6].tolist()), reference_extend_attention_fwd(*a, **k)))(
            *batch.args(out))
    expected = batch.fresh_output()
    (splitk_extend_attention_fwd if mode == "custom" else reference_extend_attention_fwd)(*batch.args(expected))
    assert torch.equal(out, expected)
    assert contract.launches == {"triton": [(0, 0)], "shadow": [(0, 1)], "custom": [(1, 0)]}[mode]
    assert contract.early_starts == [True]
    assert contract.epilogues == 1 and int(runtime.state.counters[1, CALLS]) == 1
    assert seen == [[0, 0, 0] if mode == "custom" else batch.qo_indptr.tolist()]
    assert int(runtime.state.counters[1, COMPARED]) == (mode == "shadow")
