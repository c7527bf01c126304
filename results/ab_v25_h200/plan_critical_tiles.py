"""Tiles of each shape's critical CTA under the v24 plan and the v25 plan, against the measured v25 / v24 times.

A model of plan_work_item (kernel_ext/csrc/verify_kernels.cuh) on 132 SMs with one CTA per SM: v24 splits a
request's prefix, v25 its prefix plus 64 keys for the draft tail. A CTA's tiles are its 64-key prefix tiles, plus
one when it takes the draft tail. Prints the shapes whose critical CTA changed, the time ratios of round 1 grouped
by that, then the shapes whose critical CTA holds more tiles than an even spread of all tiles would give.
Run from the repository root; the committed output is plan_critical_tiles.txt.
"""
import json
import statistics

SMS, TILE, SPLIT_ALIGN, MIN_SPLIT = 132, 64, 64, 128
HERE = "results/ab_v25_h200"


def ceil_div(x: int, m: int) -> int:
    return -(-x // m)


def round_up(x: int, m: int) -> int:
    return ceil_div(x, m) * m


def plan(prefixes: list[int], g_target: int, tail_keys: int) -> tuple[int, int, int]:
    """(tiles of the critical CTA, splits, chunk) for requests with these prefixes."""
    work = [p + tail_keys for p in prefixes]
    chunk = max(round_up(ceil_div(sum(work), g_target), SPLIT_ALIGN), MIN_SPLIT)
    for _ in range(64):
        count = sum(max(1, ceil_div(w, chunk)) for w in work)
        if count <= g_target or count == len(work) or chunk >= 1 << 30:
            break
        grown = round_up(chunk * count // g_target, SPLIT_ALIGN)
        chunk = grown if grown > chunk else chunk + SPLIT_ALIGN
    share = max([SPLIT_ALIGN] + [round_up(ceil_div(w, max(1, ceil_div(w, chunk))), SPLIT_ALIGN) for w in work])
    chunk = max(min(share, chunk), MIN_SPLIT)
    critical = splits = 0
    for p, w in zip(prefixes, work):
        n = max(1, ceil_div(w, chunk))
        splits += n
        for k in range(n):
            prefix_keys = min(k * chunk + chunk, p) - min(k * chunk, p)
            critical = max(critical, ceil_div(prefix_keys, TILE) + (k == n - 1))
    return critical, splits, chunk


def times(path: str) -> dict:
    rows = json.load(open(path))["rows"]
    return {(r["H"], r["T"], r["batch"], r["prefix"], r["mask"]): r["ours_us"] for r in rows if r.get("ours_us")}


def g_target(heads: int, drafts: int) -> int:
    return max(1, SMS // ceil_div(heads * drafts, 64))


def main() -> None:
    before, after = times(f"{HERE}/r1_v24_bench.json"), times(f"{HERE}/r1_v25b_bench.json")
    groups = {"same crit": [], "fewer": [], "more": []}
    for key in sorted(before):
        heads, drafts, batch, prefix, mask = key
        old = plan([prefix] * batch, g_target(heads, drafts), 0)
        new = plan([prefix] * batch, g_target(heads, drafts), TILE)
        ratio = after[key] / before[key]
        groups["same crit" if new[0] == old[0] else "fewer" if new[0] < old[0] else "more"].append(ratio)
        if mask == "tree" and new[0] != old[0]:
            print(key[:4], "old", old, "new", new, round(ratio, 3))
    for name, ratios in groups.items():
        if ratios:
            print(name, len(ratios), round(statistics.median(ratios), 3), round(min(ratios), 3), round(max(ratios), 3))
    print("--- gap to ideal")
    for key in sorted(before):
        heads, drafts, batch, prefix, mask = key
        if mask != "tree":
            continue
        g = g_target(heads, drafts)
        critical, splits, _ = plan([prefix] * batch, g, TILE)
        ideal = max(ceil_div(batch * (prefix // TILE + 1), g), 1)
        if critical > ideal:
            print(key[:4], "crit", critical, "ideal", ideal, "G", g, "splits", splits, round(after[key], 1))


if __name__ == "__main__":
    main()
