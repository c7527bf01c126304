"""Gated snapshots of verify calls: the truth anchor and the captures for calls replayed from CUDA graphs.

A replayed graph never reaches Python, so the evidence is taken on the device. Every verify call ends with one
more launch (``GraphSnapshots.launch``, captured with the rest of the call): it does nothing unless the staging
area's arm word names its layer and the call is a shadow sample; armed, it copies what a recomputation needs (q,
k/v_extend, the indptrs, the custom mask's draft tails, the KV rows the call reads in kv_indices order, both
outputs) of the leading requests that fit the staging area, sets the header's COMPLETED word to the arm token and
disarms (kernel_ext/csrc/snapshot.cuh; the header layout is CutoverSnapshotWord in cutover_verify.h).

The control thread (``tick``, about every 200 ms) arms one layer at a time, rotating over the layers seen, at
most once per ``interval_s``; it reads the header on a side stream until COMPLETED holds its token, copies the
used part of the staging area out, reads the header again, and hands the snapshot, as a capture
(cutover/plugin/captures.py format, ``source`` "graph" or "eager"), to the audit thread, which computes the
float64 truth anchor off the hot path and keeps the worst captures. A snapshot is taken only when COMPLETED and
WRITING hold the token before the copy and WRITING still does after it: one that a later arming overwrote while
it was read (torn) is dropped and counted.

Without CUDA the same launch runs ``torch_snapshot`` (the specification of the kernel, in torch) on a staging
area in host memory. There is no graph on the CPU: the sandbox marks the steps that stand in for graph replays
with ``graph_replay_standin`` (the dispatcher then skips the eager audit, as a replay would), and the snapshots
of those steps say "graph" like the GPU's.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import struct
import time
from dataclasses import dataclass

import torch

from cutover.plugin.captures import CAPTURE_FORMAT
from kernel_ext import _lib

log = logging.getLogger("cutover.plugin")

HEADER_WORDS = _lib.SNAPSHOT_HEADER_WORDS
HEADER_BYTES = HEADER_WORDS * 8
DEFAULT_CAPACITY_BYTES = 64 << 20  # data bytes of the staging area (the eager audit's bound too)
TOKEN_SEQUENCE_SHIFT = 20  # arm token = (sequence << 20) | (layer + 1)
ARM_TIMEOUT_S = 5.0  # an armed layer that makes no shadow sample in this long is disarmed; the next is armed
QK_DIM, V_DIM = 576, 512

_replay_standin: contextvars.ContextVar[bool] = contextvars.ContextVar("cutover_replay_standin", default=False)


@contextlib.contextmanager
def graph_replay_standin():
    """Mark the verify calls made inside as standing in for a CUDA-graph replay (the CPU sandbox)."""
    token = _replay_standin.set(True)
    try:
        yield
    finally:
        _replay_standin.reset(token)


def replayed_from_graph(tensor: torch.Tensor) -> bool:
    """True while a CUDA graph captures this call, or while a CPU step stands in for a replay."""
    if tensor.is_cuda:
        return torch.cuda.is_current_stream_capturing()
    return _replay_standin.get()


def _double_bits(value: float) -> int:
    return struct.unpack("<q", struct.pack("<d", float(value)))[0]


def _bits_double(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", int(bits)))[0]


def _round16(nbytes: int) -> int:
    return (nbytes + 15) & ~15


@dataclass
class Site:
    """What a layer's calls carry that the device does not record: index and mask dtypes, keyword arguments."""

    index_dtypes: tuple  # qo_indptr, kv_indptr, kv_indices, mask_indptr (None without a mask)
    mask_dtype: torch.dtype | None
    kwargs: dict
    stock_name: str


