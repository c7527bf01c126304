"""ncu's duration of the main kernel and the combine, each on its own, for one benchmark batch and several builds.

    python3 kernel_ext/device/ncu_mix.py --out DIR 8 8 mix:1x65536+63x1024 lib/v75.so lib/v76.so

The batch is a mix of `kernel_ext.bench.MIXES` ("mix:<name>") or its even twin ("even:<name>", every prefix the
mix's mean). Each build runs three calls under ncu (serialised, caches flushed, base clock: compare within one
table only); the last call's kernels are reported. Raw CSVs go to DIR/ncu_<build>_<kind>_<name>.csv.
`run` is what ncu profiles: `python3 kernel_ext/device/ncu_mix.py run 8 8 mix:<name>`.
"""
from __future__ import annotations

import argparse
import csv
import os
import pathlib
import subprocess
import sys

UNIT_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
KINDS = ("main", "combine")


def run_calls(H: int, T: int, batch: str) -> None:
    """Three calls of the batch on the library CUTOVER_KERNEL_LIB names."""
    import torch

    from kernel_ext import api
    from kernel_ext.bench import Shape, grid_shapes

    twins = grid_shapes(dict(H=(H,), T=(T,), mix=(batch.partition(":")[2],), mask=("tree",)))
    _, _, size, _, mask, prefixes = next(s for s in twins if s[3] == batch)
    shape = Shape(H, T, size, batch, mask, prefixes=prefixes)
    for i in range(3):
        api.verify_attention(*shape.args(i % shape.sets), workspace=shape.workspace)
    torch.cuda.synchronize()


def kernel_durations(csv_path: pathlib.Path) -> dict[str, float]:
    """The last main-kernel and combine durations (us) in an ncu CSV."""
    durations = {}
    for row in csv.reader(csv_path.read_text().splitlines()):
        if len(row) > 10 and row[0].isdigit():
            kind = "combine" if "combine" in row[4] else "main"
            durations[kind] = float(row[-1].replace(",", "")) * UNIT_US[row[-2]]
    return durations


def profile(out: pathlib.Path, H: int, T: int, batch: str, libs: list[str]) -> None:
    """Profile the batch on each build and print a table."""
    out.mkdir(parents=True, exist_ok=True)
    print(f"ncu at {H}/{T} {batch}")
    for lib in libs:
        build = pathlib.Path(lib).stem
        csv_path = out / f"ncu_{build}_{batch.replace(':', '_')}.csv"
        cmd = ["ncu", "--csv", "--metrics", "gpu__time_duration.sum", "--kernel-name",
               "regex:verify_(wgmma|main|combine)", sys.executable, __file__, "run", str(H), str(T), batch]
        env = dict(os.environ, CUTOVER_KERNEL_LIB=os.path.realpath(lib))
        with csv_path.open("w") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=120).returncode
        d = kernel_durations(csv_path)
        cells = [f"{kind} " + (f"{d[kind]:8.1f} us" if kind in d else "  none, see the CSV") for kind in KINDS]
        print(f"  {build:12} " + "  ".join(cells) + (f"  (ncu rc={rc})" if rc else ""))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        run_calls(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=pathlib.Path, required=True)
    p.add_argument("H", type=int)
    p.add_argument("T", type=int)
    p.add_argument("batch", help="mix:<name> or even:<name> (kernel_ext.bench.MIXES)")
    p.add_argument("libs", nargs="+", help="library builds (.so)")
    a = p.parse_args()
    from kernel_ext.bench import MIXES

    kind, _, name = a.batch.partition(":")
    if kind not in ("mix", "even") or name not in MIXES:
        p.error(f"batch {a.batch!r}: expected mix:<name> or even:<name>, <name> one of {', '.join(MIXES)}")
    profile(a.out, a.H, a.T, a.batch, a.libs)


if __name__ == "__main__":
    main()
