"""Per-CTA timeline of v50's merge in the main kernel, from the raw phase marks of its diagnostic builds.

    python results/ab_v50_h200/merge_marks.py results/ab_v50_h200/call3/raw50b/marks_8_8_4_16384.npz ...

The v50 phase builds (v50.patch, v50b.patch) mark, per main-kernel CTA, in the combine's row of the marks: 0 the
rendezvous' start, 1 the role known (after the wait for the request's last partial), 3 the role + 1, 4 the slice
staged in shared memory, 5 the epoch advanced (the request's last CTA), 2 the merge's end. Times in us since the
call's first CTA entry: min / median / max over the CTAs, then the spans between the points.
"""
import sys

import numpy as np

POINTS = [("partial written", 0, 6), ("rendezvous start", 1, 0), ("role known", 1, 1), ("slice staged", 1, 4),
          ("merge end", 1, 2)]

for path in sys.argv[1:]:
    data = np.load(path)
    marks = data["marks"].astype(np.int64)  # [kernel][cta][slot][ns, clock] of the CTAs that marked anything
    merging = marks[1, :, 0, 0] > 0
    t0 = marks[0][marks[0, :, 0, 0] > 0][:, 0, 0].min()
    at = {name: (marks[k][merging][:, slot, 0] - t0) / 1e3 for name, k, slot in POINTS}
    roles = np.bincount(marks[1][merging][:, 3, 0].clip(0, 3), minlength=4)[1:]  # MergeRole + 1
    print(f"{path}: {merging.sum()} CTAs merge (left / own slice / last: {roles.tolist()})")
    for name, values in at.items():
        print(f"  {name:17s} min {values.min():7.2f}  median {np.median(values):7.2f}  max {values.max():7.2f}")
    role = marks[1][merging][:, 3, 0] - 1
    last = marks[1][merging][role == 2][:, 5, 0]  # (other CTAs may hold an earlier call's mark there)
    print(f"  epoch advanced at {np.round((last - t0) / 1e3, 2).tolist()[:8]}")
    for a, b in (("role known", "slice staged"), ("slice staged", "merge end")):
        span = at[b] - at[a]
        print(f"  {a} -> {b}: median {np.median(span):.2f}, max {span.max():.2f}")
