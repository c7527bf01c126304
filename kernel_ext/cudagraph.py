"""CUDA-graph capture after warm-up, shared by the benchmarks, the plugin's GPU test and the sandbox rank; and the
benchmarks' timing of launches queued behind a spin kernel."""

from __future__ import annotations

import statistics

import torch

# GPU cycles (~100 us) of the spin kernel queued before each timed launch: the GPU reaches the start event only
# after the host has submitted the work, so the time excludes the host's share (a call inside the model's captured
# graph follows other kernels without it). Enough for a graph replay or a single kernel; an eager call of several
# Python-launched kernels can take the host longer, so such calls are timed as graph replays.
BUSY_CYCLES = 200_000


def time_queued(launch, reps: int) -> list[float]:
    """Milliseconds of `launch()` (work it enqueues on the current stream), `reps` times, each queued behind the
    spin kernel and timed by CUDA events around it."""
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(BUSY_CYCLES)
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def replay_ms(graph: torch.cuda.CUDAGraph, reps: int, calls: int = 1) -> float:
    """Median milliseconds of one of the `calls` calls a captured graph holds (time_queued of its replays)."""
    return statistics.median(time_queued(graph.replay, reps)) / calls


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
