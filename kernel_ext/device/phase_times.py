"""Where a verify call's main kernel spends its time, per CTA: phase marks written by the kernel itself.

    python -m kernel_ext.build --arch sm_90a --define CUTOVER_PHASE_TIMES --out kernel_ext/build/phase
    CUTOVER_KERNEL_LIB=$PWD/kernel_ext/build/phase/libcutover_verify.so \\
        python kernel_ext/device/phase_times.py [--shapes "8,8,1,1024 8,8,4,16384"] [--json FILE] [--raw DIR]

The library built with CUTOVER_PHASE_TIMES (csrc/phase_clock.cuh) has thread 0 of each wgmma main-kernel CTA
write %globaltimer and clock64 at: entry, plan and request decoded, row ids of tiles 0-1 loaded, Q and tile 0
landed, the draft tail's tile landed, loop done, partial written; each combine block at entry, after its wait for
the main kernel, and when its last warp ends. Thread 0 also counts its tiles and sums its cycles at the top of
each: its copy wait, its wait for the previous tile's P V, and the barrier after them (a second table, in us per
tile). A shape is captured as in `kernel_ext.bench` (calls rotating through the index sets in one CUDA graph);
the marks are those of the graph's last call. Phase durations come from clock64 at the SM clock implied by the
CTAs' own cycle and nanosecond counts; times since the call's first CTA entry come from %globaltimer. Medians
over the replays; "crit" is the CTA that wrote its partial last.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
from pathlib import Path

import numpy as np
import torch

from kernel_ext import api
from kernel_ext.bench import Shape, parse_shapes, rotating
from kernel_ext.cudagraph import capture_graph

DEFAULT_SHAPES = "8,8,1,1024 8,8,1,65536 8,8,4,16384 8,8,16,4096 8,8,64,1024 16,64,1,1024 16,32,4,16384"
SLOTS, CTAS = 9, 4096  # kPhaseSlots, kPhaseCtas of csrc/phase_clock.cuh
MAIN_PHASES = ["plan+decode", "row ids", "Q+tile0", "prefix tiles", "tail tile", "epilogue"]
TILE_WAITS = ["copy wait", "P V wait", "barrier"]  # cycles in slots 7 (second word) and 8, per tile


def read_marks(lib) -> np.ndarray:
    """The marks [kernel][cta][slot][ns, clock] of the library's last calls (zeroed after reading)."""
    buf = np.zeros((2, CTAS, SLOTS, 2), dtype=np.uint64)
    if lib.cutover_debug_phase_times(ctypes.c_void_p(buf.ctypes.data)) != 0:
        raise RuntimeError(lib.cutover_last_error().decode())
    return buf


def one_call(marks: np.ndarray) -> dict:
    """Phases of one call from its marks: per-phase medians over the working CTAs and the critical CTA's."""
    main, comb = marks[0].astype(np.int64), marks[1].astype(np.int64)
    done = main[:, 6, 0] > 0
    m = main[done]
    mhz = np.median((m[:, 6, 1] - m[:, 0, 1]) / (m[:, 6, 0] - m[:, 0, 0]) * 1e3)
    t0 = m[:, 0, 0].min()
    # marks 0, 1, 2, 3 then 4 (tail tile landed; the loop's end for CTAs without the tail), 5, 6
    tail = np.where(m[:, 4, 1] > 0, m[:, 4, 1], m[:, 5, 1])
    clocks = np.stack([m[:, 0, 1], m[:, 1, 1], m[:, 2, 1], m[:, 3, 1], tail, m[:, 5, 1], m[:, 6, 1]], axis=1)
    phases_us = np.diff(clocks, axis=1) / mhz
    iterations = np.maximum(m[:, 7, 0], 1)
    waits_us = np.stack([m[:, 7, 1], m[:, 8, 0], m[:, 8, 1]], axis=1) / mhz / iterations[:, None]
    crit = int(np.argmax(m[:, 6, 0]))
    cb = comb[comb[:, 2, 0] > 0]
    main_end = m[:, 6, 0].max()
    return {
        "ctas": int(done.sum()), "sm_mhz": float(mhz),
        "entry_spread_us": float((m[:, 0, 0].max() - t0) / 1e3),
        "phase_median_us": dict(zip(MAIN_PHASES, np.median(phases_us, axis=0).round(2).tolist())),
        "crit_entry_us": float((m[crit, 0, 0] - t0) / 1e3),
        "crit_phase_us": dict(zip(MAIN_PHASES, phases_us[crit].round(2).tolist())),
        "crit_iterations": int(m[crit, 7, 0]),
        "tile_wait_median_us": dict(zip(TILE_WAITS, np.median(waits_us, axis=0).round(3).tolist())),
        "crit_tile_wait_us": dict(zip(TILE_WAITS, waits_us[crit].round(3).tolist())),
        "main_end_us": float((main_end - t0) / 1e3),
        "combine_blocks": int(len(cb)),
        "combine_wait_done_us": float((cb[:, 1, 0].min() - t0) / 1e3) if len(cb) else None,
        "combine_end_us": float((cb[:, 2, 0].max() - t0) / 1e3) if len(cb) else None,
    }


