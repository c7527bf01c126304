"""v71 / v70 by group over call 1's rounds: the full grid's request-order shapes (2 B <= G_target) and
LONGEST_FIRST-instance shapes, and the mixed grid's mixes that can take the order. Usage: python3 compare_groups.py
[call1]"""
import gzip
import json
import math
import sys

FOLDER = sys.argv[1] if len(sys.argv) > 1 else "call1"


def times(variant, grid, round_):
    with gzip.open(f"{FOLDER}/ab_{variant}_{grid}_{round_}.json.gz") as handle:
        rows = json.load(handle)["rows"]
    return {(r["H"], r["T"], r["batch"], str(r["prefix"]), r["mask"]): r["ours_us"] for r in rows}


def g_target(H, T):
    """Work items per wave on 132 SMs: one per row tile of 64 rows."""
    return 132 // -(-H * T // 64)


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


for grid in ("full", "mixed"):
    rounds = [(times("v70", grid, r), times("v71", grid, r)) for r in (1, 2)]
    groups = {}
    for shape in rounds[0][0]:
        H, T, B, prefix, _ = shape
        longest_first = 2 * B > g_target(H, T)
        group = "LONGEST_FIRST instance" if longest_first else "request order"
        if grid == "mixed" and prefix.startswith("mix:") and longest_first:
            group += ", a mix the order may reorder"
        groups.setdefault(group, []).append(shape)
    for group, shapes in sorted(groups.items()):
        ratios = " ".join(f"{geomean([new[s] / old[s] for s in shapes]):.4f}" for old, new in rounds)
        print(f"{grid:5s} {group:45s} {len(shapes):3d} shapes  v71 / v70 by round: {ratios}")
        if "reorder" in group:
            for s in sorted(shapes):
                print("     ", "/".join(map(str, s[:3])), s[3],
                      "  ".join(f"{old[s]:.1f} -> {new[s]:.1f} ({new[s] / old[s]:.3f})" for old, new in rounds))
