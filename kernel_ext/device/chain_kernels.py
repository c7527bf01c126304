"""Small chains, ours against SGLang's `verify_shared_kv_fwd`: each call's GPU kernels as the profiler records
them (summed per call, no host time in it), beside the benchmark's graph-replay time with more repetitions.

    python kernel_ext/device/chain_kernels.py --out DIR [H/T/BATCH/PREFIX ...]
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from kernel_ext import api
from kernel_ext.bench import Shape, rotating, time_graph

DEFAULT_SHAPES = ("8/8/1/1024", "16/8/1/1024", "8/8/4/1024", "16/8/4/1024", "8/8/1/4096", "16/8/1/4096",
                  "8/16/1/1024", "16/16/1/1024")
CALLS = 20


def kernel_us_per_call(fn, calls: int) -> tuple[float, dict]:
    """Sum of the GPU kernels' durations over `calls` eager calls, per call, and per kernel name."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    names: dict[str, float] = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            names[ev.name] = names.get(ev.name, 0.0) + ev.time_range.elapsed_us() / calls
    return sum(names.values()), names


def measure_chain(text: str, shared_fwd) -> dict:
    """One chain shape "H/T/BATCH/PREFIX": graph and kernel-sum times of ours (plain order) and SGLang's."""
    H, T, batch, prefix = map(int, text.split("/"))
    shape = Shape(H, T, batch, prefix, "chain")
    ours = rotating(shape, lambda *a: api.verify_attention(*a, workspace=shape.workspace))
    shared = rotating(shape, lambda *a: shared_fwd(*a, max_bs=max(64, batch)))
    row = dict(shape=text, sets=shape.sets)
    for name, fn, calls in (("ours", ours, shape.sets), ("shared", shared, min(shape.sets, 4))):
        row[f"{name}_graph_us"] = statistics.median(time_graph(fn, reps=20, calls=calls) * 1e3 for _ in range(3))
        row[f"{name}_kernels_us"], row[f"{name}_by_kernel"] = kernel_us_per_call(fn, CALLS)
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("shapes", nargs="*", default=DEFAULT_SHAPES)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from sglang.kernels.ops.attention.verify_mla import verify_shared_kv_fwd

    rows = [measure_chain(text, verify_shared_kv_fwd) for text in args.shapes]
    for r in rows:
        print(f"{r['shape']:>14} ours graph {r['ours_graph_us']:6.1f} kernels {r['ours_kernels_us']:6.1f} | shared "
              f"graph {r['shared_graph_us']:6.1f} kernels {r['shared_kernels_us']:6.1f} | ratio (graph) "
              f"{r['shared_graph_us'] / r['ours_graph_us']:4.2f}x")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "chain_kernels.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
