"""`cutover report`: Markdown + JSON + PNG plots of one shadow run, written into reports/<run_id>/.

Everything comes from the local run store (run.json, verdict.json, the run's stats records). Plots need
matplotlib (the `report` extra); without it the Markdown and JSON are still written and say why no plots.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from checks.gates import StatsSummary, hist_quantile
from cutover import jsonout
from cutover.hostprotocol.hostlayout import atomic_write_text
from cutover.workflow.runstore import RunStore

WORST_LAYERS_PLOTTED = 8
TRUTH_SOURCE_NAMES = {"graph": "CUDA-graph-replayed", "eager": "eager"}  # a truth sample's "source"


@dataclass
class ReportFiles:
    markdown: Path
    json: Path
    plots: list[Path] = field(default_factory=list)
    plot_note: str = ""


def _summarise(store: RunStore, meta: dict) -> tuple[StatsSummary, dict]:
    """Per-layer totals plus the time series the plots need."""
    summary = StatsSummary(
        generations=meta["generations"],
        truth_k=meta["policy"]["shadow"]["truth_anchor_k"],
        truth_floor=meta["policy"]["shadow"]["truth_anchor_floor"],
    )
    start = meta["started_at"]
    offsets = meta.get("clock_offsets_s") or {}  # host -> its clock minus the operator's (absent: older runs)
    worst = defaultdict(lambda: defaultdict(float))  # layer -> second since start -> p99 of that interval
    compared = defaultdict(int)  # second since start -> calls compared (all layers, hosts, ranks)
    truth = []
    for host, record in store.iter_stats():
        if not summary.add(host, record):
            continue
        second = round(record["ts"] - offsets.get(host, 0.0) - start)  # the host's time on the operator's clock
        for name, data in record.get("layers", {}).items():
            p99 = hist_quantile(data.get("rel_l2_hist") or [], 0.99, float(data.get("rel_l2_max", math.inf)))
            if p99 is not None:
                worst[name][second] = max(worst[name][second], p99)
            compared[second] += int(data.get("compared", 0))
        truth.extend({"host": host, "rank": record.get("rank"), **sample} for sample in record.get("truth", []))
    series = {
        "interval_p99": {k: sorted(v.items()) for k, v in worst.items()},
        "compared": sorted(compared.items()),
        "truth": truth,
    }
    return summary, series


def _layer_rows(summary: StatsSummary) -> list[dict]:
    rows = []
    for name, layer in summary.sorted_layers():
        rows.append(
            {
                "layer": name,
                "calls": layer.calls,
                "compared": layer.compared,
                "rel_l2_p99": layer.rel_l2_p99(),
                "rel_l2_max": layer.rel_l2_max,
                "worst_at": layer.worst_at,
                "max_abs": layer.max_abs,
                "nonfinite_custom": layer.nonfinite_custom,
                "nonfinite_stock": layer.nonfinite_stock,
                "truth_samples": layer.truth_samples,
                "truth_violations": layer.truth_violations,
                "truth_worst": layer.truth_worst,
            }
        )
    return rows


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _clock_line(meta: dict) -> str:
    """How the plots' times were put on one clock."""
    offsets = meta.get("clock_offsets_s")
    if not offsets:
        return "times: each host's own clock (this run recorded no clock offsets)"
    shown = ", ".join(f"{host} {offset:+.3f} s" for host, offset in sorted(offsets.items()))
    return f"times: seconds since the start on the operator's clock; host clocks ahead of it by {shown}"


def truth_sources(samples: list[dict]) -> str:
    """How many float64-anchored samples came from which kind of call (graph-replayed, eager)."""
    counts = Counter(sample.get("source", "eager") for sample in samples)
    parts = ", ".join(f"{counts[source]} from {TRUTH_SOURCE_NAMES.get(source, source)} calls"
                      for source in sorted(counts))
    return f"truth anchor: {len(samples)} float64-anchored sample(s)" + (f" ({parts})" if parts else "")


