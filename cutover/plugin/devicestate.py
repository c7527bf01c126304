"""The switch and the shadow counters as data in device memory, so a captured CUDA graph obeys them.

Per layer (row ``l``), preallocated once for ``MAX_LAYERS`` layers:

* ``gate[l]``     int32[4]  {mode 0 triton / 1 shadow / 2 custom, sample_every, call_counter, reserved}
* ``enable[l]``   int32[2]  written by the gate on every call: [0] serve (our kernel writes ``o``),
                            [1] shadow sample (our kernel writes the scratch buffer, the epilogue compares)
* ``counters[l]`` float64[COUNTER_WIDTH], monotonic since the generation was applied (layout below)
* ``epilogue_workspace[l]`` uint8, the fused epilogue's per-layer reduction scratch (zeroed once, then owned
                            by kernel_ext; never reset from here: that would race a running epilogue)

Only the control thread changes ``gate[:, 0:2]``, with a copy on a side stream (CUDA) followed by a sync of
that side stream, never of the compute stream. The hot path only reads and bumps these tensors in place.

The control thread runs while SGLang captures its CUDA graphs, in torch's default "global" capture mode, in which
CUDA refuses a synchronizing call from any other thread and invalidates the capture. So the control thread puts
itself in thread-local capture mode first (`isolate_from_other_threads_captures`): its side-stream copies and
syncs touch no captured stream, and only its own captures (it makes none) would restrict it.
"""

from __future__ import annotations

import ctypes
import threading

import torch

from cutover.hostprotocol.hostlayout import REL_L2_BIN_EDGES
from kernel_ext import _lib

MAX_LAYERS = 512
MODE_CODES = {"triton": 0, "shadow": 1, "custom": 2}

# counters row layout (float64: exact integer counts up to 2**53), defined once by the kernel library's ABI
# (CutoverShadowCounter in kernel_ext/csrc/cutover_verify.h, mirrored by kernel_ext._lib): the fused epilogue
# and torch_shadow_epilogue below write the same cells. The non-finite counts per kernel are sums of cells
# (nonfinite_custom / nonfinite_stock below).
CALLS = _lib.COUNTER_CALLS
SERVE_BAD_O, SERVED = _lib.COUNTER_SERVE_BAD_O, _lib.COUNTER_SERVED
SAMPLE_BAD_SCRATCH, SAMPLE_BAD_O, COMPARED = (_lib.COUNTER_SAMPLE_BAD_SCRATCH, _lib.COUNTER_SAMPLE_BAD_O,
                                               _lib.COUNTER_COMPARED)
REL_L2_MAX, MAX_ABS = _lib.COUNTER_REL_L2_MAX, _lib.COUNTER_MAX_ABS
HIST = _lib.COUNTER_HIST
HIST_BINS = len(REL_L2_BIN_EDGES) + 1
COUNTER_WIDTH = HIST + HIST_BINS


CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1  # CUstreamCaptureMode (cuda.h): GLOBAL 0, THREAD_LOCAL 1, RELAXED 2


def isolate_from_other_threads_captures() -> None:
    """Put the calling thread in thread-local stream capture mode (the driver's
    cuThreadExchangeStreamCaptureMode, per thread), so another thread's graph capture in global mode neither
    refuses this thread's synchronizing calls nor is invalidated by them. Raises RuntimeError if it cannot."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise RuntimeError(f"the CUDA driver library cannot be opened: {exc}") from exc
    mode = ctypes.c_int(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    result = driver.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))
    if result != 0:
        raise RuntimeError(f"cuThreadExchangeStreamCaptureMode returned CUresult {result}")


def nonfinite_custom(counters: torch.Tensor) -> torch.Tensor:
    """Calls whose custom output held a non-finite value: the shadow scratch, or o when ours served it."""
    return counters[..., SAMPLE_BAD_SCRATCH] + counters[..., SERVE_BAD_O]


def nonfinite_stock(counters: torch.Tensor) -> torch.Tensor:
    """Shadow calls whose stock output (o) held a non-finite value."""
    return counters[..., SAMPLE_BAD_O]


# A comparison with a non-finite value records this (finite, JSON-safe) relative L2 / max abs, lands in the
# last histogram bucket, and is counted in the non-finite counters.
NONFINITE_SENTINEL = _lib.NONFINITE_SENTINEL


class LayerSlots:
    """Views of one layer's rows (made once, so the hot path slices nothing)."""

    __slots__ = ("gate", "enable", "serve", "sample", "counters", "calls", "epilogue_workspace")

    def __init__(self, state: "DeviceState", layer: int):
        self.gate = state.gate[layer]
        self.enable = state.enable[layer]
        self.serve = self.enable[0:1]
        self.sample = self.enable[1:2]
        self.counters = state.counters[layer]
        self.calls = self.counters[CALLS : CALLS + 1]
        self.epilogue_workspace = state.epilogue_workspace[layer]