def measure(lib, spec: str, replays: int, raw_dir: Path | None = None) -> dict:
    H, T, batch, prefix = parse_shapes(spec)[0]
    shape = Shape(H, T, batch, prefix, "tree")
    graph = capture_graph(rotating(shape, lambda *a, ws=shape.workspace: api.verify_attention(*a, workspace=ws)),
                          calls=shape.sets)
    calls = []
    for _ in range(replays + 1):
        read_marks(lib)
        graph.replay()
        torch.cuda.synchronize()
        marks = read_marks(lib)
        calls.append(one_call(marks))
    if raw_dir is not None:  # the last replay's marks of the CTAs that wrote any, [kernel][cta][slot][ns, clock]
        raw_dir.mkdir(parents=True, exist_ok=True)
        used = np.flatnonzero((marks[:, :, 0, 0] > 0).any(axis=0))
        np.savez_compressed(raw_dir / f"marks_{spec.replace(',', '_')}.npz", cta=used, marks=marks[:, used])
    calls = calls[1:]  # the first replay warms the graph
    med = lambda key: round(statistics.median(c[key] for c in calls), 2)  # noqa: E731
    row = {"shape": spec, "sets": shape.sets, "ctas": calls[0]["ctas"], "sm_mhz": med("sm_mhz"),
           "entry_spread_us": med("entry_spread_us"), "crit_entry_us": med("crit_entry_us"),
           "main_end_us": med("main_end_us"), "crit_iterations": calls[0]["crit_iterations"],
           "combine_blocks": calls[0]["combine_blocks"]}
    for key, names in (("phase_median_us", MAIN_PHASES), ("crit_phase_us", MAIN_PHASES),
                       ("tile_wait_median_us", TILE_WAITS), ("crit_tile_wait_us", TILE_WAITS)):
        row[key] = {p: round(statistics.median(c[key][p] for c in calls), 3) for p in names}
    if calls[0]["combine_end_us"] is not None:
        row["combine_wait_done_us"], row["combine_end_us"] = med("combine_wait_done_us"), med("combine_end_us")
    del graph, shape
    torch.cuda.empty_cache()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES)
    parser.add_argument("--replays", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--raw", type=Path, help="also save each shape's per-CTA marks of its last replay here (.npz)")
    args = parser.parse_args()
    lib = ctypes.CDLL(os.environ["CUTOVER_KERNEL_LIB"])
    if not hasattr(lib, "cutover_debug_phase_times"):
        raise SystemExit("this library has no phase marks: build it with --define CUTOVER_PHASE_TIMES")
    lib.cutover_last_error.restype = ctypes.c_char_p
    rows = [measure(lib, spec, args.replays, args.raw) for spec in args.shapes.split()]
    if args.json:
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    print("times in us since the call's first CTA entry; phases of the critical CTA (median CTA in brackets)")
    print(f"{'shape':<14}{'CTAs':>5}{'iters':>6}{'entry':>7} " + " ".join(f"{p:>17}" for p in MAIN_PHASES)
          + f"{'main end':>9}{'comb wait':>10}{'comb end':>9}")
    for r in rows:
        cells = " ".join(f"{r['crit_phase_us'][p]:>7.2f} [{r['phase_median_us'][p]:>6.2f}]" for p in MAIN_PHASES)
        print(f"{r['shape']:<14}{r['ctas']:>5}{r['crit_iterations']:>6}{r['crit_entry_us']:>7.2f} {cells}"
              f"{r['main_end_us']:>9.2f}{r.get('combine_wait_done_us', float('nan')):>10.2f}"
              f"{r.get('combine_end_us', float('nan')):>9.2f}")
    print("thread 0's time at the top of each tile, us per tile, critical CTA [median CTA]")
    print(f"{'shape':<14}" + " ".join(f"{w:>17}" for w in TILE_WAITS))
    for r in rows:
        print(f"{r['shape']:<14}" + " ".join(
            f"{r['crit_tile_wait_us'][w]:>7.3f} [{r['tile_wait_median_us'][w]:>6.3f}]" for w in TILE_WAITS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
