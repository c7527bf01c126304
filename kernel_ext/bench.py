"""Benchmark of the CUDA verify kernel against SGLang's Triton kernels, with both roofline ceilings.

    python -m kernel_ext.bench [--grid full|quick|mixed|...] [--out DIR] [--label rc1] [--no-triton] [--no-early-start]

For every shape (H, T, batch, prefix, mask) it times, as CUDA-graph replays on the same inputs: our kernel,
SGLang's `extend_attention_fwd` and, for chains, SGLang's `verify_shared_kv_fwd` where it runs. Each
timed launch is queued behind a spin kernel, so the host's submission is not part of the time
(`kernel_ext.cudagraph.time_queued`). KV rows are scattered over a pool of at least 256 MB, and every kernel's
graph cycles through as many index sets as it takes to touch 512 MB of KV rows, and at least 4x the device's L2
(H200 50 MB, RTX PRO 6000 Blackwell 128 MB), so the L2 cache does not serve repeated calls. The roofline bound is
max(min bytes / copy bandwidth, flops / bf16 matmul rate), both ceilings measured in the same run. Our calls run
with early start, as the plugin runs them (each call may plan while the kernel before it finishes: here the
previous call's combine, in the plugin the gate); --no-early-start times them in plain stream order. The mixed
grid times batches whose requests have different prefix lengths (MIXES), each beside its even twin (the same batch
and keys, every prefix alike): `mix_cost`, the mix's time over its twin's, is what the mix costs the plan's
balance. Writes bench.json, bench.md and bench.png into --out (`kernel_ext.bench_report`).
"""
from __future__ import annotations

import argparse
import itertools
import math
import random
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

import torch

from kernel_ext import api
from kernel_ext.bench_report import write_json, write_report
from kernel_ext.cudagraph import capture_graph, replay_ms, time_queued
from kernel_ext.gpu_parity import load_sglang_triton
from kernel_ext.reference import MLA_QK_DIM, MLA_V_DIM
from kernel_ext.testing import random_tree_parents, tree_tail_mask


def _log_uniform(batch: int, low: int, high: int, seed: int) -> list[int]:
    gen = random.Random(seed)
    return [int(math.exp(gen.uniform(math.log(low), math.log(high)))) for _ in range(batch)]


# Prefix lengths of each request of a mixed batch: one long request among short ones, a few long among tiny ones,
# lengths drawn log-uniformly between 512 and 65536 (a serving batch of chats and documents), a narrow spread (2x),
# and a near-even one (within 1/16: the plan keeps request order there).
MIXES = {
    "1x65536+63x1024": lambda: [65536] + [1024] * 63,
    "4x65536+60x256": lambda: [65536] * 4 + [256] * 60,
    "logu16": lambda: _log_uniform(16, 512, 65536, seed=1),
    "logu64": lambda: _log_uniform(64, 512, 65536, seed=1),
    "logu64x2": lambda: _log_uniform(64, 2048, 4096, seed=1),
    "near64": lambda: _log_uniform(64, 4096, 4352, seed=1),
}

GRIDS = {
    "full": dict(H=(8, 16), T=(8, 16, 32, 64), batch=(1, 4, 16, 64), prefix=(1024, 4096, 16384, 65536),
                 mask=("tree", "chain")),
    "quick": dict(H=(8, 16), T=(8, 64), batch=(1, 16), prefix=(4096, 65536), mask=("tree",)),
    # the shapes where the split combine weighs most (small prefix, many rows) and the widest combine
    "combine": dict(H=(8, 16), T=(8, 64), batch=(1, 4, 16), prefix=(1024, 65536), mask=("tree",)),
    # one request per call: the combine merges up to a wave of splits per row (its long-batch layout)
    "batch1": dict(H=(8, 16), T=(8, 16, 32, 64), batch=(1,), prefix=(1024, 4096, 16384, 65536), mask=("tree",)),
    # batches of mixed prefix lengths (MIXES), each with its even twin
    "mixed": dict(H=(8, 16), T=(8, 16), mix=tuple(MIXES), mask=("tree",)),
}