def torch_snapshot(staging: torch.Tensor, args: tuple, o: torch.Tensor, scratch: torch.Tensor,
                   enable: torch.Tensor, gate_state: torch.Tensor, layer: int, from_graph: bool) -> None:
    """The snapshot launch in torch (no CUDA): same header protocol, same layout as kernel_ext's kernel."""
    header = staging[:HEADER_BYTES].view(torch.int64)
    token = int(header[_lib.SNAP_ARM])
    if token & ((1 << TOKEN_SEQUENCE_SHIFT) - 1) != layer + 1 or not int(enable[1]):
        return
    q, k_extend, v_extend, _o, k_buffer, _v, qo_indptr, kv_indptr, kv_indices, mask, is_causal, mask_indptr, \
        max_len = args[:13]
    scales = [a.item() if isinstance(a, torch.Tensor) else a for a in (args + (1.0, 1.0, None))[13:16]]
    header[_lib.SNAP_WRITING] = token
    data = staging[HEADER_BYTES:]
    qo, kv = qo_indptr.long(), kv_indptr.long()
    batch, heads = qo.numel() - 1, q.shape[1]
    t, p = (qo[1:] - qo[:-1]).tolist(), (kv[1:] - kv[:-1]).tolist()
    indptr_bytes = _round16((batch + 1) * 8)
    budget = data.numel() - 2 * indptr_bytes - 8 * 16
    per_token = heads * QK_DIM * 2 + QK_DIM * 2 + V_DIM * 2 + 2 * heads * V_DIM * 2
    kept, used = 0, 0
    while kept < batch:
        need = t[kept] * per_token + p[kept] * QK_DIM * 2 + (t[kept] ** 2 if mask is not None else 0)
        if used + need > budget:
            break
        used, kept = used + need, kept + 1
    q0, kv0 = int(qo[0]), int(kv[0])
    tokens, rows = int(qo[kept]) - q0, int(kv[kept]) - kv0
    tails = []
    if mask is not None:
        starts = mask_indptr.long().tolist()
        for r in range(kept):
            block = mask[starts[r]: starts[r] + t[r] * (p[r] + t[r])].view(t[r], p[r] + t[r])
            tails.append(block[:, p[r]:].reshape(-1).to(torch.uint8))
    mask_bytes = sum(x * x for x in t[:kept]) if mask is not None else 0
    sections = [
        (qo[: kept + 1] - q0, indptr_bytes),
        (kv[: kept + 1] - kv0, indptr_bytes),
        (torch.cat(tails) if tails else torch.zeros(0, dtype=torch.uint8), _round16(mask_bytes)),
        (q[q0: q0 + tokens], None), (k_extend[q0: q0 + tokens].reshape(tokens, QK_DIM), None),
        (v_extend[q0: q0 + tokens].reshape(tokens, V_DIM), None), (o[q0: q0 + tokens], None),
        (scratch[q0: q0 + tokens], None), (k_buffer[kv_indices[kv0: kv0 + rows].long()].reshape(rows, QK_DIM), None),
    ]
    offsets, at = [], 0
    for tensor, room in sections:
        raw = tensor.contiguous().view(-1).view(torch.uint8)
        data[at: at + raw.numel()].copy_(raw)
        offsets.append(at)
        at += room if room is not None else raw.numel()
    words = {
        _lib.SNAP_FORMAT: _lib.SNAPSHOT_FORMAT, _lib.SNAP_LAYER: layer, _lib.SNAP_CALL: int(gate_state[2]),
        _lib.SNAP_FROM_GRAPH: int(bool(from_graph)), _lib.SNAP_BATCH: batch, _lib.SNAP_KEPT: kept,
        _lib.SNAP_TOKENS: tokens, _lib.SNAP_TOKENS_TOTAL: int(qo[batch]) - q0, _lib.SNAP_ROWS: rows,
        _lib.SNAP_ROWS_TOTAL: int(kv[batch]) - kv0, _lib.SNAP_MASK_BYTES: mask_bytes if mask is not None else -1,
        _lib.SNAP_HEADS: heads, _lib.SNAP_MAX_EXTEND: int(max_len), _lib.SNAP_IS_CAUSAL: int(bool(is_causal)),
        _lib.SNAP_SM_SCALE: _double_bits(scales[2] or 1.0 / math.sqrt(QK_DIM)),
        _lib.SNAP_K_SCALE: _double_bits(scales[0]), _lib.SNAP_V_SCALE: _double_bits(scales[1]), _lib.SNAP_END: at,
    }
    words.update({_lib.SNAP_OFF_QO_INDPTR + i: offset for i, offset in enumerate(offsets)})
    for index, value in words.items():
        header[index] = value
    header[_lib.SNAP_COMPLETED] = token
    if int(header[_lib.SNAP_ARM]) == token:
        header[_lib.SNAP_ARM] = 0


