"""Model of v72's plan against v71's (plan_work_item in kernel_ext/csrc/verify_kernels.cuh): where the plan keeps
one wave, v72 takes the least chunk that fits it instead of the grown one.

    .venv/bin/python results/ab_v72_h200/plan_model.py

Prints the mixed grid's plans (chunk, splits, critical tiles of list scheduling in the kernel's order), checks that
no uniform shape of the benchmark and parity grids changes its plan, counts the halving passes on the full grid,
and compares the two over random batches. A model for predictions, not a test of the kernel.
"""
from __future__ import annotations

import importlib.util
import itertools
import pathlib
import random
import statistics

_spec = importlib.util.spec_from_file_location(
    "order_model_v70", pathlib.Path(__file__).parents[1] / "ab_v70_h200" / "order_model.py")
v70 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(v70)
v67, v69 = v70.v67, v70.v69
ALIGN = v67.ALIGN


def plan_chunk_v72(prefixes: list[int], g: int) -> tuple[int, int]:
    """v72's chunk and its halving passes: v67's growth, the same choice of waves, then the least fitting chunk."""
    work = [p + v67.TAIL for p in prefixes]
    chunk = max(v67.MIN_SPLIT, v67.round_up(-(-sum(work) // g), ALIGN))
    wave_chunk, unfit = chunk, chunk - ALIGN

    def fits(c: int) -> bool:
        n = v67.splits_at(work, c)
        return n <= g or n == len(work)

    for _ in range(64):
        if fits(chunk) or chunk >= v67.MAX_CHUNK:
            break
        unfit = chunk
        grown = v67.round_up(chunk * v67.splits_at(work, chunk) // g, ALIGN)
        chunk = grown if grown > chunk else chunk + ALIGN
    chunk = v67.even_chunk(work, chunk)
    if chunk > 2 * wave_chunk:
        return v67.even_chunk(work, wave_chunk), 0
    passes = 0
    while unfit + ALIGN < chunk:
        mid = v67.round_up(unfit + (chunk - unfit) // 2, ALIGN)
        passes += 1
        if fits(mid):
            chunk = mid
        else:
            unfit = mid
    return v67.even_chunk(work, chunk), passes


def end_tiles(prefixes: list[int], g: int, chunk: int) -> int:
    """Critical tiles: list scheduling over g slots, in v70's longest-first order where the kernel takes it."""
    work = [p + v67.TAIL for p in prefixes]
    ordered = 2 * len(prefixes) > g and v67.splits_at(work, chunk) > g and max(work) * 8 > min(work) * 9
    t = v69.tiles(prefixes, chunk)
    keys = sorted(t, key=v69.v69_places(prefixes, chunk).get) if ordered else sorted(t)
    return v67.list_schedule_end([t[k] for k in keys], g)


def compare(prefixes: list[int], g: int) -> tuple:
    c71 = v67.plan_chunk(prefixes, g, True)
    c72, passes = plan_chunk_v72(prefixes, g)
    work = [p + v67.TAIL for p in prefixes]
    return (c71, c72, v67.splits_at(work, c71), v67.splits_at(work, c72), end_tiles(prefixes, g, c71),
            end_tiles(prefixes, g, c72), passes)


def main() -> None:
    from kernel_ext import bench

    print("H/T    mix                G    chunk v71 -> v72   splits       critical tiles  halving passes")
    for (H, T), name in itertools.product(((8, 8), (8, 16), (16, 16)), bench.MIXES):
        g = v67.g_target(H, T)
        c71, c72, n71, n72, e71, e72, passes = compare(bench.MIXES[name](), g)
        print(f"{H}/{T:<4} {name:16s} {g:4d}  {c71:6d} -> {c72:6d}   {n71:3d} -> {n72:3d}   {e71:4d} -> {e72:4d}"
              f"     {passes}")
    uniform = list(itertools.product((8, 16), (1, 2, 8, 16, 32, 64), (1, 3, 4, 8, 16, 32, 64),
                                     (0, 1, 7, 1000, 1024, 4096, 5000, 16384, 32768, 65536)))
    changed = [(H, T, B, P, m) for H, T, B, P in uniform for m in (64, 32)
               if plan_chunk_v72([P] * B, v67.g_target(H, T, m))[0] != v67.plan_chunk([P] * B, v67.g_target(H, T, m), True)]
    print(f"uniform shape/configuration pairs whose plan v72 changes: {len(changed)} of {2 * len(uniform)}")
    full = [(H, T, B, P, plan_chunk_v72([P] * B, v67.g_target(H, T))[1])
            for H, T, B, P in itertools.product((8, 16), (8, 16, 32, 64), (1, 4, 16, 64), (1024, 4096, 16384, 65536))]
    print("full grid shapes with halving passes (H, T, batch, prefix, passes):", [s for s in full if s[4]])
    rng = random.Random(3)
    ratios = []
    for _ in range(20000):
        g, B = rng.choice([132, 66, 44, 33, 16, rng.randint(1, 188)]), rng.randint(1, 200)
        kind = rng.random()
        if kind < 0.3:
            prefixes = [rng.randint(0, 5000) for _ in range(B)]
        elif kind < 0.6:
            prefixes = [rng.choice([rng.randint(0, 2000), rng.randint(0, 100000)]) for _ in range(B)]
        else:
            prefixes = [int(rng.lognormvariate(8, 1.5)) for _ in range(B)]
        c71, c72, n71, n72, e71, e72, _ = compare(prefixes, g)
        assert n72 <= g + B and (c72 <= c71 or c72 == v67.even_chunk([p + v67.TAIL for p in prefixes], c72))
        if c71 != c72:
            ratios.append(e72 / e71)
    print(f"random batches: {len(ratios)} of 20000 plans change; critical tiles v72 / v71 among them: mean "
          f"{statistics.mean(ratios):.3f}, best {min(ratios):.3f}, worst {max(ratios):.3f}")


if __name__ == "__main__":
    main()
