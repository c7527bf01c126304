"""Where one verify call's time goes: per-kernel start, duration and gaps inside CUDA-graph replays.

    python kernel_ext/device/timeline.py [--shapes "8,8,1,1024 16,64,4,1024"] [--json FILE]

Each shape is captured as in `kernel_ext.bench` (rotating index sets), replayed untraced for the call time, then
replayed under the PyTorch profiler (CUPTI), which records every kernel node of the graph. For each call the
kernels are matched in launch order; the table gives medians over the calls, in microseconds.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from kernel_ext import api
from kernel_ext.bench import Shape, parse_shapes, rotating, time_graph
from kernel_ext.cudagraph import capture_graph

DEFAULT_SHAPES = "8,8,1,1024 8,8,1,65536 8,8,4,65536 8,8,64,1024 16,64,1,1024 16,64,4,1024 16,32,4,16384"


def kernel_events(graph: torch.cuda.CUDAGraph, replays: int) -> list[dict]:
    """Kernel events (name, ts, dur in us) of `replays` graph replays, in start order."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    return sorted(({"name": e["name"], "ts": float(e["ts"]), "dur": float(e["dur"])} for e in kernels),
                  key=lambda e: e["ts"])


def call_breakdown(events: list[dict]) -> dict:
    """Medians over calls: each kernel's duration, the gaps between them, and the period of a call.

    A call is [plan], main, combine; libraries before v15 launch a plan kernel first, later ones do not."""
    calls = []
    for i, e in enumerate(events):
        if ("verify_wgmma" in e["name"] or "verify_main" in e["name"]) and i + 1 < len(events):
            plan = events[i - 1] if i > 0 and "verify_plan" in events[i - 1]["name"] else None
            calls.append({"plan": plan, "main": e, "combine": events[i + 1], "start": (plan or e)["ts"]})
    med = lambda v: round(statistics.median(v), 2) if v else None  # noqa: E731
    end = lambda e: e["ts"] + e["dur"]  # noqa: E731
    planned = [c for c in calls if c["plan"]]
    starts = [c["start"] for c in calls]
    return {
        "calls": len(calls),
        "plan_us": med([c["plan"]["dur"] for c in planned]),
        "plan_end_to_main_start_us": med([c["main"]["ts"] - end(c["plan"]) for c in planned]),
        "main_us": med([c["main"]["dur"] for c in calls]),
        "main_end_to_combine_start_us": med([c["combine"]["ts"] - end(c["main"]) for c in calls]),
        "combine_us": med([c["combine"]["dur"] for c in calls]),
        "combine_end_after_main_end_us": med([end(c["combine"]) - end(c["main"]) for c in calls]),
        "call_start_to_combine_end_us": med([end(c["combine"]) - c["start"] for c in calls]),
        "period_us": med([b - a for a, b in zip(starts, starts[1:])]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    x = torch.zeros(1024, device="cuda")
    three_tiny_us = time_graph(lambda: (x.add_(1), x.mul_(1), x.sub_(1)), reps=20, calls=16) * 1e3
    print(f"three dependent tiny kernels per call (graph replay): {three_tiny_us:.2f} us")
    rows = []
    for spec in args.shapes.split():
        H, T, batch, prefix = parse_shapes(spec)[0]
        shape = Shape(H, T, batch, prefix, "tree")
        fn = rotating(shape, lambda *a, ws=shape.workspace: api.verify_attention(*a, workspace=ws))
        calls = min(shape.sets, 16)
        untraced_us = time_graph(fn, reps=20, calls=calls) * 1e3
        graph = capture_graph(fn, calls)
        graph.replay()
        torch.cuda.synchronize()
        row = {"shape": spec, "untraced_call_us": round(untraced_us, 2), **call_breakdown(kernel_events(graph, 5))}
        rows.append(row)
        del graph, shape
        torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "three_tiny_kernels_us": three_tiny_us,
                                          "rows": rows}, indent=1))
    keys = ["untraced_call_us", "period_us", "plan_us", "plan_end_to_main_start_us", "main_us",
            "main_end_to_combine_start_us", "combine_us", "combine_end_after_main_end_us", "call_start_to_combine_end_us"]
    short = ["call", "period", "plan", "plan>main", "main", "main>comb", "combine", "comb tail", "start>end"]
    print(f"{'shape':<14} " + " ".join(f"{k:>9}" for k in short))
    for r in rows:
        print(f"{r['shape']:<14} " + " ".join(f"{r[k] if r[k] is not None else '-':>9}" for k in keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
