"""The benchmark's report: per-shape roofline fraction and speedup over SGLang's kernels as JSON, a Markdown table
and a plot.

    python -m kernel_ext.bench_report RUN.json [RUN.json ...] --out benchmarks/h200 [--set sglang=0.5.23 ...]

Each RUN.json is a `bench.json` that `python -m kernel_ext.bench` wrote (one grid), or a report this module wrote
(its runs are read back, so a report regenerates itself). All runs must come from one GPU. `--set KEY=VALUE` adds
a field a run did not record (e.g. the SGLang version or the driver, from the GPU machine's `nvidia-smi`); a field
the run recorded is never overwritten. Writes OUT/bench.json (every run: GPU, versions, the ceilings it measured,
its rows and summary), OUT/bench.md and OUT/bench.png. `kernel_ext.bench` writes its own --out folder through
`write_report` too. Needs no GPU and no torch; the plot needs matplotlib.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

MEMORY_BOUND_MAX_HT = 64  # the targets' classes: H x T <= 64 memory-bound, larger compute-bound
ROW_KEYS = ("H", "T", "batch", "prefix", "mask", "ours_us", "roofline_fraction", "floor_mem_us", "floor_flop_us")
RUN_KEYS = ("gpu", "torch", "triton", "copy_gbs", "matmul_tflops", "rows")
VERSION_KEYS = ("torch", "triton", "sglang", "cuda", "driver")


class BenchReportError(ValueError):
    """A run file that cannot be reported: the message names the file, the problem and the fix."""


def shape_class(row: dict) -> str:
    """A shape's class for the roofline medians: "memory" where H x T <= 64, else "compute". The larger floor at a
    run's ceilings (`bound`) agrees except on the ridge (H x T = 128 with P 1024, whose two floors are within 1 %),
    where it flips with the measured ceilings; the class does not."""
    return "memory" if row["H"] * row["T"] <= MEMORY_BOUND_MAX_HT else "compute"


def is_mix(row: dict) -> bool:
    """A batch of mixed prefix lengths or its even twin (the mixed grid's rows)."""
    return str(row["prefix"]).startswith(("mix:", "even:"))


def summarise(rows: list[dict]) -> dict:
    """Medians and minima of a run: speedups over SGLang's kernels (overall and per batch size), roofline fractions
    per class."""
    speed = [r["speedup_vs_triton"] for r in rows if r.get("speedup_vs_triton")]
    mem = [r["roofline_fraction"] for r in rows if shape_class(r) == "memory"]
    comp = [r["roofline_fraction"] for r in rows if shape_class(r) == "compute"]
    shared = [r["speedup_vs_shared"] for r in rows if r.get("speedup_vs_shared")]
    med = lambda v: round(statistics.median(v), 3) if v else None  # noqa: E731
    by_batch = {}
    for r in rows:
        if r.get("speedup_vs_triton"):
            by_batch.setdefault(str(r["batch"]), []).append(r["speedup_vs_triton"])
    return dict(median_speedup_vs_shared=med(shared), min_speedup_vs_shared=min(shared) if shared else None,
                shared_failed=sum(1 for r in rows if r.get("shared_error")),
                median_speedup=statistics.median(speed) if speed else float("nan"),
                min_speedup=min(speed) if speed else float("nan"),
                median_speedup_by_batch={b: med(v) for b, v in sorted(by_batch.items(), key=lambda kv: int(kv[0]))},
                median_roof_memory=med(mem), median_roof_compute=med(comp),
                min_roof_memory=min(mem) if mem else None, min_roof_compute=min(comp) if comp else None)


def _check_run(run: dict, path: Path) -> dict:
    missing = [k for k in RUN_KEYS if k not in run]
    bad_rows = [i for i, r in enumerate(run.get("rows", [])) if any(k not in r for k in ROW_KEYS)]
    if missing or bad_rows or not run.get("rows"):
        raise BenchReportError(
            f"{path}: not a benchmark run (missing {missing or 'nothing'}; rows without {list(ROW_KEYS)}: "
            f"{bad_rows[:5] or 'none'}; {len(run.get('rows', []))} rows): give the bench.json that "
            "`python -m kernel_ext.bench` wrote")
    return run


def load_runs(paths: list[Path]) -> list[dict]:
    """Every run of the given files (a benchmark's bench.json, or a report's runs); BenchReportError names a file
    that is missing, not JSON, or not a run, and runs of more than one GPU."""
    runs = []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise BenchReportError(f"{path}: cannot read it as JSON ({exc}): give the bench.json that "
                                   "`python -m kernel_ext.bench` wrote") from None
        found = data.get("runs", [data]) if isinstance(data, dict) else [None]
        runs += [_check_run(run if isinstance(run, dict) else {}, path) for run in found]
    gpus = sorted({run["gpu"] for run in runs})
    if len(gpus) > 1:
        raise BenchReportError(f"runs of {len(gpus)} GPUs ({', '.join(gpus)}): a report holds one GPU's benchmark; "
                               "report each GPU into its own folder")
    return runs


def run_title(run: dict) -> str:
    """The run's grid as recorded, else named by its shapes."""
    return run.get("grid") or ("mixed" if any(is_mix(r) for r in run["rows"]) else "full")


def report_document(runs: list[dict]) -> dict:
    """The report's JSON: the GPU and every run with its summary recomputed from its rows."""
    return dict(gpu=runs[0]["gpu"], runs=[dict(run, grid=run_title(run), summary=summarise(run["rows"]))
                                          for run in runs])


def _fmt(value, spec="{:.1f}") -> str:
    return "-" if value is None else spec.format(value)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def run_markdown(run: dict) -> list[str]:
    """One run's section: versions, ceilings, summary and the per-shape tables."""
    s = run["summary"]
    versions = ", ".join(f"{k} {run[k]}" for k in VERSION_KEYS if run.get(k))
    by_batch = " / ".join(f"{_fmt(v)}x" for v in s["median_speedup_by_batch"].values())
    lines = [f"## {run_title(run)} grid ({len(run['rows'])} shapes)", "",
             f"{run['gpu']}; {versions}. Ceilings measured in this run: device copy {run['copy_gbs']:.0f} GB/s, "
             f"bf16 matmul {run['matmul_tflops']:.0f} TFLOP/s. Ours with early start "
             f"{'on' if run.get('early_start', True) else 'off'}.", "",
             "| figure | median | min |", "|---|---|---|",
             f"| x SGLang `extend_attention_fwd` | {_fmt(s['median_speedup'])}x | {_fmt(s['min_speedup'])}x |",
             f"| ... by batch {' / '.join(s['median_speedup_by_batch'])} | {by_batch} | |",
             *([f"| x SGLang `verify_shared_kv_fwd` (chains it serves; it fails on {s['shared_failed']}) | "
                f"{_fmt(s['median_speedup_vs_shared'], '{:.2f}')}x | {_fmt(s['min_speedup_vs_shared'], '{:.2f}')}x |"]
               if s["median_speedup_vs_shared"] is not None else []),
             f"| roofline fraction, memory-bound (H x T <= 64) | {_pct(s['median_roof_memory'])} | "
             f"{_pct(s['min_roof_memory'])} |",
             f"| roofline fraction, compute-bound | {_pct(s['median_roof_compute'])} | {_pct(s['min_roof_compute'])} |",
             "", "| H | T | batch | prefix | mask | ours us | triton us | shared us | x triton | floor us | bound | "
             "% roofline |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in run["rows"]:
        lines.append(f"| {r['H']} | {r['T']} | {r['batch']} | {r['prefix']} | {r['mask']} | {r['ours_us']:.1f} | "
                     f"{_fmt(r.get('triton_us'))} | {_fmt(r.get('shared_us'))} | {_fmt(r.get('speedup_vs_triton'))} | "
                     f"{max(r['floor_mem_us'], r['floor_flop_us']):.1f} | {r.get('bound', '-')} | "
                     f"{100 * r['roofline_fraction']:.0f} |")
    mixes = [r for r in run["rows"] if "mix_cost" in r]
    if mixes:
        lines += ["", "Each mix beside its even twin (the same batch and keys, every prefix alike):", "",
                  "| H | T | batch | mix | keys | longest prefix | ours us | x its even twin |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['H']} | {r['T']} | {r['batch']} | {r['prefix'][4:]} | {r.get('keys', '-')} | "
                  f"{r.get('longest_prefix', '-')} | {r['ours_us']:.1f} | {r['mix_cost']:.2f} |" for r in mixes]
    return lines + [""]


def markdown(document: dict) -> str:
    lines = [f"# Verify kernel benchmark: {document['gpu']}", "",
             "Roofline bound of a call: max(minimum bytes / device copy rate, FLOPs / bf16 matmul rate), both rates "
             "measured in the same run. Written by `python -m kernel_ext.bench_report` (docs/perf.md says how to "
             "reproduce it).", ""]
    for run in document["runs"]:
        lines += run_markdown(run)
    return "\n".join(lines)


def plot(document: dict, path: Path) -> None:
    """Speedup over SGLang's `extend_attention_fwd` and roofline fraction of every shape against its floor."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for run in document["runs"]:
        for cls, colour in (("memory", "tab:blue"), ("compute", "tab:orange")):
            rows = [r for r in run["rows"] if shape_class(r) == cls]
            mixed = run_title(run) == "mixed"
            label = f"{run_title(run)} grid, {cls}-bound"
            floors = [max(r["floor_mem_us"], r["floor_flop_us"]) for r in rows]
            style = dict(color=colour, marker="x" if mixed else "o", s=18, alpha=0.8, label=label)
            speed = [(f, r["speedup_vs_triton"]) for f, r in zip(floors, rows) if r.get("speedup_vs_triton")]
            if speed:
                axes[0].scatter(*zip(*speed), **style)
            if rows:
                axes[1].scatter(floors, [100 * r["roofline_fraction"] for r in rows], **style)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("speedup (SGLang time / ours)")
    axes[0].set_title("speedup vs SGLang's Triton extend_attention_fwd")
    axes[1].set_ylabel("% of the roofline bound")
    axes[1].set_ylim(0, 100)
    axes[1].set_title("roofline fraction")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("the call's roofline floor (us)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"verify kernel, {document['gpu']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_json(runs: list[dict], out: Path) -> dict:
    """OUT/bench.json of the runs (the file a benchmark cut short keeps); the report document."""
    out.mkdir(parents=True, exist_ok=True)
    document = report_document(runs)
    _replace(out / "bench.json", json.dumps(document, indent=1) + "\n")
    return document


def write_report(runs: list[dict], out: Path) -> dict:
    """OUT/bench.json, OUT/bench.md and OUT/bench.png of the runs; the report document. Without matplotlib the
    plot is left out with a message (a serving environment may lack it)."""
    document = write_json(runs, out)
    _replace(out / "bench.md", markdown(document))
    try:
        plot(document, out / "bench.png")
    except ImportError:
        print("bench.png not drawn: matplotlib is not installed (pip install 'cutover[report]')", file=sys.stderr)
    return document


def _parse_sets(items: list[str]) -> dict:
    fields = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BenchReportError(f"--set {item!r} is not KEY=VALUE (e.g. --set sglang=0.5.23)")
        fields[key] = value
    return fields


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="bench.json of kernel_ext.bench, or a report's")
    parser.add_argument("--out", type=Path, required=True, help="the report's folder, e.g. benchmarks/h200")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a field the runs did not record (never overwrites one they did)")
    args = parser.parse_args(argv)
    try:
        extra = _parse_sets(args.set)
        runs = [{**run, **{k: v for k, v in extra.items() if run.get(k) is None}} for run in load_runs(args.runs)]
    except BenchReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    document = write_report(runs, args.out)
    for run in document["runs"]:
        s = run["summary"]
        print(f"{run['grid']}: {len(run['rows'])} shapes, median x{s['median_speedup']:.1f} vs SGLang; roofline "
              f"memory-bound {_pct(s['median_roof_memory'])}, compute-bound {_pct(s['median_roof_compute'])}")
    print("wrote " + ", ".join(str(args.out / n) for n in ("bench.json", "bench.md", "bench.png")
                               if (args.out / n).exists()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