class DeviceState:
    """Gate rows, enable flags and shadow counters for every layer on one device."""

    def __init__(self, device: torch.device, max_layers: int = MAX_LAYERS):
        self.device = torch.device(device)
        self.max_layers = max_layers
        self.gate = torch.zeros(max_layers, 4, dtype=torch.int32, device=self.device)
        self.gate[:, 1] = 1
        self.enable = torch.zeros(max_layers, 2, dtype=torch.int32, device=self.device)
        self.counters = torch.zeros(max_layers, COUNTER_WIDTH, dtype=torch.float64, device=self.device)
        self.bin_edges = torch.tensor(REL_L2_BIN_EDGES, dtype=torch.float64, device=self.device)
        self.epilogue_workspace = torch.zeros(max_layers, _lib.SHADOW_WORKSPACE_BYTES, dtype=torch.uint8,
                                              device=self.device)
        self._slots: dict[int, LayerSlots] = {}
        self._lock = threading.Lock()
        is_cuda = self.device.type == "cuda"
        self._side_stream = torch.cuda.Stream(device=self.device) if is_cuda else None
        self._mode_host = torch.zeros(max_layers, 2, dtype=torch.int32, pin_memory=is_cuda)
        self._mode_dev = torch.zeros(max_layers, 2, dtype=torch.int32, device=self.device)
        self._counters_host = torch.zeros(max_layers, COUNTER_WIDTH, dtype=torch.float64, pin_memory=is_cuda)

    def slots(self, layer: int) -> LayerSlots | None:
        """The layer's views, or None when the layer id is outside the preallocated rows."""
        found = self._slots.get(layer)
        if found is None:
            if not 0 <= layer < self.max_layers:
                return None
            with self._lock:
                found = self._slots.setdefault(layer, LayerSlots(self, layer))
        return found

    def set_mode(self, mode: str, sample_every: int, reset_counters: bool) -> None:
        """Write mode and sample rate for every layer (control thread). Returns once the device sees it."""
        self._mode_host[:, 0] = MODE_CODES[mode]
        self._mode_host[:, 1] = max(1, int(sample_every))
        if self._side_stream is None:
            self.gate[:, 0:2].copy_(self._mode_host)
            if reset_counters:
                self.counters.zero_()
            return
        with torch.cuda.stream(self._side_stream):
            self._mode_dev.copy_(self._mode_host, non_blocking=True)
            self.gate[:, 0:2].copy_(self._mode_dev)
            if reset_counters:
                self.counters.zero_()
        self._side_stream.synchronize()

    def read_counters(self) -> torch.Tensor:
        """A host copy of all counters (control thread; syncs only the side stream)."""
        if self._side_stream is None:
            self._counters_host.copy_(self.counters)
            return self._counters_host.clone()
        with torch.cuda.stream(self._side_stream):
            self._counters_host.copy_(self.counters, non_blocking=True)
        self._side_stream.synchronize()
        return self._counters_host.clone()


