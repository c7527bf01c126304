"""The switch and the shadow counters as data in device memory, so a captured CUDA graph obeys them.

Per layer (row ``l``), preallocated once for ``MAX_LAYERS`` layers:

* ``gate[l]``     int32[4]  {mode 0 triton / 1 shadow / 2 custom, sample_every, call_counter, reserved}
* ``enable[l]``   int32[2]  written by the gate on every call: [0] serve (our kernel writes ``o``),
                            [1] shadow sample (our kernel writes the scratch buffer, the epilogue compares)
* ``counters[l]`` float64[COUNTER_WIDTH], monotonic since the generation was applied (layout below)

Only the control thread changes ``gate[:, 0:2]``, with a copy on a side stream (CUDA) followed by a sync of
that side stream, never of the compute stream. The hot path only reads and bumps these tensors in place.
"""

from __future__ import annotations

import threading

import torch

from cutover.hostlayout import REL_L2_BIN_EDGES

MAX_LAYERS = 512
MODE_CODES = {"triton": 0, "shadow": 1, "custom": 2}

# counters row layout (float64: exact integer counts up to 2**53)
CALLS, COMPARED, REL_L2_MAX, MAX_ABS, NONFINITE_CUSTOM, NONFINITE_STOCK, HIST = 0, 1, 2, 3, 4, 5, 6
HIST_BINS = len(REL_L2_BIN_EDGES) + 1
COUNTER_WIDTH = HIST + HIST_BINS
# A comparison with a non-finite value records this (finite, JSON-safe) relative L2 / max abs, lands in the
# last histogram bucket, and is counted in the non-finite counters.
NONFINITE_SENTINEL = 1.0e30


class LayerSlots:
    """Views of one layer's rows (made once, so the hot path slices nothing)."""

    __slots__ = ("gate", "enable", "serve", "sample", "counters", "calls")

    def __init__(self, state: "DeviceState", layer: int):
        self.gate = state.gate[layer]
        self.enable = state.enable[layer]
        self.serve = self.enable[0:1]
        self.sample = self.enable[1:2]
        self.counters = state.counters[layer]
        self.calls = self.counters[CALLS : CALLS + 1]


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

    This is the specification a fused kernel must match. ``o`` holds stock's output (shadow) or ours (custom);
    ``scratch`` ours in a shadow sample. With w = sample: rel_l2 = ||scratch - o||_2 / ||o||_2 (float32
    inputs, float64 result), max_abs = max |scratch - o|; a non-finite value in either makes both
    NONFINITE_SENTINEL. Updates: CALLS += 1 (always), COMPARED += w, REL_L2_MAX and MAX_ABS = max(old,
    value * w), HIST[bucket(rel_l2)] += w (bucket k holds [REL_L2_BIN_EDGES[k-1], REL_L2_BIN_EDGES[k]), the
    last one >= 1.0), NONFINITE_STOCK += w * bad(o), NONFINITE_CUSTOM += w * bad(scratch) + serve * bad(o):
    in custom mode the served output itself is checked, so a NaN after promote is counted too.
    """
    serve = enable[0:1].to(torch.float64)
    weight = enable[1:2].to(torch.float64)
    custom = scratch.float()
    stock = o.float()
    bad_scratch = torch.logical_not(torch.isfinite(custom)).any().to(torch.float64)
    bad_o = torch.logical_not(torch.isfinite(stock)).any().to(torch.float64)
    diff = custom - stock
    rel = torch.linalg.vector_norm(diff).double() / torch.linalg.vector_norm(stock).double().clamp_min(1e-300)
    rel = torch.nan_to_num(rel, nan=NONFINITE_SENTINEL, posinf=NONFINITE_SENTINEL).clamp_max(NONFINITE_SENTINEL)
    max_abs = torch.nan_to_num(diff.abs().amax().double(), nan=NONFINITE_SENTINEL, posinf=NONFINITE_SENTINEL)
    any_bad = torch.clamp_max(bad_scratch + bad_o, 1.0)
    rel = torch.where(any_bad > 0, torch.full_like(rel, NONFINITE_SENTINEL), rel)
    max_abs = torch.where(any_bad > 0, torch.full_like(max_abs, NONFINITE_SENTINEL), max_abs)
    counters[CALLS].add_(1.0)
    counters[COMPARED : COMPARED + 1].add_(weight)
    torch.maximum(counters[REL_L2_MAX : REL_L2_MAX + 1], rel * weight, out=counters[REL_L2_MAX : REL_L2_MAX + 1])
    torch.maximum(counters[MAX_ABS : MAX_ABS + 1], max_abs * weight, out=counters[MAX_ABS : MAX_ABS + 1])
    counters[NONFINITE_CUSTOM : NONFINITE_CUSTOM + 1].add_(bad_scratch * weight + bad_o * serve)
    counters[NONFINITE_STOCK : NONFINITE_STOCK + 1].add_(bad_o * weight)
    bucket = torch.bucketize(rel.reshape(1), bin_edges, right=True)
    counters[HIST:].index_add_(0, bucket, weight)
