"""Which kernels compute the custom path: the CUDA kernel (kernel_ext) or, without a GPU, the torch reference.

Both present one interface to the dispatcher:

* ``gate(gate_row, qo_indptr, qo_indptr_gated, enable)``: the captured gate (see devicestate.torch_gate);
* ``custom(args, kwargs, o, scratch, enable) -> bool``: our kernel on SGLang's positional ``args``, ONE launch
  whose output is chosen on the device from the gate's flags ``enable`` = [serve, sample]: serve -> ``o``,
  else sample -> ``scratch``, else it exits at once. False means "this call shape is not served" and depends
  only on shapes, dtypes and flags, so it is the same at capture time and at every replay;
* ``epilogue(o, scratch, enable, counters, bin_edges, workspace)``: the accounting (the semantics of
  devicestate.torch_shadow_epilogue; on CUDA kernel_ext's fused ``shadow_accumulate``, one launch that exits at
  once unless a flag is set; ``workspace`` is the layer's reduction scratch);
* ``label``: what computes the custom path, as heartbeats and stats name it.
"""

from __future__ import annotations

import json
import os

import torch

from cutover.plugin.buffers import GrowOnlyBuffers
from cutover.plugin.devicestate import torch_gate, torch_shadow_epilogue
from kernel_ext._lib import KernelCallError

CUDA_LABEL = "cuda"
REFERENCE_LABEL = "reference (no GPU)"
O_INDEX, QO_INDPTR_INDEX = 3, 6  # positions of o_extend and qo_indptr in extend_attention_fwd's arguments
KERNEL_LIBRARY = "libcutover_verify.so"  # file name inside a release directory (kernel_ext._lib)


class KernelUnavailable(Exception):
    """The custom path cannot run in this process; the message says why (logged once, rank stays on Triton)."""


def replace_arg(args: tuple, index: int, value) -> tuple:
    """``args`` with one positional argument swapped (a small tuple, no device memory)."""
    return args[:index] + (value,) + args[index + 1 :]


class CudaKernels:
    """kernel_ext's CUDA kernel, gate and fused shadow epilogue (``kernel_ext.api``)."""

    label = CUDA_LABEL

    def __init__(self, kernel_ext_module):
        self._verify_attention = kernel_ext_module.verify_attention
        self._workspace_bytes = kernel_ext_module.workspace_bytes
        self._fused_gate = getattr(kernel_ext_module, "verify_gate", None)
        self._fused_epilogue = kernel_ext_module.shadow_accumulate
        self.workspaces = GrowOnlyBuffers()

    def _workspace_for(self, args) -> torch.Tensor:
        """A preallocated workspace big enough for this call (grow-only; both launches of a call share it)."""
        q, qo_indptr, max_len = args[0], args[QO_INDPTR_INDEX], args[12]
        index = q.device.index if q.device.index is not None or not q.is_cuda else torch.cuda.current_device()
        need = self._workspace_bytes(qo_indptr.numel() - 1, q.shape[1], int(max_len), index)
        return self.workspaces.get(("workspace", q.device), need, torch.uint8, q.device)

    def gate(self, gate_row, qo_indptr, qo_indptr_gated, enable) -> None:
        if self._fused_gate is not None:
            self._fused_gate(gate_row, qo_indptr, qo_indptr_gated, enable)
        else:
            torch_gate(gate_row, qo_indptr, qo_indptr_gated, enable)

    def custom(self, args, kwargs, o, scratch, enable) -> bool:
        try:
            workspace = self._workspace_for(args)
        except KernelCallError:
            return False  # the plan does not serve these shapes (e.g. more than 64 draft tokens): Triton does
        # early start: the dispatcher launches the gate right before this call, and the gate writes none of the
        # index tensors the kernel plans from while the gate runs (kernel_ext.api.verify_attention)
        return bool(self._verify_attention(*replace_arg(args, O_INDEX, o), enable=enable, o_alt=scratch,
                                           workspace=workspace, early_start=True, **kwargs))

    def epilogue(self, o, scratch, enable, counters, bin_edges, workspace) -> None:
        self._fused_epilogue(o, scratch, enable, counters, bin_edges, workspace)


class ReferenceKernels:
    """The torch split-K reference as the custom kernel (machines without a GPU), same interface.

    There is no graph on the CPU, so ``custom`` may read ``enable`` on the host; when disabled it still answers
    whether the call shape is served (kernel_ext.reference.unserved_call), as the CUDA kernel does.
    """

    label = REFERENCE_LABEL

    def __init__(self):
        from kernel_ext import reference

        self._splitk = reference.splitk_extend_attention_fwd
        self._unserved = reference.unserved_call

    def gate(self, gate_row, qo_indptr, qo_indptr_gated, enable) -> None:
        torch_gate(gate_row, qo_indptr, qo_indptr_gated, enable)

    def served(self, args, kwargs) -> bool:
        return self._unserved(*args, **kwargs) is None

    def custom(self, args, kwargs, o, scratch, enable) -> bool:
        serve, sample = (int(flag) for flag in enable[:2])
        if not (serve or sample):
            return self.served(args, kwargs)
        return bool(self._splitk(*replace_arg(args, O_INDEX, o if serve else scratch), **kwargs))

    def epilogue(self, o, scratch, enable, counters, bin_edges, workspace) -> None:
        torch_shadow_epilogue(o, scratch, enable, counters, bin_edges)


def _cuda_arch_problem(device: torch.device, release_dir: str | None) -> str | None:
    """Why the release cannot run on this GPU (arch not built), or None."""
    if not release_dir:
        return None
    manifest_path = os.path.join(release_dir, "manifest.json")
    try:
        with open(manifest_path) as handle:
            archs = json.load(handle).get("archs") or []
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return f"release manifest {manifest_path} unreadable: {exc}"
    major, minor = torch.cuda.get_device_capability(device)
    here = major * 10 + minor
    for arch in archs:
        digits = "".join(ch for ch in str(arch) if ch.isdigit())
        if not digits:
            continue
        if str(arch).startswith("sm_") and int(digits) == here:
            return None
        if str(arch).startswith("compute_") and int(digits) <= here:
            return None  # PTX: JIT-compiled for this GPU
    return f"GPU arch sm_{here} is not in the release's archs {archs}"


def select_kernels(device: torch.device, release_dir: str | None):
    """The kernel set for ``device``; raises KernelUnavailable with the reason when there is none."""
    if device.type != "cuda":
        try:
            return ReferenceKernels()
        except ImportError as exc:
            raise KernelUnavailable(f"torch reference kernels not importable: {exc}") from exc
    problem = _cuda_arch_problem(device, release_dir)
    if problem:
        raise KernelUnavailable(problem)
    try:
        from kernel_ext import api
    except ImportError as exc:
        raise KernelUnavailable(f"kernel library not importable: {exc}") from exc
    library = os.path.join(release_dir, KERNEL_LIBRARY) if release_dir else None
    if library and not os.path.exists(library):  # never another build under this release's name
        raise KernelUnavailable(f"release {os.path.basename(release_dir)} has no {KERNEL_LIBRARY}: restage it")
    try:
        from kernel_ext import _lib

        _lib.load_library(library)  # None: kernel_ext's own search (CUTOVER_KERNEL_LIB, $CUTOVER_ROOT/current, ...)
    except Exception as exc:  # noqa: BLE001 - any load failure keeps the rank on Triton
        raise KernelUnavailable(f"kernel library {library or '(default search)'} did not load: {exc}") from exc
    return CudaKernels(api)
