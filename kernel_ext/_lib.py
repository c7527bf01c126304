"""ctypes loader of libcutover_verify.so (no torch import here).

Library path, first match wins: `$CUTOVER_KERNEL_LIB`, `$CUTOVER_ROOT/current/libcutover_verify.so`, then the
in-repo build output `kernel_ext/build/libcutover_verify.so`. The loader refuses a library whose ABI version
differs from ours and, per device, one that holds no kernel image for the device's arch.
"""
from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

from .build import ABI_VERSION, LIBRARY_NAME

LIB_ENV = "CUTOVER_KERNEL_LIB"
ROOT_ENV = "CUTOVER_ROOT"

# CutoverStatus and CutoverDtype of csrc/cutover_verify.h
OK, ERR_INVALID_ARGUMENT, ERR_UNSUPPORTED, ERR_WORKSPACE, ERR_CUDA, ERR_ARCH = range(6)
DTYPE_INT32, DTYPE_INT64, DTYPE_UINT8, DTYPE_BF16, DTYPE_FP32 = 1, 2, 3, 4, 5
# CutoverShadowCounter: the per-layer float64 counters row cutover_shadow_accumulate updates (a CPU test checks
# these against the header; cutover/plugin/devicestate.py takes its layout from here).
(COUNTER_CALLS, COUNTER_RESERVED, COUNTER_SERVE_BAD_O, COUNTER_SERVED, COUNTER_SAMPLE_BAD_SCRATCH,
 COUNTER_SAMPLE_BAD_O, COUNTER_COMPARED, COUNTER_REL_L2_MAX, COUNTER_MAX_ABS, COUNTER_HIST) = range(10)
NONFINITE_SENTINEL = 1.0e30  # CUTOVER_NONFINITE_SENTINEL
SHADOW_WORKSPACE_BYTES = 4352  # CUTOVER_SHADOW_WORKSPACE_BYTES: one layer's shadow_accumulate workspace
# The snapshot staging header (CUTOVER_SNAPSHOT_HEADER_WORDS int64 words, CutoverSnapshotWord indices)
SNAPSHOT_HEADER_WORDS = 64
SNAPSHOT_FORMAT = 1
(SNAP_ARM, SNAP_WRITING, SNAP_COMPLETED, SNAP_TICKET, SNAP_FORMAT, SNAP_LAYER, SNAP_CALL, SNAP_FROM_GRAPH, SNAP_BATCH,
 SNAP_KEPT, SNAP_TOKENS, SNAP_TOKENS_TOTAL, SNAP_ROWS, SNAP_ROWS_TOTAL, SNAP_MASK_BYTES, SNAP_HEADS, SNAP_MAX_EXTEND,
 SNAP_IS_CAUSAL, SNAP_SM_SCALE, SNAP_K_SCALE, SNAP_V_SCALE, SNAP_OFF_QO_INDPTR, SNAP_OFF_KV_INDPTR, SNAP_OFF_MASK,
 SNAP_OFF_Q, SNAP_OFF_K_EXTEND, SNAP_OFF_V_EXTEND, SNAP_OFF_O, SNAP_OFF_O_ALT, SNAP_OFF_KV, SNAP_END) = range(31)


class KernelLibraryError(RuntimeError):
    """The kernel library is missing, of another ABI, or cannot serve this device."""


class KernelCallError(RuntimeError):
    """The library rejected a call or a CUDA launch failed; carries the library's status code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class VerifyParams(ctypes.Structure):
    """Mirror of CutoverVerifyParams (field order and types must match the header)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("batch", ctypes.c_int32),
        ("num_heads", ctypes.c_int32),
        ("max_extend", ctypes.c_int32),
        ("head_dim_qk", ctypes.c_int32),
        ("head_dim_v", ctypes.c_int32),
        ("q", ctypes.c_void_p),
        ("q_stride_token", ctypes.c_int64),
        ("q_stride_head", ctypes.c_int64),
        ("k_extend", ctypes.c_void_p),
        ("k_extend_stride_token", ctypes.c_int64),
        ("v_extend", ctypes.c_void_p),
        ("v_extend_stride_token", ctypes.c_int64),
        ("o", ctypes.c_void_p),
        ("o_stride_token", ctypes.c_int64),
        ("o_stride_head", ctypes.c_int64),
        ("o_alt", ctypes.c_void_p),
        ("o_alt_stride_token", ctypes.c_int64),
        ("o_alt_stride_head", ctypes.c_int64),
        ("kv_buffer", ctypes.c_void_p),
        ("kv_buffer_stride_row", ctypes.c_int64),
        ("qo_indptr", ctypes.c_void_p),
        ("qo_indptr_dtype", ctypes.c_int32),
        ("kv_indptr", ctypes.c_void_p),
        ("kv_indptr_dtype", ctypes.c_int32),
        ("kv_indices", ctypes.c_void_p),
        ("kv_indices_dtype", ctypes.c_int32),
        ("custom_mask", ctypes.c_void_p),
        ("custom_mask_dtype", ctypes.c_int32),
        ("mask_indptr", ctypes.c_void_p),
        ("mask_indptr_dtype", ctypes.c_int32),
        ("is_causal", ctypes.c_int32),
        ("sm_scale", ctypes.c_float),
        ("k_scale", ctypes.c_float),
        ("v_scale", ctypes.c_float),
        ("k_scale_ptr", ctypes.c_void_p),
        ("v_scale_ptr", ctypes.c_void_p),
        ("enable", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_int64),
        ("num_sms", ctypes.c_int32),
        ("config", ctypes.c_int32),
        ("early_start", ctypes.c_int32),
    ]