def snapshot_capture(header: list[int], data: torch.Tensor, site: Site) -> dict:
    """A capture (cutover/plugin/captures.py format) from a completed snapshot's header words and data bytes."""
    kept, tokens, rows, heads = (header[i] for i in (_lib.SNAP_KEPT, _lib.SNAP_TOKENS, _lib.SNAP_ROWS,
                                                      _lib.SNAP_HEADS))

    def section(word: int, count: int, dtype: torch.dtype, shape: tuple) -> torch.Tensor:
        start = header[word]
        nbytes = count * torch.empty(0, dtype=dtype).element_size()
        return data[start: start + nbytes].view(dtype).reshape(shape).clone()

    qo = section(_lib.SNAP_OFF_QO_INDPTR, kept + 1, torch.int64, (kept + 1,))
    kv = section(_lib.SNAP_OFF_KV_INDPTR, kept + 1, torch.int64, (kept + 1,))
    qo_dtype, kv_dtype, idx_dtype, mi_dtype = site.index_dtypes
    custom_mask = mask_indptr = None
    if header[_lib.SNAP_MASK_BYTES] >= 0:
        tails = section(_lib.SNAP_OFF_MASK, header[_lib.SNAP_MASK_BYTES], torch.uint8, (-1,))
        blocks, starts, at = [], [0], 0
        for r in range(kept):
            t, p = int(qo[r + 1] - qo[r]), int(kv[r + 1] - kv[r])
            block = torch.ones(t, p + t, dtype=torch.uint8)  # prefix columns: never read (skip_prefix_custom_mask)
            block[:, p:] = tails[at: at + t * t].view(t, t)
            at += t * t
            blocks.append(block.reshape(-1))
            starts.append(starts[-1] + t * (p + t))
        flat = torch.cat(blocks) if blocks else torch.zeros(0, dtype=torch.uint8)
        custom_mask = flat.to(site.mask_dtype or torch.uint8)
        mask_indptr = torch.tensor(starts, dtype=mi_dtype or torch.int64)
    args = {
        "q_extend": section(_lib.SNAP_OFF_Q, tokens * heads * QK_DIM, torch.bfloat16, (tokens, heads, QK_DIM)),
        "k_extend": section(_lib.SNAP_OFF_K_EXTEND, tokens * QK_DIM, torch.bfloat16, (tokens, 1, QK_DIM)),
        "v_extend": section(_lib.SNAP_OFF_V_EXTEND, tokens * V_DIM, torch.bfloat16, (tokens, 1, V_DIM)),
        "k_buffer": section(_lib.SNAP_OFF_KV, rows * QK_DIM, torch.bfloat16, (rows, 1, QK_DIM)),
        "v_buffer_is_k_view": True,
        "qo_indptr": qo.to(qo_dtype), "kv_indptr": kv.to(kv_dtype), "kv_indices": torch.arange(rows, dtype=idx_dtype),
        "custom_mask": custom_mask, "is_causal": bool(header[_lib.SNAP_IS_CAUSAL]), "mask_indptr": mask_indptr,
        "max_len_extend": header[_lib.SNAP_MAX_EXTEND], "k_scale": _bits_double(header[_lib.SNAP_K_SCALE]),
        "v_scale": _bits_double(header[_lib.SNAP_V_SCALE]), "sm_scale": _bits_double(header[_lib.SNAP_SM_SCALE]),
    }
    return {
        "format": CAPTURE_FORMAT, "args": args, "kwargs": dict(site.kwargs), "stock_kernel": site.stock_name,
        "o_stock": section(_lib.SNAP_OFF_O, tokens * heads * V_DIM, torch.bfloat16, (tokens, heads, V_DIM)),
        "o_custom": section(_lib.SNAP_OFF_O_ALT, tokens * heads * V_DIM, torch.bfloat16, (tokens, heads, V_DIM)),
        "layer": header[_lib.SNAP_LAYER], "call": header[_lib.SNAP_CALL],
        "source": "graph" if header[_lib.SNAP_FROM_GRAPH] else "eager",
        "requests": {"kept": kept, "total": header[_lib.SNAP_BATCH],
                     "tokens_total": header[_lib.SNAP_TOKENS_TOTAL], "rows_total": header[_lib.SNAP_ROWS_TOTAL]},
    }


class Staging:
    """The preallocated staging area of one rank (device memory, or host memory without CUDA) and its reader.

    Only the control thread arms and reads; on CUDA through its own side stream, synchronising only that."""

    TORN = "torn"

    def __init__(self, device: torch.device, capacity_bytes: int = DEFAULT_CAPACITY_BYTES):
        self.device = torch.device(device)
        self.buffer = torch.zeros(HEADER_BYTES + capacity_bytes, dtype=torch.uint8, device=self.device)
        self.header = self.buffer[:HEADER_BYTES].view(torch.int64)
        is_cuda = self.device.type == "cuda"
        self._side = torch.cuda.Stream(device=self.device) if is_cuda else None
        self._word = torch.zeros(1, dtype=torch.int64, pin_memory=is_cuda)
        self._header_host = torch.zeros(HEADER_WORDS, dtype=torch.int64, pin_memory=is_cuda)
        self._sequence = 0

    @property
    def capacity_bytes(self) -> int:
        return self.buffer.numel() - HEADER_BYTES

    def _on_side(self, copy) -> None:
        if self._side is None:
            copy()
            return
        with torch.cuda.stream(self._side):
            copy()
        self._side.synchronize()

    def write_arm(self, token: int) -> None:
        self._word[0] = token
        self._on_side(lambda: self.header[_lib.SNAP_ARM: _lib.SNAP_ARM + 1].copy_(self._word, non_blocking=True))

    def arm(self, layer: int) -> int:
        """Arm the next shadow sample of ``layer``; returns the token its snapshot will carry."""
        self._sequence += 1
        token = (self._sequence << TOKEN_SEQUENCE_SHIFT) | (layer + 1)
        self.write_arm(token)
        return token

    def read_header(self) -> list[int]:
        self._on_side(lambda: self._header_host.copy_(self.header, non_blocking=True))
        return self._header_host.tolist()

    def take(self, token: int):
        """(header words, data bytes on the host) of the snapshot ``token``; None while it is not complete;
        ``Staging.TORN`` when the staging area was rewritten while it was read."""
        first = self.read_header()
        if first[_lib.SNAP_COMPLETED] != token:
            return None
        if first[_lib.SNAP_WRITING] != token:
            return self.TORN
        end = first[_lib.SNAP_END]
        data = torch.empty(end, dtype=torch.uint8, pin_memory=self._side is not None)
        self._on_side(lambda: data.copy_(self.buffer[HEADER_BYTES: HEADER_BYTES + end], non_blocking=True))
        after = self.read_header()
        if after[_lib.SNAP_WRITING] != token or after[_lib.SNAP_COMPLETED] != token:
            return self.TORN
        return first, data


