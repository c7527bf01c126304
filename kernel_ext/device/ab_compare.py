"""Compare two same-run benchmark reports (bench.json of kernel_ext.bench): time ratio per shape, roofline fractions.

    python kernel_ext/device/ab_compare.py BASE/bench.json NEW/bench.json

A ratio below 1 means NEW is faster. Shapes are matched on (H, T, batch, prefix, mask) and grouped by issue 6's
classes (memory-bound: H x T <= 64; `kernel_ext.bench.shape_class`), so both reports group alike whatever
ceilings their processes measured. Run with the repository root on PYTHONPATH.
"""
from __future__ import annotations

import json
import statistics
import sys

from kernel_ext.bench import shape_class


def _rows(path: str) -> dict[tuple, dict]:
    rows = json.load(open(path))["rows"]
    return {(r["H"], r["T"], r["batch"], r["prefix"], r["mask"]): r for r in rows if r.get("ours_us")}


def _stats(values: list[float]) -> str:
    if not values:
        return "none"
    return f"median {statistics.median(values):.3f} min {min(values):.3f} max {max(values):.3f} (n={len(values)})"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    base, new = _rows(argv[0]), _rows(argv[1])
    shared = sorted(set(base) & set(new))
    ratio = {k: new[k]["ours_us"] / base[k]["ours_us"] for k in shared}
    print(f"time NEW / BASE over {len(shared)} shapes: {_stats(list(ratio.values()))}")
    print(f"  shapes >= 1 ms (base): {_stats([ratio[k] for k in shared if base[k]['ours_us'] >= 1000])}")
    for cls in ("memory", "compute"):
        keys = [k for k in shared if shape_class(base[k]) == cls]
        print(f"  {cls}-bound: {_stats([ratio[k] for k in keys])}")
        for name, rows in (("base", base), ("new", new)):
            fr = [rows[k]["roofline_fraction"] for k in keys]
            big = [rows[k]["roofline_fraction"] for k in keys if max(rows[k]["floor_mem_us"], rows[k]["floor_flop_us"]) >= 50]
            print(f"    {name} roofline: median {statistics.median(fr):.3f}; floor >= 50 us: "
                  f"{statistics.median(big) if big else float('nan'):.3f} (n={len(big)})")
    worst = sorted(shared, key=lambda k: -ratio[k])[:5]
    best = sorted(shared, key=lambda k: ratio[k])[:5]
    for title, keys in (("slowest", worst), ("fastest", best)):
        print(f"  {title}: " + "; ".join(f"{k[0]}/{k[1]}/{k[2]}/{k[3]}/{k[4]} {base[k]['ours_us']:.0f}->{new[k]['ours_us']:.0f}"
                                         for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
