"""Model of the verify kernel's plan (plan_work_item in kernel_ext/csrc/verify_kernels.cuh), v66 and v67.

    PYTHONPATH=. python3 results/ab_v67_h200/plan_model.py

Prints, for the mixed grid of kernel_ext.bench, each plan's largest work item and the end of list scheduling of
its items in work-item order over G_target slots, in 64-key tiles (the README's prediction table); then checks
that v67 changes no uniform shape of the benchmark and parity grids, and that its bounds (splits <= G_target + B,
partial slots <= 2 G_target) hold over random batches. A model for predictions, not a test of the kernel.
"""
from __future__ import annotations

import heapq
import itertools
import random

ALIGN, MIN_SPLIT, TAIL, MAX_CHUNK, SMS = 64, 128, 64, 1 << 30, 132


def round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def splits_at(work: list[int], chunk: int) -> int:
    return sum(-(-w // chunk) for w in work)


def even_chunk(work: list[int], chunk: int) -> int:
    share = ALIGN
    for w in work:
        n = -(-w // chunk)
        share = max(share, round_up(-(-w // n), ALIGN))
    return max(MIN_SPLIT, min(chunk, share))


def plan_chunk(prefixes: list[int], g_target: int, waves: bool) -> int:
    """The plan's chunk: v66 (waves False) or v67 (waves True)."""
    work = [p + TAIL for p in prefixes]
    first = -(-sum(work) // g_target)
    chunk = max(MIN_SPLIT, round_up(first, ALIGN))
    wave_chunk = chunk
    for _ in range(64):
        cnt = splits_at(work, chunk)
        if cnt <= g_target or cnt == len(work) or chunk >= MAX_CHUNK:
            break
        grown = round_up(chunk * cnt // g_target, ALIGN)
        chunk = grown if grown > chunk else chunk + ALIGN
    chunk = even_chunk(work, chunk)
    if waves and chunk > 2 * wave_chunk and first <= MAX_CHUNK:
        chunk = even_chunk(work, wave_chunk)
    return chunk


def work_items(prefixes: list[int], chunk: int) -> tuple[list[int], int]:
    """Tiles of each work item in order (the last split of a request takes the tail's tile), and partial slots."""
    items, slots = [], 0
    for p in prefixes:
        n = -(-(p + TAIL) // chunk)
        slots += n if n > 1 else 0
        for k in range(n):
            begin = min(k * chunk, p)
            end = min(begin + chunk, p)
            items.append(-(-(end - begin) // 64) + (k == n - 1))
    return items, slots


def list_schedule_end(items: list[int], slots: int) -> int:
    """When the last item ends if each goes, in order, to the slot that frees first."""
    heap = [0] * slots
    for t in items:
        heapq.heappush(heap, heapq.heappop(heap) + t)
    return max(heap)


def g_target(H: int, T: int, m_tile: int = 64) -> int:
    return max(1, SMS // -(-H * T // m_tile))


def main() -> None:
    from kernel_ext import bench

    print("H/T   mix               v66 largest/end   v67 largest/end   even twin end")
    for (H, T), name in itertools.product(((8, 8), (16, 16)), bench.GRIDS["mixed"]["mix"]):
        lengths = bench.MIXES[name]()
        twin = [round(sum(lengths) / len(lengths))] * len(lengths)
        g = g_target(H, T)
        cols = []
        for prefixes, waves in ((lengths, False), (lengths, True)):
            items, _ = work_items(prefixes, plan_chunk(prefixes, g, waves))
            cols.append(f"{max(items):5d} / {list_schedule_end(items, g):5d}")
        twin_items, _ = work_items(twin, plan_chunk(twin, g, True))
        print(f"{H}/{T:<3} {name:16s}  {cols[0]}     {cols[1]}     {list_schedule_end(twin_items, g):5d}")
    uniform = list(itertools.product((8, 16), (8, 16, 32, 64), (1, 4, 16, 64), (1024, 4096, 16384, 65536)))
    uniform += list(itertools.product((8, 16), (1, 2, 8, 16, 32, 64), (1, 3, 8, 32), (0, 1, 7, 1000, 5000, 32768)))
    changed = [(H, T, B, P, m) for H, T, B, P in uniform for m in (64, 32)
               if plan_chunk([P] * B, g_target(H, T, m), False) != plan_chunk([P] * B, g_target(H, T, m), True)]
    print(f"uniform shape/configuration pairs whose plan v67 changes: {len(changed)} of {2 * len(uniform)}")
    rng = random.Random(0)
    for _ in range(20000):
        B, g = rng.randint(1, 200), rng.randint(1, 132)
        prefixes = [rng.choice([rng.randint(0, 300), rng.randint(0, 70000)]) for _ in range(B)]
        items, slots = work_items(prefixes, plan_chunk(prefixes, g, True))
        assert len(items) <= g + B and slots <= 2 * g, (B, g, len(items), slots)
    print("bounds hold over 20000 random batches")


if __name__ == "__main__":
    main()