class GraphSnapshots:
    """One rank's gated snapshots: the launch in every verify call (hot path) and the arming (control thread)."""

    def __init__(self, device: torch.device, audit, interval_s: float = 1.0,
                 capacity_bytes: int = DEFAULT_CAPACITY_BYTES, timeout_s: float = ARM_TIMEOUT_S):
        self.device = torch.device(device)
        self.audit = audit
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.staging = Staging(self.device, capacity_bytes)
        self.sites: dict[int, Site] = {}
        self.disabled = ""  # why snapshots are off in this process ("" while on)
        self._launch = self._kernel_launch() if self.device.type == "cuda" else None
        self._pending: tuple[int, int, float] | None = None  # (token, layer, armed at)
        self._next_arm_at = 0.0
        self._rotation = 0
        self.counts = {"armed": 0, "taken": 0, "torn": 0, "timeouts": 0, "too_large": 0, "partial": 0}

    def _kernel_launch(self):
        from kernel_ext import api

        if not _lib.load_library().has_snapshot:
            self.disabled = "the kernel library has no cutover_verify_snapshot (built before it): rebuild the release"
            log.warning("cutover: graph truth-anchor snapshots are off: %s", self.disabled)
        return api.verify_snapshot

    # -- hot path: called at capture time (once per captured call) or on an eager call ------------------------
    def launch(self, layer: int, slots, args: tuple, kwargs: dict, o, scratch, stock_name: str) -> None:
        """Enqueue the gated snapshot of this verify call (after the shadow epilogue)."""
        if self.disabled:
            return
        if layer not in self.sites:
            dtypes = (args[6].dtype, args[7].dtype, args[8].dtype, args[11].dtype if args[9] is not None else None)
            self.sites[layer] = Site(dtypes, args[9].dtype if args[9] is not None else None,
                                     {k: v for k, v in kwargs.items() if not isinstance(v, torch.Tensor)}, stock_name)
        from_graph = replayed_from_graph(o)
        if self._launch is None:
            torch_snapshot(self.staging.buffer, args, o, scratch, slots.enable, slots.gate, layer, from_graph)
            return
        if not self._launch(*args, o_alt=scratch, enable=slots.enable, gate_state=slots.gate,
                            staging=self.staging.buffer, layer=layer, from_graph=from_graph, **kwargs):
            raise RuntimeError("the snapshot launch refused a call the custom kernel served")

    # -- control thread ----------------------------------------------------------------------------------------
    def tick(self, shadow: bool, now: float | None = None) -> None:
        """Arm, poll, take: at most one layer armed at a time, at most one snapshot per ``interval_s``."""
        now = time.monotonic() if now is None else now
        if self.disabled:
            return
        if self._pending is None:
            if shadow and self.sites and now >= self._next_arm_at:
                layers = sorted(self.sites)
                layer = layers[self._rotation % len(layers)]
                self._rotation += 1
                self._pending = (self.staging.arm(layer), layer, now)
                self.counts["armed"] += 1
            return
        token, layer, armed_at = self._pending
        taken = self.staging.take(token)
        if taken is None:
            if not shadow or now - armed_at > self.timeout_s:
                self.staging.write_arm(0)
                self._pending = None
                self.counts["timeouts"] += int(shadow)
            return
        self._pending = None
        self._next_arm_at = now + self.interval_s
        if taken is Staging.TORN:
            self.counts["torn"] += 1
            log.warning("cutover: the layer %s snapshot was overwritten while it was read; dropped", layer)
            return
        header, data = taken
        if header[_lib.SNAP_KEPT] == 0:
            self.counts["too_large"] += 1
            return
        self.counts["taken"] += 1
        self.counts["partial"] += int(header[_lib.SNAP_KEPT] < header[_lib.SNAP_BATCH])
        self.audit.submit(snapshot_capture(header, data, self.sites[layer]))
