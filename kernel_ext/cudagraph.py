"""CUDA-graph capture after warm-up, shared by the benchmarks, the plugin's GPU test and the sandbox rank."""

from __future__ import annotations

import torch


def capture_graph(fn, calls: int = 1, warmups: int = 2) -> torch.cuda.CUDAGraph:
    """Run `fn` `warmups` times on a side stream (JIT, kernel attributes and lazy buffers stay out of the
    graph), then capture `calls` back-to-back calls of it into one CUDA graph (not replayed)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph
