"""Model of v76's plan against v72's (results/ab_v72_h200/plan_model.py): the same least fitting chunk, searched
from the first chunk (known not to fit wherever the chunk grew) instead of the last chunk seen not to fit, and
evened again only where it changed.

    .venv/bin/python results/ab_v76_h200/plan_model.py

Checks that v76's chunk is v72's on every mixed, uniform and random batch, and counts the plan's extra request
passes (halving passes, plus the second evening where the chunk changed) on the full grid and the mixed grid.
A model for predictions, not a test of the kernel.
"""
from __future__ import annotations

import importlib.util
import itertools
import pathlib
import random

_spec = importlib.util.spec_from_file_location(
    "plan_model_v72", pathlib.Path(__file__).parents[1] / "ab_v72_h200" / "plan_model.py")
v72 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(v72)
v67, ALIGN = v72.v67, v72.ALIGN


def plan_chunk_v76(prefixes: list[int], g: int) -> tuple[int, int]:
    """v76's chunk and its extra request passes over v71's plan."""
    work = [p + v67.TAIL for p in prefixes]
    first = max(v67.MIN_SPLIT, v67.round_up(-(-sum(work) // g), ALIGN))

    def fits(c: int) -> bool:
        n = v67.splits_at(work, c)
        return n <= g or n == len(work)

    chunk = first
    for _ in range(64):
        if fits(chunk) or chunk >= v67.MAX_CHUNK:
            break
        grown = v67.round_up(chunk * v67.splits_at(work, chunk) // g, ALIGN)
        chunk = grown if grown > chunk else chunk + ALIGN
    chunk = v67.even_chunk(work, chunk)
    if chunk > 2 * first:
        return v67.even_chunk(work, first), 0
    if chunk <= first:
        return chunk, 0
    unfit, fit, passes = first, chunk, 0
    while unfit + ALIGN < fit:
        mid = v67.round_up(unfit + (fit - unfit) // 2, ALIGN)
        passes += 1
        if fits(mid):
            fit = mid
        else:
            unfit = mid
    return (v67.even_chunk(work, fit), passes + 1) if fit != chunk else (chunk, passes)


def main() -> None:
    from kernel_ext import bench

    print("mixed grid (H/T, mix, chunk, extra passes v72 -> v76):")
    for (H, T), name in itertools.product(((8, 8), (8, 16), (16, 16)), bench.MIXES):
        g, p = v67.g_target(H, T), bench.MIXES[name]()
        (c72, n72), (c76, n76) = v72.plan_chunk_v72(p, g), plan_chunk_v76(p, g)
        assert c72 == c76, (H, T, name, c72, c76)
        if n72 or n76:
            print(f"  {H}/{T:<3} {name:16s} {c76:6d}  {n72} -> {n76}")
    full = [(H, T, B, P, v72.plan_chunk_v72([P] * B, v67.g_target(H, T))[1],
             plan_chunk_v76([P] * B, v67.g_target(H, T)))
            for H, T, B, P in itertools.product((8, 16), (8, 16, 32, 64), (1, 4, 16, 64), (1024, 4096, 16384, 65536))]
    for H, T, B, P, n72, (c76, n76) in full:
        assert c76 == v67.plan_chunk([P] * B, v67.g_target(H, T), True), (H, T, B, P)
    print("full grid shapes with extra passes (H, T, batch, prefix, v72 -> v76):",
          [(H, T, B, P, f"{n72}->{n76}") for H, T, B, P, n72, (_, n76) in full if n72 or n76])
    rng = random.Random(3)
    for _ in range(20000):
        g, B = rng.choice([132, 66, 44, 33, 16, rng.randint(1, 188)]), rng.randint(1, 200)
        prefixes = [rng.choice([rng.randint(0, 2000), rng.randint(0, 100000)]) for _ in range(B)]
        assert v72.plan_chunk_v72(prefixes, g)[0] == plan_chunk_v76(prefixes, g)[0], (g, prefixes)
    print("random batches: v76's chunk is v72's in 20000 of 20000")


if __name__ == "__main__":
    main()
