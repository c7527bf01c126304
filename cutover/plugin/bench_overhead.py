"""Benchmark: what the plugin costs per verify call under CUDA-graph replay, against the bare kernels.

    python -m cutover.plugin.bench_overhead [--out DIR] [--reps N] [--shapes "H,T,BATCH,PREFIX ..."]

For each shape, five graphs are captured, each holding ``CALLS_PER_GRAPH`` back-to-back calls of one layer:
bare SGLang Triton kernel, bare CUDA kernel, and the plugin's dispatch in triton (idle), shadow (sample every
call) and custom mode. Reported per call: median replay time / calls, and the overheads
idle - stock, custom - bare custom, shadow - (stock + bare custom). Writes ``plugin_overhead.json`` and
``plugin_overhead.md`` under --out and prints the table. GPU only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile

import torch

from kernel_ext.bench import parse_shapes

CALLS_PER_GRAPH = 10
SHAPES = [  # (heads, draft tokens T, batch, prefix)
    (8, 8, 1, 4096),
    (8, 16, 8, 8192),
    (8, 64, 32, 8192),
    (16, 64, 32, 16384),
]


def _time_us(graph, reps: int) -> float:
    from kernel_ext.cudagraph import replay_ms

    for _ in range(3):
        graph.replay()
    return replay_ms(graph, reps, CALLS_PER_GRAPH) * 1000.0


def bench_shape(shape, reps: int, runtime, paths, stock, generations) -> dict:
    import kernel_ext
    from cutover.plugin.dispatch import verify_site
    from cutover.plugin.graphs import switch_mode
    from kernel_ext.cudagraph import capture_graph
    from kernel_ext.testing import make_verify_batch

    heads, t, batch_size, prefix = shape
    batch = make_verify_batch(heads, t, batch_size, prefix, device="cuda", seed=1, nan_unused_rows=False,
                              qo_indptr_dtype=torch.int64, mask_dtype=torch.uint8)
    args = batch.args()
    workspace = torch.empty(kernel_ext.workspace_bytes(batch_size, heads, t), dtype=torch.uint8, device="cuda")
    dispatcher = runtime.wrap(stock)

    def plugin_call():
        with verify_site(0):
            dispatcher(*args)

    row = {"heads": heads, "T": t, "batch": batch_size, "prefix": prefix}
    row["stock_us"] = _time_us(capture_graph(lambda: stock(*args), CALLS_PER_GRAPH), reps)
    row["custom_bare_us"] = _time_us(capture_graph(lambda: kernel_ext.verify_attention(*args, workspace=workspace),
                                             CALLS_PER_GRAPH), reps)
    switch_mode(runtime, paths, "triton", next(generations))
    graph = capture_graph(plugin_call, CALLS_PER_GRAPH)  # one capture serves every mode
    for mode in ("triton", "shadow", "custom"):
        switch_mode(runtime, paths, mode, next(generations))
        row[f"plugin_{mode}_us"] = _time_us(graph, reps)
    row["idle_overhead_us"] = row["plugin_triton_us"] - row["stock_us"]
    row["custom_overhead_us"] = row["plugin_custom_us"] - row["custom_bare_us"]
    row["shadow_overhead_us"] = row["plugin_shadow_us"] - row["stock_us"] - row["custom_bare_us"]
    row["custom_speedup_vs_stock"] = row["stock_us"] / row["plugin_custom_us"]
    return row


def markdown(rows: list[dict], device_name: str, dispatch: str) -> str:
    head = ("| H | T | batch | prefix | stock us | custom bare us | plugin triton us | plugin shadow us | "
            "plugin custom us | idle overhead us | custom overhead us | shadow overhead us | custom speedup |")
    lines = [f"Plugin overhead per verify call, CUDA-graph replay, {device_name} "
             f"({CALLS_PER_GRAPH} calls per graph; dispatch: {dispatch})",
             "", head, "|" + "---|" * 13]
    for r in rows:
        lines.append(f"| {r['heads']} | {r['T']} | {r['batch']} | {r['prefix']} | {r['stock_us']:.1f} | "
                     f"{r['custom_bare_us']:.1f} | {r['plugin_triton_us']:.1f} | {r['plugin_shadow_us']:.1f} | "
                     f"{r['plugin_custom_us']:.1f} | {r['idle_overhead_us']:+.1f} | {r['custom_overhead_us']:+.1f} | "
                     f"{r['shadow_overhead_us']:+.1f} | {r['custom_speedup_vs_stock']:.1f}x |")
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
    from cutover.hostlayout import HostPaths
    from cutover.plugin.hooks import resolve_stock_kernel
    from cutover.plugin.kernels import CudaKernels
    from cutover.plugin.runtime import PluginRuntime

    state = tempfile.mkdtemp(prefix="cutover-bench-")
    paths = HostPaths(cutover_root=os.path.join(state, "root"), state_dir=os.path.join(state, "state"))
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
                "after stock)")
    os.makedirs(args.out, exist_ok=True)
    document = {"device": device_name, "torch": torch.__version__, "stock_module": stock_module,
                "calls_per_graph": CALLS_PER_GRAPH, "reps": args.reps, "abi_version": kernel_ext.ABI_VERSION,
                "dispatch": dispatch, "rows": rows}
    with open(os.path.join(args.out, "plugin_overhead.json"), "w") as handle:
        json.dump(document, handle, indent=2)
    table = markdown(rows, device_name, dispatch)
    with open(os.path.join(args.out, "plugin_overhead.md"), "w") as handle:
        handle.write(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
