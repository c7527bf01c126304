"""Benchmark: what the plugin costs per verify call under CUDA-graph replay, against the bare kernels.

    python -m cutover.plugin.bench_overhead [--out DIR] [--reps N] [--shapes "H,T,BATCH,PREFIX ..."]

For each shape, five graphs are captured, each holding back-to-back calls of one layer: bare SGLang Triton
kernel, bare CUDA kernel, and the plugin's dispatch in triton (idle), shadow (sample every call) and custom mode.
The calls cycle through scattered KV index sets as ``kernel_ext.bench``'s do (``rotation_sets``: each cycle touches
max(512 MB, 4 x L2) of KV rows), so the L2 cache does not serve a small shape's repeated calls; a graph holds one
cycle, and at least ``CALLS_PER_GRAPH`` calls. Reported per call: median replay time / calls, and the overheads
idle - stock, custom - bare custom, shadow - (stock + bare custom). The gated truth-anchor snapshot
(cutover/plugin/snapshot.py) is measured apart: the plugin's graph is captured a second time without the snapshot
launch, and each mode's time with it minus without it is the unarmed snapshot's cost per call and layer; the armed
cost is a shadow replay with layer 0 armed (its first call snapshots) minus an unarmed one, per snapshot. Writes
``plugin_overhead.json`` and ``plugin_overhead.md`` under --out and prints the table. GPU only.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import tempfile

import torch

from kernel_ext import _lib
from kernel_ext.bench import parse_shapes, rotating, rotation_sets
from kernel_ext.reference import MLA_QK_DIM

CALLS_PER_GRAPH = 10  # the fewest calls a graph holds (more where the rotation has more index sets)
SHAPES = [  # (heads, draft tokens T, batch, prefix)
    (8, 8, 1, 4096),
    (8, 16, 8, 8192),
    (8, 64, 32, 8192),
    (16, 64, 32, 16384),
]


class RotatedBatch:
    """A verify batch in SGLang's graph-replay layout whose calls cycle through ``sets`` KV index sets, scattered
    over one pool of random rows (``args(i)``: the arguments of call i's set)."""

    def __init__(self, heads: int, t: int, batch_size: int, prefix: int):
        from kernel_ext.testing import make_verify_batch

        l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
        self.sets = rotation_sets(batch_size * prefix * MLA_QK_DIM * 2, l2_bytes)
        batch = make_verify_batch(heads, t, batch_size, prefix, device="cuda", seed=1, nan_unused_rows=False,
                                  qo_indptr_dtype=torch.int64, mask_dtype=torch.uint8,
                                  pool_factor=max(2.0, float(self.sets)))
        batch.k_buffer.normal_()  # every pool row random, as a serving pool's
        pool, total = batch.k_buffer.shape[0], batch.kv_indices.numel()
        gen = torch.Generator(device="cuda").manual_seed(2)
        index_sets = [batch.kv_indices] + [
            torch.randperm(pool, generator=gen, device="cuda")[:total].to(batch.kv_indices.dtype)
            for _ in range(self.sets - 1)]
        self._args = [dataclasses.replace(batch, kv_indices=indices).args() for indices in index_sets]

    def args(self, i: int) -> tuple:
        return self._args[i]


def _time_us(graph, reps: int, calls: int) -> float:
    from kernel_ext.cudagraph import replay_ms

    for _ in range(3):
        graph.replay()
    return replay_ms(graph, reps, calls) * 1000.0


def _armed_graph_us(graph, runtime, reps: int) -> float:
    """Median microseconds of one replay of `graph` with layer 0 armed before it (the arming itself not timed)."""
    import statistics

    from kernel_ext.cudagraph import BUSY_CYCLES

    times = []
    for _ in range(reps):
        runtime.snapshots.staging.arm(0)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(BUSY_CYCLES)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    runtime.snapshots.staging.write_arm(0)
    return statistics.median(times) * 1000.0


def bench_shape(shape, reps: int, runtime, paths, stock, generations) -> dict:
    import kernel_ext
    from cutover.plugin.dispatch import verify_site
    from cutover.plugin.graphs import switch_mode
    from kernel_ext.cudagraph import capture_graph

    heads, t, batch_size, prefix = shape
    batch = RotatedBatch(heads, t, batch_size, prefix)
    calls = max(CALLS_PER_GRAPH, batch.sets)
    workspace = torch.empty(kernel_ext.workspace_bytes(batch_size, heads, t), dtype=torch.uint8, device="cuda")
    dispatcher = runtime.wrap(stock)

    def plugin_call(*args):
        with verify_site(0):
            dispatcher(*args)

    def timed(call) -> float:
        return _time_us(capture_graph(rotating(batch, call), calls), reps, calls)

    row = {"heads": heads, "T": t, "batch": batch_size, "prefix": prefix, "sets": batch.sets, "calls": calls}
    row["stock_us"] = timed(stock)
    row["custom_bare_us"] = timed(lambda *args: kernel_ext.verify_attention(*args, workspace=workspace))
    switch_mode(runtime, paths, "triton", next(generations))
    runtime.snapshots.disabled = "captured without the snapshot launch (the benchmark's baseline)"
    graph_without = capture_graph(rotating(batch, plugin_call), calls)
    runtime.snapshots.disabled = ""
    graph = capture_graph(rotating(batch, plugin_call), calls)  # one capture serves every mode
    for mode in ("triton", "shadow", "custom"):
        switch_mode(runtime, paths, mode, next(generations))
        row[f"plugin_{mode}_us"] = _time_us(graph, reps, calls)
        row[f"plugin_{mode}_without_snapshot_us"] = _time_us(graph_without, reps, calls)
        row[f"snapshot_unarmed_{mode}_us"] = row[f"plugin_{mode}_us"] - row[f"plugin_{mode}_without_snapshot_us"]
        if mode == "shadow":
            row["snapshot_armed_us"] = _armed_graph_us(graph, runtime, reps) - row["plugin_shadow_us"] * calls
            row["snapshot_requests_kept"] = runtime.snapshots.staging.read_header()[_lib.SNAP_KEPT]
    row["idle_overhead_us"] = row["plugin_triton_us"] - row["stock_us"]
    row["custom_overhead_us"] = row["plugin_custom_us"] - row["custom_bare_us"]
    row["shadow_overhead_us"] = row["plugin_shadow_us"] - row["stock_us"] - row["custom_bare_us"]
    row["custom_speedup_vs_stock"] = row["stock_us"] / row["plugin_custom_us"]
    return row


def snapshot_markdown(rows: list[dict]) -> str:
    """The gated snapshot's cost per call and layer (unarmed, each mode) and per armed snapshot."""
    return _markdown_table(
        "Gated truth-anchor snapshot: unarmed cost per call and layer (with - without the launch), armed cost "
        "per snapshot (armed replay - unarmed replay)",
        ["H", "T", "batch", "prefix", "unarmed triton us", "unarmed shadow us", "unarmed custom us", "armed us",
         "requests kept"],
        [[r["heads"], r["T"], r["batch"], r["prefix"], f"{r['snapshot_unarmed_triton_us']:+.2f}",
          f"{r['snapshot_unarmed_shadow_us']:+.2f}", f"{r['snapshot_unarmed_custom_us']:+.2f}",
          f"{r['snapshot_armed_us']:.1f}", f"{r['snapshot_requests_kept']} of {r['batch']}"] for r in rows])


def markdown(rows: list[dict], device_name: str, dispatch: str) -> str:
    return _markdown_table(
        f"Plugin overhead per verify call, CUDA-graph replay, {device_name} "
        f"(calls per graph: one cycle of the KV index sets, at least {CALLS_PER_GRAPH}; dispatch: {dispatch})",
        ["H", "T", "batch", "prefix", "index sets", "stock us", "custom bare us", "plugin triton us",
         "plugin shadow us", "plugin custom us", "idle overhead us", "custom overhead us", "shadow overhead us",
         "custom speedup"],
        [[r["heads"], r["T"], r["batch"], r["prefix"], r["sets"], f"{r['stock_us']:.1f}", f"{r['custom_bare_us']:.1f}",
          f"{r['plugin_triton_us']:.1f}", f"{r['plugin_shadow_us']:.1f}", f"{r['plugin_custom_us']:.1f}",
          f"{r['idle_overhead_us']:+.1f}", f"{r['custom_overhead_us']:+.1f}", f"{r['shadow_overhead_us']:+.1f}",
          f"{r['custom_speedup_vs_stock']:.1f}x"] for r in rows])


def _markdown_table(title: str, columns: list[str], rows: list[list]) -> str:
    """`title`, a blank line, then a Markdown table of `columns` and `rows`."""
    lines = [title, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="reports/plugin_overhead", help="directory for the JSON and Markdown")
    parser.add_argument("--reps", type=int, default=20, help="timed replays per graph")
    parser.add_argument("--shapes", help="H,T,BATCH,PREFIX entries separated by spaces (default: the four above)")
    args = parser.parse_args(argv)
    try:
        shapes = parse_shapes(args.shapes) if args.shapes is not None else SHAPES
    except ValueError as exc:
        parser.error(str(exc))
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (run it through the device tool)")
    import kernel_ext
    from cutover.hostprotocol.hostlayout import HostPaths
    from cutover.plugin.hooks import resolve_stock_kernel
    from cutover.plugin.kernels import CudaKernels
    from cutover.plugin.graphs import stage_library
    from cutover.plugin.runtime import PluginRuntime
    from kernel_ext._lib import default_library_path

    state = tempfile.mkdtemp(prefix="cutover-bench-")
    paths = HostPaths(cutover_root=os.path.join(state, "root"), state_dir=os.path.join(state, "state"))
    stage_library(paths, str(default_library_path()))
    runtime = PluginRuntime(paths, 0, torch.device("cuda", torch.cuda.current_device()))
    if not isinstance(runtime.kernels, CudaKernels):
        parser.error(f"the CUDA kernel is not available: {runtime.unavailable}")
    stock, stock_module = resolve_stock_kernel()
    generations = itertools.count(1)
    rows = [bench_shape(shape, args.reps, runtime, paths, stock, generations) for shape in shapes]
    runtime.control.stop(clean=True)
    device_name = torch.cuda.get_device_name()
    dispatch = ("gate (early start after the kernel before it) + one custom launch (output chosen on the device; "
                "early start after the gate) + stock + fused epilogue (kernel_ext.shadow_accumulate; early start "
                "after stock) + gated snapshot (kernel_ext.verify_snapshot; early start after the epilogue)")
    os.makedirs(args.out, exist_ok=True)
    document = {"device": device_name, "torch": torch.__version__, "stock_module": stock_module,
                "min_calls_per_graph": CALLS_PER_GRAPH, "reps": args.reps, "abi_version": kernel_ext.ABI_VERSION,
                "dispatch": dispatch, "rows": rows}
    with open(os.path.join(args.out, "plugin_overhead.json"), "w") as handle:
        json.dump(document, handle, indent=2)
    table = markdown(rows, device_name, dispatch) + "\n" + snapshot_markdown(rows)
    with open(os.path.join(args.out, "plugin_overhead.md"), "w") as handle:
        handle.write(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