def _markdown(meta: dict, verdict, rows: list[dict], files: ReportFiles, skipped: int,
              truth: list[dict] | None = None) -> str:
    outcome = verdict.outcome.upper() if verdict else "NO VERDICT (run still going or interrupted)"
    lines = [
        f"# Shadow run {meta['run_id']}: {outcome}",
        "",
        f"* release: `{meta['release_id']}`",
        f"* hosts: {', '.join(meta['hosts'])}",
        (
            f"* started: {meta['started_at_utc']}; duration: {verdict.duration_s:.0f} s"
            if verdict
            else f"* started: {meta['started_at_utc']}"
        ),
        f"* policy: `{meta['policy']['source']}`; sample rate: every {meta['sample_rate']} verify call(s)",
        f"* kernel computing the custom path: {', '.join(meta.get('kernels') or ['unknown'])}",
        f"* {_clock_line(meta)}",
        f"* {truth_sources(truth or [])}",
        "",
        "## Verdict",
        "",
    ]
    lines += [f"* {reason}" for reason in (verdict.reasons if verdict else ["no verdict recorded"])]
    if skipped:
        lines.append(f"* {skipped} stored stats line(s) could not be parsed (cut short?) and were left out here")
    lines += [
        "",
        "## Per layer",
        "",
        "| layer | compared | rel-L2 p99 | rel-L2 max | worst at | max abs | non-finite custom/Triton "
        "| truth worst ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = row["truth_worst"]["ratio"] if row["truth_worst"] else None
        lines.append(
            f"| {row['layer']} | {row['compared']} | {_fmt(row['rel_l2_p99'])} | {_fmt(row['rel_l2_max'])} | "
            f"{row['worst_at'] or '-'} | {_fmt(row['max_abs'])} | {row['nonfinite_custom']}/{row['nonfinite_stock']} | "
            f"{_fmt(ratio)} |"
        )
    if not rows:
        lines.append("| - | no stats records | | | | | | |")
    if verdict and verdict.baseline:
        lines += ["", "## Server baseline during shadow (promote compares against it)", ""]
        lines += [f"* {host}: {json.dumps(values, sort_keys=True)}" for host, values in verdict.baseline.items()]
    lines += ["", "## Plots", ""]
    lines += [f"![{p.stem}]({p.relative_to(files.markdown.parent)})" for p in files.plots] or [f"_{files.plot_note}_"]
    return "\n".join(lines) + "\n"


def _plot(directory: Path, series: dict, rows: list[dict], k: float, floor: float) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    worst_layers = sorted(rows, key=lambda r: r["rel_l2_max"], reverse=True)[:WORST_LAYERS_PLOTTED]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for row in worst_layers:
        points = series["interval_p99"].get(row["layer"], [])
        ax.plot([p[0] for p in points], [max(p[1], 1e-9) for p in points], label=f"layer {row['layer']}")
    ax.set(
        yscale="log",
        xlabel="seconds since start",
        ylabel="rel-L2 p99 per interval (upper bound)",
        title=f"Divergence over time ({len(worst_layers)} worst layers)",
    )
    if worst_layers:
        ax.legend(fontsize="small")
    paths.append(_save(fig, directory / "divergence.png"))

    fig, ax = plt.subplots(figsize=(5.5, 5))
    stock = [s["err_stock"] for s in series["truth"]]
    custom = [s["err_custom"] for s in series["truth"]]
    ax.scatter(stock, custom, s=8)
    if stock:
        top = max(max(stock), 1e-9)
        ax.plot([0, top], [floor, k * top + floor], color="red", label=f"limit: {k} x Triton + {floor:g}")
        ax.legend(fontsize="small")
    ax.set(xlabel="Triton error vs float64", ylabel="custom error vs float64", title="Truth anchor samples")
    paths.append(_save(fig, directory / "truth_anchor.png"))

    fig, ax = plt.subplots(figsize=(9, 3.5))
    total, xs, ys = 0, [], []
    for second, count in series["compared"]:
        total += count
        xs.append(second)
        ys.append(total)
    ax.plot(xs, ys)
    ax.set(xlabel="seconds since start", ylabel="calls compared (cumulative)", title="Verify calls compared")
    paths.append(_save(fig, directory / "compared.png"))
    return paths


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def write_report(store: RunStore) -> ReportFiles:
    """Write report.md, report.json and plots/*.png for the run in `store`; return their paths."""
    meta = store.load_run()
    verdict = store.load_verdict()
    summary, series = _summarise(store, meta)
    rows = _layer_rows(summary)
    files = ReportFiles(markdown=store.dir / "report.md", json=store.dir / "report.json")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        files.plot_note = "plots skipped: matplotlib is not installed (pip install 'cutover[report]')"
    else:
        plots_dir = store.dir / "plots"
        plots_dir.mkdir(parents=True, exist_ok=True)
        shadow_policy = meta["policy"]["shadow"]
        files.plots = _plot(
            plots_dir, series, rows, shadow_policy["truth_anchor_k"], shadow_policy["truth_anchor_floor"]
        )
    document = {
        "run": meta,
        "verdict": json.loads(verdict.to_json()) if verdict else None,
        "totals": summary.totals(),
        "layers": rows,
        "series": series,  # the plots' data: seconds since the start on the operator's clock
        "plots": [str(p) for p in files.plots],
        "plot_note": files.plot_note,
        "unreadable_stats_lines": store.unreadable_lines,
    }
    atomic_write_text(str(files.json), jsonout.dumps(document, indent=2, sort_keys=True))
    atomic_write_text(str(files.markdown), _markdown(meta, verdict, rows, files, store.unreadable_lines,
                                                        series["truth"]))
    return files