MIN_POOL_BYTES = 256 << 20
ROTATE_BYTES = 512 << 20  # small shapes cycle through index sets until this many KV bytes are touched
ROTATE_L2_MULTIPLE = 4    # ... and at least this many times the device's L2
MAX_SETS = 1024           # batch 1, prefix 1024 (1.2 MB of rows) needs 456 sets for 512 MB


def grid_shapes(grid: dict) -> list[tuple]:
    """(H, T, batch, prefix, mask, prefixes) of every shape of a grid; prefixes is None where all requests have
    `prefix` keys. A mix gives two shapes: "mix:<name>" (its lengths) and "even:<name>" (its twin)."""
    if "mix" not in grid:
        product = itertools.product(grid["H"], grid["T"], grid["batch"], grid["prefix"], grid["mask"])
        return [(*s, None) for s in product]
    shapes = []
    for H, T, name, mask in itertools.product(grid["H"], grid["T"], grid["mix"], grid["mask"]):
        lengths = MIXES[name]()
        even = round(sum(lengths) / len(lengths))
        shapes += [(H, T, len(lengths), f"mix:{name}", mask, lengths),
                   (H, T, len(lengths), f"even:{name}", mask, [even] * len(lengths))]
    return shapes


def add_mix_costs(rows: list[dict]) -> None:
    """mix_cost of every mixed row whose even twin ran: its time over the twin's."""
    even = {(r["H"], r["T"], r["mask"], r["prefix"][5:]): r for r in rows if str(r["prefix"]).startswith("even:")}
    for r in rows:
        twin = str(r["prefix"]).startswith("mix:") and even.get((r["H"], r["T"], r["mask"], r["prefix"][4:]))
        if twin:
            r["mix_cost"] = r["ours_us"] / twin["ours_us"]


