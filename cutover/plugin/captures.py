"""Self-contained snapshots of verify calls, and the bounded store of the worst divergent ones.

A snapshot holds the SGLang arguments of one call with the KV pool reduced to the rows the call reads
(``kv_indices`` remapped to 0..sum(P)-1), both outputs, and enough metadata to rerun it anywhere:

    {"format": "cutover-capture/1", "rank", "layer", "ts", "kernel" (custom path label), "stock_kernel"
     (the stock callable's qualified name), "rel_l2" (custom vs stock), "truth", "release_id",
     "args": {q_extend, k_extend, v_extend, k_buffer, v_buffer_is_k_view, v_buffer (when not a view),
              qo_indptr, kv_indptr, kv_indices, custom_mask, is_causal, mask_indptr, max_len_extend,
              k_scale, v_scale, sm_scale},
     "kwargs": {scalar keyword arguments of the call},
     "o_stock", "o_custom"}

File name: ``rank-<r>-layer-<l>-<unix ms>.pt`` (torch.save; load with ``weights_only=True``).
"""

from __future__ import annotations

import glob
import os
import time

import torch

CAPTURE_FORMAT = "cutover-capture/1"
ARG_NAMES = ("q_extend", "k_extend", "v_extend", "o_extend", "k_buffer", "v_buffer", "qo_indptr", "kv_indptr",
             "kv_indices", "custom_mask", "is_causal", "mask_indptr", "max_len_extend", "k_scale", "v_scale",
             "sm_scale")


def _host(value):
    return value.detach().to("cpu", copy=True) if isinstance(value, torch.Tensor) else value


def _scalar(value):
    if isinstance(value, torch.Tensor):
        return float(value.item()) if value.numel() == 1 else None
    return value


def snapshot_bytes(args: tuple) -> int:
    """Bytes a snapshot of these SGLang arguments would take (prefix rows counted, not the whole pool)."""
    q, k_extend, v_extend, o, k_buffer, _v_buffer, _qo, kv_indptr, _kv_indices = args[:9]
    rows = int(kv_indptr[-1]) * k_buffer[0].numel() * k_buffer.element_size()
    outputs = 2 * o.numel() * o.element_size()
    return rows + outputs + sum(t.numel() * t.element_size() for t in (q, k_extend, v_extend))


def snapshot_call(args: tuple, kwargs: dict, o_stock: torch.Tensor, o_custom: torch.Tensor) -> dict:
    """A compact CPU copy of one call (see the module docstring); call it off any captured region."""
    named = dict(zip(ARG_NAMES, args))
    k_buffer, v_buffer, kv_indices = named["k_buffer"], named["v_buffer"], named["kv_indices"]
    v_is_view = (v_buffer.data_ptr() == k_buffer.data_ptr() and v_buffer.stride() == k_buffer.stride())
    rows = kv_indices[: int(named["kv_indptr"][-1])].long()  # graph buffers are longer than the batch
    snap_args = {name: _host(value) for name, value in named.items() if name not in ("o_extend", "k_buffer",
                                                                                     "v_buffer", "kv_indices")}
    snap_args["k_buffer"] = _host(k_buffer[rows])
    snap_args["v_buffer_is_k_view"] = bool(v_is_view)
    if not v_is_view:
        snap_args["v_buffer"] = _host(v_buffer[rows])
    snap_args["kv_indices"] = torch.arange(rows.numel(), dtype=kv_indices.dtype)
    for name in ("max_len_extend", "k_scale", "v_scale", "sm_scale"):
        snap_args[name] = _scalar(snap_args.get(name))
    return {
        "format": CAPTURE_FORMAT,
        "args": snap_args,
        "kwargs": {k: _scalar(v) for k, v in kwargs.items() if not isinstance(v, torch.Tensor) or v.numel() == 1},
        "o_stock": _host(o_stock),
        "o_custom": _host(o_custom),
    }


def capture_args(capture: dict, o_extend: torch.Tensor, device="cpu") -> tuple:
    """SGLang's positional arguments rebuilt from a capture, with ``o_extend`` as the output."""
    a = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in capture["args"].items()}
    v_buffer = a["k_buffer"][..., : a["v_extend"].shape[-1]] if a["v_buffer_is_k_view"] else a["v_buffer"]
    return (a["q_extend"], a["k_extend"], a["v_extend"], o_extend, a["k_buffer"], v_buffer, a["qo_indptr"],
            a["kv_indptr"], a["kv_indices"], a["custom_mask"], a["is_causal"], a["mask_indptr"],
            a["max_len_extend"], a["k_scale"], a["v_scale"], a["sm_scale"])


def relative_l2(candidate: torch.Tensor, truth: torch.Tensor) -> float:
    """||candidate - truth|| / ||truth|| in float64 (inf when candidate holds a non-finite value)."""
    c, t = candidate.double(), truth.double()
    if not torch.isfinite(c).all():
        return float("inf")
    return float(torch.linalg.vector_norm(c - t) / torch.linalg.vector_norm(t).clamp_min(1e-300))


def load_capture(path: str) -> dict:
    """Read a capture file; ValueError naming the file when it is not one."""
    try:
        capture = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise ValueError(f"{path}: not a readable cutover capture ({type(exc).__name__}: {exc})") from exc
    if not isinstance(capture, dict) or capture.get("format") != CAPTURE_FORMAT:
        raise ValueError(f"{path}: not a cutover capture (expected format {CAPTURE_FORMAT!r})")
    return capture


class CaptureStore:
    """Keeps the ``max_count`` worst (highest rel_l2) captures of one rank in ``directory``."""

    def __init__(self, directory: str, rank: int, max_count: int = 8):
        self.directory = directory
        self.rank = rank
        self.max_count = max_count
        self._kept: list[tuple[float, str]] = []  # (rel_l2, path), this process's captures
        self.saved = 0

    def worth_keeping(self, rel_l2: float) -> bool:
        return len(self._kept) < self.max_count or rel_l2 > min(r for r, _ in self._kept)

    def save(self, capture: dict) -> str | None:
        """Write ``capture`` if it is among the worst; evict the mildest beyond ``max_count``."""
        rel = capture["rel_l2"]
        if not self.worth_keeping(rel):
            return None
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, f"rank-{self.rank}-layer-{capture['layer']}-{int(time.time() * 1000)}.pt")
        tmp = path + ".tmp"
        torch.save(capture, tmp)
        os.replace(tmp, path)
        self._kept.append((rel, path))
        self.saved += 1
        self._kept.sort()
        while len(self._kept) > self.max_count:
            _, evicted = self._kept.pop(0)
            if os.path.exists(evicted):
                os.unlink(evicted)
        self._evict_stale()
        return path

    def _evict_stale(self) -> None:
        """Remove this rank's captures left by earlier processes beyond the bound (oldest first)."""
        mine = {p for _, p in self._kept}
        others = sorted((p for p in glob.glob(os.path.join(self.directory, f"rank-{self.rank}-*.pt"))
                         if p not in mine), key=os.path.getmtime)
        while others and len(others) + len(mine) > self.max_count:
            os.unlink(others.pop(0))