def default_library_path() -> Path:
    """Where the library is looked for (see the module docstring)."""
    explicit = os.environ.get(LIB_ENV)
    if explicit:
        return Path(explicit)
    root = os.environ.get(ROOT_ENV)
    if root and (Path(root) / "current" / LIBRARY_NAME).exists():
        return Path(root) / "current" / LIBRARY_NAME
    return Path(__file__).resolve().parent / "build" / LIBRARY_NAME


class KernelLibrary:
    """A loaded, ABI-checked libcutover_verify.so."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.exists():
            raise KernelLibraryError(
                f"kernel library {self.path} does not exist: build it (python -m kernel_ext.build or cutover build) "
                f"or point {LIB_ENV} at a built {LIBRARY_NAME}"
            )
        try:
            lib = ctypes.CDLL(str(self.path))
        except OSError as exc:
            raise KernelLibraryError(f"cannot load kernel library {self.path}: {exc}") from exc
        lib.cutover_abi_version.restype = ctypes.c_int
        lib.cutover_last_error.restype = ctypes.c_char_p
        lib.cutover_build_targets.restype = ctypes.c_char_p
        lib.cutover_check_device.argtypes = [ctypes.c_int]
        lib.cutover_workspace_bytes.restype = ctypes.c_int64
        lib.cutover_workspace_bytes.argtypes = [ctypes.c_int32] * 5 + [ctypes.c_int]
        lib.cutover_verify_attention.argtypes = [ctypes.POINTER(VerifyParams), ctypes.c_void_p]
        lib.cutover_verify_gate.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                            ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        lib.cutover_shadow_accumulate.argtypes = (
            [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64] * 2
            + [ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
               ctypes.c_void_p, ctypes.c_void_p])
        self.has_snapshot = hasattr(lib, "cutover_verify_snapshot")  # absent from libraries built before it
        if self.has_snapshot:
            lib.cutover_verify_snapshot.argtypes = [ctypes.POINTER(VerifyParams), ctypes.c_void_p, ctypes.c_int32,
                                                    ctypes.c_int32, ctypes.c_void_p]
        found = lib.cutover_abi_version()
        if found != ABI_VERSION:
            raise KernelLibraryError(
                f"kernel library {self.path} has ABI version {found}, this kernel_ext needs {ABI_VERSION}: "
                "install the release built from the same source revision as the plugin"
            )
        self._lib = lib
        self.targets = lib.cutover_build_targets().decode()
        self._devices_ok: set[int] = set()
        self._lock = threading.Lock()

    def last_error(self) -> str:
        return self._lib.cutover_last_error().decode(errors="replace")

    def _check(self, code: int, what: str) -> None:
        if code != OK:
            raise KernelCallError(code, f"{what}: {self.last_error()}")

    def check_device(self, device: int) -> None:
        """Raise KernelLibraryError unless the library's kernels can run on `device` (cached)."""
        if device in self._devices_ok:
            return
        with self._lock:
            code = self._lib.cutover_check_device(device)
            if code != OK:
                raise KernelLibraryError(f"kernel library {self.path}: {self.last_error()}")
            self._devices_ok.add(device)

    def workspace_bytes(self, batch: int, heads: int, max_extend: int, num_sms: int, config: int, device: int) -> int:
        n = self._lib.cutover_workspace_bytes(batch, heads, max_extend, num_sms, config, device)
        if n < 0:
            raise KernelCallError(ERR_INVALID_ARGUMENT, f"cutover_workspace_bytes: {self.last_error()}")
        return n

    def verify_attention(self, params: VerifyParams, stream: int) -> int:
        """Enqueue one call; returns the status code (the caller decides what a code means)."""
        params.struct_size = ctypes.sizeof(VerifyParams)
        return self._lib.cutover_verify_attention(ctypes.byref(params), ctypes.c_void_p(stream))

    def verify_snapshot(self, params: VerifyParams, gate_state: int, layer: int, from_graph: bool,
                        stream: int) -> int:
        """Enqueue the gated snapshot of one call (params.workspace = the staging area); returns the status code."""
        if not self.has_snapshot:
            raise KernelLibraryError(f"kernel library {self.path} has no cutover_verify_snapshot: rebuild it")
        params.struct_size = ctypes.sizeof(VerifyParams)
        return self._lib.cutover_verify_snapshot(ctypes.byref(params), gate_state, layer, int(from_graph),
                                                 ctypes.c_void_p(stream))

    def verify_gate(self, gate_state: int, qo_indptr: int, qo_indptr_gated: int, n: int, is_int64: bool,
                    custom_enable: int, stream: int) -> None:
        code = self._lib.cutover_verify_gate(gate_state, qo_indptr, qo_indptr_gated, n, int(is_int64),
                                             custom_enable, ctypes.c_void_p(stream))
        self._check(code, "cutover_verify_gate")

    def shadow_accumulate(self, o: tuple[int, int, int], scratch: tuple[int, int, int], tokens: int, heads: int,
                          enable: int, counters: int, bin_edges: int, num_edges: int, workspace: int,
                          stream: int) -> None:
        """Enqueue the fused shadow epilogue; o and scratch are (pointer, token stride, head stride)."""
        code = self._lib.cutover_shadow_accumulate(*o, *scratch, tokens, heads, enable, counters, bin_edges,
                                                   num_edges, workspace, ctypes.c_void_p(stream))
        self._check(code, "cutover_shadow_accumulate")


_loaded: KernelLibrary | None = None
_load_lock = threading.Lock()


def load_library(path: str | os.PathLike | None = None) -> KernelLibrary:
    """Load (once) and return the kernel library; an explicit `path` replaces the cached one."""
    global _loaded
    with _load_lock:
        if path is not None:
            _loaded = KernelLibrary(Path(path))
        elif _loaded is None:
            _loaded = KernelLibrary(default_library_path())
        return _loaded
