"""Grow-only device buffers: the dispatcher's gated qo_indptr and shadow scratch, and the kernel's workspace.

A captured CUDA graph keeps the addresses it was captured with, so a buffer that a capture used must outlive
every graph: when a bigger call outgrows it, it is kept. A buffer that only eager calls used is freed when a
bigger one replaces it: SGLang runs the batches above --cuda-graph-max-bs eagerly, and keeping every outgrown
buffer of those grew device memory with each new largest batch.
"""

from __future__ import annotations

import torch


class GrowOnlyBuffers:
    """One current buffer per key, never smaller than the largest request so far."""

    def __init__(self):
        self._current: dict[tuple, torch.Tensor] = {}
        self._captured: set[tuple] = set()  # keys whose current buffer a graph capture used
        self._kept: list[torch.Tensor] = []  # outgrown buffers that captured graphs still point into

    def get(self, key: tuple, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A 1-D buffer of at least `count` elements for `key` (marked as used by a capture if one runs)."""
        buffer = self._current.get(key)
        if buffer is None or buffer.numel() < count:
            if buffer is not None and key in self._captured:
                self._kept.append(buffer)
            self._captured.discard(key)
            buffer = torch.empty(max(count, 1), dtype=dtype, device=device)
            self._current[key] = buffer
        if key not in self._captured and buffer.is_cuda and torch.cuda.is_current_stream_capturing():
            self._captured.add(key)  # once marked, later calls (graph replays run no Python) skip the query
        return buffer

    def like(self, kind: str, tensor: torch.Tensor) -> torch.Tensor:
        """A view shaped like `tensor` (same dtype and device) into the `kind` buffer."""
        count = tensor.numel()
        buffer = self.get((kind, tensor.dtype, tensor.device), count, tensor.dtype, tensor.device)
        return buffer[:count].view(tensor.shape)

    @property
    def held_bytes(self) -> int:
        """Device bytes held: the current buffers and the outgrown ones kept for captured graphs."""
        held = list(self._current.values()) + self._kept
        return sum(b.numel() * b.element_size() for b in held)
