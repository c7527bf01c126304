"""Models behind v70's launch rule and threshold (plan_work_item in kernel_ext/csrc/verify_kernels.cuh).

    .venv/bin/python results/ab_v70_h200/order_model.py

1. Only a call of more than G_target / 2 requests can have more work items than G_target: over random batches
   (skewed, lognormal, one long among short), v67's plan never gives a call with B <= G_target / 2 more items.
2. What longest first gains over request order on batches of more than G_target / 2 requests whose lengths spread
   over L..s L (list scheduling of 64-key tiles), by spread s.
3. The prediction table of the README for the mixed grid. A model for predictions, not a test of the kernel.
"""
from __future__ import annotations

import importlib.util
import itertools
import pathlib
import random
import statistics

_spec = importlib.util.spec_from_file_location(
    "plan_model_v69", pathlib.Path(__file__).parents[1] / "ab_v69_h200" / "plan_model.py")
v69 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(v69)
v67 = v69.v67


def items_over_wave(prefixes: list[int], g: int) -> bool:
    chunk = v67.plan_chunk(prefixes, g, True)
    return v67.splits_at([p + v67.TAIL for p in prefixes], chunk) > g


def ends(prefixes: list[int], g: int, ordered: bool) -> int:
    """End of list scheduling of the call's tiles, in request order or in v69/v70's longest-first order."""
    chunk = v67.plan_chunk(prefixes, g, True)
    t = v69.tiles(prefixes, chunk)
    keys = sorted(t, key=v69.v69_places(prefixes, chunk).get) if ordered else sorted(t)
    return v67.list_schedule_end([t[k] for k in keys], g)


def longest_first_applies(prefixes: list[int], g: int) -> bool:
    """v70: the LONGEST_FIRST instance (2 B > G_target), more items than G_target, most work over 9/8 of least."""
    work = [p + v67.TAIL for p in prefixes]
    return 2 * len(prefixes) > g and items_over_wave(prefixes, g) and max(work) * 8 > min(work) * 9


def main() -> None:
    rng = random.Random(7)
    over = 0
    for _ in range(200000):
        g = rng.choice([132, 66, 44, 33, 26, 22, 16, 8, 4, 2, 1, rng.randint(1, 132)])
        B = rng.randint(1, max(1, g // 2))
        kind = rng.random()
        if kind < 0.3:
            prefixes = [rng.randint(0, 300) for _ in range(B)]
        elif kind < 0.6:
            prefixes = [rng.choice([rng.randint(0, 2000), rng.randint(0, 200000)]) for _ in range(B)]
        elif kind < 0.8:
            prefixes = [int(rng.lognormvariate(8, 2.5)) for _ in range(B)]
        else:
            prefixes = [rng.randint(0, 300)] * (B - 1) + [rng.randint(0, 10**6)]
        over += items_over_wave(prefixes, g)
    print(f"B <= G_target / 2: {over} of 200000 random calls have more work items than G_target")

    print("spread  longest first / request order (mean over G_target 16, 33, 66 and L 1024, 4096)")
    for s in (1.1, 1.25, 1.5, 2, 4):
        ratios = []
        for g, low, _ in itertools.product((16, 33, 66), (1024, 4096), range(60)):
            B = rng.choice([g + 1, int(g * 1.5), 2 * g]) if g < 64 else rng.choice([g + 1, 100, 132])
            prefixes = [int(low * s ** rng.random()) for _ in range(B)]
            ratios.append(ends(prefixes, g, True) / ends(prefixes, g, False))
        print(f"{s:5}   {statistics.mean(ratios):.3f}")

    from kernel_ext import bench
    print("H/T    mix               B    G  ordered  request order  v70 order")
    for (H, T), name in itertools.product(((8, 8), (8, 16), (16, 16)), bench.MIXES):
        prefixes, g = bench.MIXES[name](), v67.g_target(H, T)
        ordered = longest_first_applies(prefixes, g)
        e0 = ends(prefixes, g, False)
        print(f"{H}/{T:<4} {name:16s} {len(prefixes):3d} {g:4d}  {ordered!s:7s}  {e0:13d}  "
              f"{ends(prefixes, g, True) if ordered else e0:9d}")


if __name__ == "__main__":
    main()