def rotation_sets(kv_bytes: int, l2_bytes: int) -> int:
    """Index sets a shape cycles through, so that one cycle touches max(ROTATE_BYTES, 4 x L2) bytes of KV rows."""
    target = max(ROTATE_BYTES, ROTATE_L2_MULTIPLE * l2_bytes)
    return max(1, min(MAX_SETS, -(-target // max(kv_bytes, 1))))


def measure_copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (median of events)."""
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(200):  # let the clocks settle before measuring
        b.copy_(a)
    ms = time_eager(lambda: b.copy_(a), reps=50)
    return 2 * n / (ms * 1e-3)


def measure_matmul_rate() -> float:
    """bf16 8192^3 matmul on random data, FLOP per second."""
    n = 8192
    a = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    ms = time_graph(lambda: a @ b, reps=20)
    return 2 * n ** 3 / (ms * 1e-3)


def time_graph(fn, reps: int, calls: int = 1) -> float:
    """Median milliseconds of one call: `calls` calls captured in a CUDA graph, replayed `reps` times."""
    graph = capture_graph(fn, calls)
    graph.replay()
    torch.cuda.synchronize()
    ms = replay_ms(graph, reps, calls)
    del graph
    return ms


def time_eager(fn, reps: int) -> float:
    """Median milliseconds of one eager call (a copy: captured, it would become a copy-engine node)."""
    fn()
    torch.cuda.synchronize()
    return statistics.median(time_queued(fn, reps))


def parse_shapes(text: str) -> list[tuple[int, int, int, int]]:
    """Shapes given as text, "8,8,1,4096 16,8,1,65536" -> [(8, 8, 1, 4096), (16, 8, 1, 65536)] (H, T, batch,
    prefix); ValueError names a bad entry."""
    shapes = []
    for entry in text.split():
        parts = entry.split(",")
        if len(parts) != 4 or not all(p.isdigit() for p in parts) or 0 in [int(p) for p in parts[:3]]:
            raise ValueError(f"shape {entry!r} is not H,T,BATCH,PREFIX: four integers, the first three positive "
                             "(e.g. 8,8,1,4096)")
        shapes.append(tuple(int(p) for p in parts))
    if not shapes:
        raise ValueError("no shape given (e.g. --shapes \"8,8,1,4096 16,8,1,65536\")")
    return shapes


class Shape:
    """Inputs of one benchmark shape, with `sets` scattered kv_indices sets over one pool."""

    def __init__(self, H, T, batch, prefix, mask, seed=0, prefixes=None):
        self.H, self.T, self.batch, self.prefix, self.mask = H, T, batch, prefix, mask
        self.prefixes = list(prefixes) if prefixes is not None else [prefix] * batch
        if len(self.prefixes) != batch:
            raise ValueError(f"{len(self.prefixes)} prefix lengths for a batch of {batch}: give one per request")
        gen = torch.Generator(device="cuda").manual_seed(seed)
        total = sum(self.prefixes)
        kv_bytes = total * MLA_QK_DIM * 2
        l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
        self.sets = rotation_sets(kv_bytes, l2_bytes)
        pool = max(2 * total, MIN_POOL_BYTES // (MLA_QK_DIM * 2), self.sets * total)
        self.k_buffer = torch.randn(pool, 1, MLA_QK_DIM, generator=gen, device="cuda").to(torch.bfloat16)
        self.v_buffer = self.k_buffer[..., :MLA_V_DIM]
        perm = torch.randperm(pool, generator=gen, device="cuda")
        self.kv_indices = [perm[i * total:(i + 1) * total].clone() for i in range(self.sets)]
        n = batch * T
        self.q = torch.randn(n, H, MLA_QK_DIM, generator=gen, device="cuda").to(torch.bfloat16)
        self.k = torch.randn(n, 1, MLA_QK_DIM, generator=gen, device="cuda").to(torch.bfloat16)
        self.v = self.k[..., :MLA_V_DIM].contiguous()
        self.o = torch.empty(n, H, MLA_V_DIM, dtype=torch.bfloat16, device="cuda")
        zero = torch.zeros(1, dtype=torch.int64)
        lengths = torch.tensor(self.prefixes, dtype=torch.int64)
        self.qo_indptr = (torch.arange(batch + 1, dtype=torch.int32) * T).to("cuda")
        self.kv_indptr = torch.cat([zero, lengths.cumsum(0)]).to(torch.int32).to("cuda")
        self.mask_indptr = torch.cat([zero, (T * (lengths + T)).cumsum(0)]).to("cuda")
        cpu_gen = torch.Generator().manual_seed(seed)
        blocks = []
        for p in self.prefixes:
            tree = random_tree_parents(T, cpu_gen) if mask == "tree" else list(range(-1, T - 1))
            block = torch.ones(T, p + T, dtype=torch.bool)
            block[:, p:] = tree_tail_mask(tree)
            blocks.append(block.flatten())
        self.custom_mask = torch.cat(blocks).to("cuda")
        self.workspace = torch.empty(api.workspace_bytes(batch, H, T), dtype=torch.uint8, device="cuda")
        self.sm_scale = 1.0 / math.sqrt(MLA_QK_DIM)

    def args(self, i: int):
        return (self.q, self.k, self.v, self.o, self.k_buffer, self.v_buffer, self.qo_indptr, self.kv_indptr,
                self.kv_indices[i], self.custom_mask, True, self.mask_indptr, self.T, 1.0, 1.0, self.sm_scale)

    def min_bytes(self) -> int:
        b, p, t, h = self.batch, sum(self.prefixes), self.T, self.H
        return (p * (MLA_QK_DIM * 2 + 8) + b * t * h * (MLA_QK_DIM + MLA_V_DIM) * 2
                + b * t * (MLA_QK_DIM + MLA_V_DIM) * 2 + b * t * t)

    def flops(self) -> int:
        return 2 * self.H * self.T * (sum(self.prefixes) + self.batch * self.T) * (MLA_QK_DIM + MLA_V_DIM)


def rotating(shape: Shape, call):
    state = {"i": 0}

    def fn():
        call(*shape.args(state["i"] % shape.sets))
        state["i"] += 1
    return fn


def bench_shape(shape: Shape, triton_fwd, shared_fwd, reps: int, triton_reps: int, early_start: bool) -> dict:
    ours = time_graph(rotating(shape, lambda *a: api.verify_attention(*a, workspace=shape.workspace,
                                                                      early_start=early_start)),
                      reps=reps, calls=shape.sets)
    row = dict(H=shape.H, T=shape.T, batch=shape.batch, prefix=shape.prefix, mask=shape.mask, sets=shape.sets,
               ours_us=ours * 1e3, triton_us=None, shared_us=None)
    calls = shape.sets  # SGLang's kernels cycle through the same sets: fewer would let L2 serve small shapes
    if triton_fwd is not None:
        row["triton_us"] = time_graph(rotating(shape, triton_fwd), reps=triton_reps, calls=calls) * 1e3
    if shared_fwd is not None and shape.mask == "chain":
        def shared(*args):
            return shared_fwd(*args, max_bs=max(64, shape.batch))

        try:
            if shared(*shape.args(0)):  # False where it does not serve the shape
                row["shared_us"] = time_graph(rotating(shape, shared), reps=triton_reps, calls=calls) * 1e3
        except Exception as exc:  # verify_shared_kv_fwd runs out of shared memory at large T
            row["shared_error"] = repr(exc)[:160]
    return row


def roofline(row: dict, shape: Shape, copy_bw: float, mm_rate: float) -> dict:
    t_mem, t_flop = shape.min_bytes() / copy_bw, shape.flops() / mm_rate
    bound = max(t_mem, t_flop)
    row.update(min_bytes=shape.min_bytes(), flops=shape.flops(), floor_mem_us=t_mem * 1e6,
               floor_flop_us=t_flop * 1e6, bound=("memory" if t_mem >= t_flop else "compute"),
               roofline_fraction=bound * 1e6 / row["ours_us"])
    if row["triton_us"]:
        row["speedup_vs_triton"] = row["triton_us"] / row["ours_us"]
    if row["shared_us"]:
        row["speedup_vs_shared"] = row["shared_us"] / row["ours_us"]
    return row


def _sglang_version() -> str | None:
    """The installed SGLang's version, or None where its kernels come from a source tree on PYTHONPATH."""
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=sorted(GRIDS), default="full")
    parser.add_argument("--out", type=Path, default=Path("bench_out"))
    parser.add_argument("--label", default="dev")
    parser.add_argument("--no-triton", action="store_true")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--triton-reps", type=int, default=3)
    parser.add_argument("--no-early-start", action="store_true", help="time our calls in plain stream order")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    import triton

    triton_fwd = None if args.no_triton else load_sglang_triton()
    shared_fwd = None
    if not args.no_triton:
        try:
            from sglang.kernels.ops.attention.verify_mla import verify_shared_kv_fwd as shared_fwd
        except ImportError:
            shared_fwd = None
    copy_bw, mm_rate = measure_copy_bandwidth(), measure_matmul_rate()
    print(f"copy {copy_bw / 1e9:.0f} GB/s, bf16 matmul {mm_rate / 1e12:.0f} TFLOP/s", flush=True)
    g = GRIDS[args.grid]
    rows, started = [], time.time()
    for H, T, batch, prefix, mask, prefixes in grid_shapes(g):
        shape = Shape(H, T, batch, prefix, mask, prefixes=prefixes)
        row = roofline(bench_shape(shape, triton_fwd, shared_fwd, args.reps, args.triton_reps, not args.no_early_start),
                       shape, copy_bw, mm_rate)
        if prefixes is not None:
            row.update(keys=sum(prefixes), longest_prefix=max(prefixes))
        rows.append(row)
        add_mix_costs(rows)
        print(f"{H:>3} {T:>3} {batch:>3} {prefix:>6} {mask:>5} ours {row['ours_us']:9.1f} us  triton "
              f"{row['triton_us'] or 0:9.1f}  x{row.get('speedup_vs_triton', 0):6.1f}  roof "
              f"{100 * row['roofline_fraction']:5.1f}% ({row['bound']})", flush=True)
        del shape
        torch.cuda.empty_cache()
        run = dict(label=args.label, grid=args.grid, gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                   triton=triton.__version__, sglang=_sglang_version(), cuda=torch.version.cuda,
                   copy_gbs=copy_bw / 1e9, matmul_tflops=mm_rate / 1e12, early_start=not args.no_early_start,
                   seconds=time.time() - started, rows=rows)
        write_json([run], args.out)  # a run cut short keeps its rows
    s = write_report([run], args.out)["runs"][0]["summary"]
    print(f"median speedup vs Triton {s['median_speedup']:.1f}x (min {s['min_speedup']:.1f}x); roofline fraction "
          f"memory-bound median {s['median_roof_memory']} min {s['min_roof_memory']}, compute-bound median "
          f"{s['median_roof_compute']} min {s['min_roof_compute']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