def torch_gate(gate: torch.Tensor, qo_indptr: torch.Tensor, qo_indptr_gated: torch.Tensor,
               enable: torch.Tensor) -> None:
    """The gate in plain torch ops (CPU, and the fallback where kernel_ext has no fused gate).

    Sets enable = [mode == custom, mode == shadow and counter % sample_every == 0] (counter before this
    call's increment, as kernel_ext.verify_gate does), bumps the counter,
    and writes ``qo_indptr_gated`` = ``qo_indptr``, or zeros in custom mode (stock then does no work).
    Every write is in place; nothing depends on tensor values in Python.
    """
    serve = gate[0:1] == MODE_CODES["custom"]
    sample = (gate[0:1] == MODE_CODES["shadow"]) & (torch.remainder(gate[2:3], gate[1:2]) == 0)
    enable[0:1].copy_(serve)
    enable[1:2].copy_(sample)
    gate[2:3].add_(1)
    torch.mul(qo_indptr, torch.logical_not(serve).to(qo_indptr.dtype), out=qo_indptr_gated)


def torch_shadow_epilogue(o: torch.Tensor, scratch: torch.Tensor, enable: torch.Tensor, counters: torch.Tensor,
                          bin_edges: torch.Tensor) -> None:
    """Accumulate one verify call into a layer's counters; ``enable`` = the gate's [serve, sample] flags.

    The specification of kernel_ext's fused ``shadow_accumulate`` (the CUDA path; tests/gpu checks the two
    agree), and the CPU path. ``o`` holds stock's output (shadow) or ours (custom); ``scratch`` ours in a shadow
    sample. With w = sample: rel_l2 = ||scratch - o||_2 / ||o||_2, max_abs = max |scratch - o| (difference and
    norms in float32); both are NONFINITE_SENTINEL when either output holds a non-finite value. Updates:
    CALLS += 1; SERVED += serve, SERVE_BAD_O += serve * bad(o); COMPARED += w, SAMPLE_BAD_SCRATCH += w *
    bad(scratch), SAMPLE_BAD_O += w * bad(o) (bad = holds a non-finite value); REL_L2_MAX and MAX_ABS =
    max(old, value * w); HIST[bucket(rel_l2)] += w, bucket k holding [REL_L2_BIN_EDGES[k-1],
    REL_L2_BIN_EDGES[k]), the last >= 1.0. In custom mode the served output itself is checked, so a NaN after
    promote is counted. The scratch is garbage unless w = 1: nothing it holds reaches the counters otherwise.
    """
    flags = enable.to(torch.float64)  # [serve, w]
    o32, scratch32 = o.float(), scratch.float()
    diff = scratch32 - o32
    bad = torch.stack([torch.logical_not(torch.isfinite(scratch32)).any(),
                       torch.logical_not(torch.isfinite(o32)).any()]).double()  # [bad(scratch), bad(o)]
    columns = torch.nn.functional.pad(bad, (0, 1), value=1.0)  # [bad(scratch), bad(o), 1]
    counters[CALLS].add_(1.0)
    # [serve, w] x [bad(scratch), bad(o), 1] without serve*bad(scratch) (no scratch in custom mode): the cells
    # SERVE_BAD_O, SERVED, SAMPLE_BAD_SCRATCH, SAMPLE_BAD_O, COMPARED, in this order.
    counters[SERVE_BAD_O : COMPARED + 1].add_((flags[:, None] * columns[None, :]).view(-1)[1:])
    norms = torch.stack([torch.linalg.vector_norm(diff), torch.linalg.vector_norm(o32).clamp_min(1e-30),
                         torch.linalg.vector_norm(diff, ord=float("inf"))]).double()
    values = torch.stack([norms[0] / norms[1], norms[2]])  # [rel_l2, max_abs]
    values = torch.where(bad.sum() > 0, torch.full_like(values, NONFINITE_SENTINEL),
                         torch.nan_to_num(values, nan=NONFINITE_SENTINEL, posinf=NONFINITE_SENTINEL))
    maxima = counters[REL_L2_MAX : MAX_ABS + 1]
    torch.maximum(maxima, values * flags[1:2], out=maxima)
    bucket = torch.bucketize(values[0:1], bin_edges, right=True)
    counters[HIST:].index_add_(0, bucket, flags[1:2])
