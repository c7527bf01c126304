"""Model of v69's work-item order (plan_work_item and order_last_splits in kernel_ext/csrc/verify_kernels.cuh).

    PYTHONPATH=. python3 results/ab_v69_h200/plan_model.py

v67's plan (results/ab_v67_h200/plan_model.py) gives the chunk. Where a call has more work items than G_target,
v69 orders them: full splits in request order, then the requests' last splits by 32 length buckets, longest
first. Prints, for the mixed grid, the end of list scheduling (64-key tiles) in request order, in v69's order, in
exact longest-first order, and for the even twin; then checks over random batches that v69's places are a
permutation of the work items. A model for predictions, not a test of the kernel.
"""
from __future__ import annotations

import importlib.util
import itertools
import pathlib
import random

_spec = importlib.util.spec_from_file_location(
    "plan_model_v67", pathlib.Path(__file__).parents[1] / "ab_v67_h200" / "plan_model.py")
v67 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(v67)

BUCKETS = 32


def last_split_bucket(work: int, splits: int, chunk: int) -> int:
    last, width = work - (splits - 1) * chunk, -(-chunk // BUCKETS)
    return BUCKETS - 1 - (last - 1) // width


def v69_places(prefixes: list[int], chunk: int) -> dict[tuple[int, int], int]:
    """(request, split) -> work item, as the device computes it where the call has more items than a wave."""
    work = [p + v67.TAIL for p in prefixes]
    n = [-(-w // chunk) for w in work]
    counts = [0] * BUCKETS
    for w, s in zip(work, n):
        counts[last_split_bucket(w, s, chunk)] += 1
    nxt = list(itertools.accumulate([sum(s - 1 for s in n)] + counts[:-1]))
    places, run = {}, 0
    for b, (w, s) in enumerate(zip(work, n)):
        for k in range(s - 1):
            places[b, k] = run + k
        run += s - 1
        bucket = last_split_bucket(w, s, chunk)
        places[b, s - 1] = nxt[bucket]
        nxt[bucket] += 1
    return places


def tiles(prefixes: list[int], chunk: int) -> dict[tuple[int, int], int]:
    """Tiles of each (request, split); the last split takes the tail's tile."""
    out = {}
    for b, p in enumerate(prefixes):
        s = -(-(p + v67.TAIL) // chunk)
        for k in range(s):
            begin = min(k * chunk, p)
            out[b, k] = -(-(min(begin + chunk, p) - begin) // 64) + (k == s - 1)
    return out


def main() -> None:
    from kernel_ext import bench

    print("H/T    mix               items  G   request order  v69 order  exact LPT  even twin")
    for (H, T), name in itertools.product(((8, 8), (8, 16), (16, 16)), bench.GRIDS["mixed"]["mix"]):
        lengths = bench.MIXES[name]()
        g = v67.g_target(H, T)
        chunk = v67.plan_chunk(lengths, g, True)
        t = tiles(lengths, chunk)
        in_order = [t[key] for key in sorted(t)]
        ends = [v67.list_schedule_end(in_order, g)]
        if len(t) > g:
            places = v69_places(lengths, chunk)
            ends.append(v67.list_schedule_end([t[key] for key in sorted(t, key=places.get)], g))
        else:
            ends.append(ends[0])  # one wave: v69 keeps request order
        ends.append(v67.list_schedule_end(sorted(in_order, reverse=True), g))
        twin = [round(sum(lengths) / len(lengths))] * len(lengths)
        twin_items, _ = v67.work_items(twin, v67.plan_chunk(twin, g, True))
        ends.append(v67.list_schedule_end(twin_items, g))
        print(f"{H}/{T:<4} {name:16s} {len(t):5d} {g:3d}  " + "  ".join(f"{e:11d}" for e in ends))
    rng = random.Random(0)
    for _ in range(20000):
        B, g = rng.randint(1, 200), rng.randint(1, 132)
        prefixes = [rng.choice([rng.randint(0, 300), rng.randint(0, 70000)]) for _ in range(B)]
        chunk = v67.plan_chunk(prefixes, g, True)
        places = v69_places(prefixes, chunk)
        assert sorted(places.values()) == list(range(len(places))), (B, g)
    print("v69's places are a permutation of the work items over 20000 random batches")


if __name__ == "__main__":
    main()
