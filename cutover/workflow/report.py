"""`cutover report`: Markdown + JSON + PNG plots of one shadow run, written into reports/<run_id>/.

Everything comes from the local run store (run.json, verdict.json, the run's stats records, and promote.jsonl: the
watch of a `cutover promote` that relied on this run, run from the same reports directory). Plots need
matplotlib (the `report` extra); without it the Markdown and JSON are still written and say why no plots.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from checks.gates import RankObservation, StatsSummary, compared_progress, gauges, hist_quantile, rank_share
from checks.policy import ShadowPolicy
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
    counted = []  # (second, host, rank, layer, calls compared)
    truth = []
    for host, record in store.iter_stats():
        if not summary.add(host, record):
            continue
        second = round(record.ts - offsets.get(host, 0.0) - start)  # the host's time on the operator's clock
        for name, data in record.layers.items():
            p99 = hist_quantile(list(data.rel_l2_hist), 0.99, data.rel_l2_max)
            if p99 is not None:
                worst[name][second] = max(worst[name][second], p99)
            compared[second] += data.compared
            counted.append((second, host, record.rank, name, data.compared))
        truth.extend({"host": host, "rank": record.rank, **sample} for sample in record.truth)
    series = {
        "interval_p99": {k: sorted(v.items()) for k, v in worst.items()},
        "compared": sorted(compared.items()),
        "slowest_compared": _slowest_over_time(counted),
        "truth": truth,
    }
    return summary, series


def _slowest_over_time(counted: list[tuple[int, str, int, str, int]]) -> dict[str, list[tuple[int, int]]]:
    """Per host, second by second: the fewest calls any of its ranks has compared so far in any layer (what the
    volume gate judges against each rank's share)."""
    layers = {layer for *_, layer, _ in counted}
    ranks: dict[str, set[int]] = defaultdict(set)
    for _, host, rank, _, _ in counted:
        ranks[host].add(rank)
    running: dict[tuple[str, int, str], int] = defaultdict(int)
    slowest: dict[str, list[tuple[int, int]]] = defaultdict(list)
    ordered = sorted(counted)
    for index, (second, host, rank, layer, count) in enumerate(ordered):
        running[(host, rank, layer)] += count
        if index + 1 < len(ordered) and ordered[index + 1][0] == second:
            continue  # the second's last record closes it
        for name, rank_ids in ranks.items():
            slowest[name].append((second, min(running[(name, r, lay)] for r in rank_ids for lay in layers)))
    return dict(slowest)


def _layer_rows(summary: StatsSummary) -> list[dict]:
    rows = []
    for name, layer in summary.sorted_layers():
        rows.append(
            {
                "layer": name,
                "calls": layer.calls,
                "compared": layer.compared,
                "rel_l2_p99": layer.rel_l2_p99(),
                "rel_l2_p99_low": (layer.rel_l2_p99_bounds() or (None, None))[0],
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


def _figure(value: float | None) -> str:
    """A server figure (a rate, an accept length, a count): whole from 100 up, else 3 significant digits."""
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


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


def _sandbox_label(meta: dict) -> str:
    """"SANDBOX (...)" when the run's hosts include sandbox hosts, else ""."""
    hosts = meta.get("sandbox_hosts") or []
    if not hosts:
        return ""
    which = "" if sorted(hosts) == sorted(meta["hosts"]) else f" ({', '.join(hosts)})"
    return f"SANDBOX{which}: a stand-in for SGLang, not a model"


def _p99(row: dict) -> str:
    """The bucket that holds the p99 (its upper edge capped at the layer's max: it equals the max when the top
    calls share the max's bucket)."""
    if row["rel_l2_p99"] is None:
        return "-"
    return f"{_fmt(row['rel_l2_p99_low'])} - {_fmt(row['rel_l2_p99'])}"


def _gate_rows(meta: dict, summary: StatsSummary, verdict) -> list[str]:
    """Each gate with the run's observed value and the policy's threshold side by side."""
    policy = ShadowPolicy(**meta["policy"]["shadow"])
    rows = [f"| {name} | {_fmt(seen)} | <= {limit:g} | "
            f"{'-' if seen is None else ('ok' if seen <= limit else '**over**')} |"
            for name, seen, limit in gauges(policy, summary)]
    ranks = [RankObservation(host, rank, None, None) for host, rank in sorted(summary.rank_compared)]
    for host, (count, share) in compared_progress(policy, summary, ranks).items():
        rows.append(f"| compared calls, {host} (slowest rank and layer) | {count} | >= {share} per rank "
                    f"({policy.min_compared_calls} per host) | {'ok' if count >= share else '**short**'} |")
    if verdict:
        rows.append(f"| duration | {verdict.duration_s:.0f} s | >= {policy.min_duration_s:g} s | "
                    f"{'ok' if verdict.duration_s >= policy.min_duration_s else '**short**'} |")
    return ["| gate | observed | threshold | |", "|---|---|---|---|", *rows]


BASELINE_COLUMNS = (("verify_rate", "verify steps/s"), ("error_rate", "errors/s"), ("accept_length", "accept length"),
                    ("tokens_per_s", "tokens/s"), ("samples", "probes"))
SERVED_FIGURES = (("verify_rate", "verify steps/s"), ("accept_length", "accept length"), ("tokens_per_s", "tokens/s"))


def _baseline_rows(baseline: dict) -> list[str]:
    lines = ["| host | " + " | ".join(label for _, label in BASELINE_COLUMNS) + " | note |",
             "|---" * (len(BASELINE_COLUMNS) + 2) + "|"]
    for host, values in sorted(baseline.items()):
        cells = [_figure(values.get(key)) for key, _ in BASELINE_COLUMNS]
        lines.append(f"| {host} | {' | '.join(cells)} | {values.get('verify_rate_note') or ''} |")
    return lines


def _promote_watch(records: list[dict]) -> dict[str, dict]:
    """Per host, the promote watch recorded beside this run: its probes, its figures on Triton right before the
    flip (None where the record or the server has none) and how it ended."""
    watches: dict[str, dict] = {}
    for record in records:
        watch = watches.setdefault(record["host"], {"ticks": [], "outcome": "watch cut off", "reason": "",
                                                    **{f"triton_{key}": None for key, _ in SERVED_FIGURES}})
        if "outcome" in record:
            watch.update(outcome=record["outcome"], reason=record["reason"])
        elif "triton_verify_rate" in record:
            watch.update({f"triton_{key}": record.get(f"triton_{key}") for key, _ in SERVED_FIGURES})
        else:
            watch["ticks"].append(record)
    return watches


def _promote_rows(watches: dict[str, dict]) -> list[str]:
    """The promote watch beside the shadow run: how each host's watch ended, then what the cutover bought."""
    lines = ["", "## Promote watch (after this run passed)", "",
             "| host | outcome | watched | verify steps/s rollback below | new errors | new non-finite |",
             "|---|---|---|---|---|---|"]
    for host, watch in sorted(watches.items()):
        last = watch["ticks"][-1] if watch["ticks"] else {}
        base = last.get("base_verify_rate")
        floor = base * last["min_verify_rate_ratio"] if base else None
        outcome = watch["outcome"] + (f": {watch['reason']}" if watch["reason"] else "")
        lines.append(f"| {host} | {outcome} | {last.get('elapsed_s', 0):.0f} of {last.get('watch_s', 0):.0f} s | "
                     f"{_fmt(floor)} | {_fmt(last.get('new_errors'))} | {_fmt(last.get('new_nonfinite'))} |")
    return lines + _bought_rows(watches)


def _bought_rows(watches: dict[str, dict]) -> list[str]:
    """Per host and figure: on Triton right before the flip, in shadow (the baseline) and after the flip (the
    watch's last value), with the change after the flip against Triton; "-" where the server exposed none."""
    lines = ["", "### What the cutover bought", "",
             "| host | figure | on Triton (before the flip) | in shadow | after the flip (last) | after vs Triton |",
             "|---|---|---|---|---|---|"]
    for host, watch in sorted(watches.items()):
        last = watch["ticks"][-1] if watch["ticks"] else {}
        for key, label in SERVED_FIGURES:
            triton, after = watch[f"triton_{key}"], _last_value(watch["ticks"], key)
            lines.append(f"| {host} | {label} | {_figure(triton)} | {_figure(last.get(f'base_{key}'))} | "
                         f"{_figure(after)} | {_change(triton, after)} |")
    return lines


def _last_value(ticks: list[dict], key: str) -> float | None:
    """The last value of `key` the watch's probes gave (None when none did, or the records predate it)."""
    values = [tick[key] for tick in ticks if tick.get(key) is not None]
    return values[-1] if values else None


def _change(before: float | None, after: float | None) -> str:
    """`after` against `before` in percent ("-" without both, or from nothing)."""
    if before is None or after is None or before <= 0:
        return "-"
    return f"{100 * (after / before - 1):+.0f} %"


def _markdown(meta: dict, verdict, rows: list[dict], summary: StatsSummary, files: ReportFiles, skipped: int,
              watches: dict[str, dict], truth: list[dict]) -> str:
    outcome = verdict.outcome.upper() if verdict else "NO VERDICT (run still going or interrupted)"
    sandbox = _sandbox_label(meta)
    lines = [
        f"# Shadow run {meta['run_id']}: {outcome}" + (" (SANDBOX)" if sandbox else ""),
        "",
        *([f"**{sandbox}.**", ""] if sandbox else []),
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
    lines += ["", "## Gates: observed against threshold", "", *_gate_rows(meta, summary, verdict)]
    lines += [
        "",
        "## Per layer",
        "",
        "rel-L2 p99: the histogram bucket that holds it (4 buckets a decade), its upper edge capped at the layer's "
        "max; the gate judges the upper edge.",
        "",
        "| layer | compared | rel-L2 p99 | rel-L2 max | worst at | max abs | non-finite custom/Triton "
        "| truth worst ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = row["truth_worst"]["ratio"] if row["truth_worst"] else None
        lines.append(
            f"| {row['layer']} | {row['compared']} | {_p99(row)} | {_fmt(row['rel_l2_max'])} | "
            f"{row['worst_at'] or '-'} | {_fmt(row['max_abs'])} | {row['nonfinite_custom']}/{row['nonfinite_stock']} | "
            f"{_fmt(ratio)} |"
        )
    if not rows:
        lines.append("| - | no stats records | | | | | | |")
    if verdict and verdict.baseline:
        lines += ["", "## Server baseline during shadow (promote compares against it)", ""]
        lines += _baseline_rows(verdict.baseline)
    if watches:
        lines += _promote_rows(watches)
    lines += ["", "## Plots", ""]
    lines += [f"![{p.stem}]({p.relative_to(files.markdown.parent)})" for p in files.plots] or [f"_{files.plot_note}_"]
    return "\n".join(lines) + "\n"


def _plot(directory: Path, series: dict, rows: list[dict], meta: dict, summary: StatsSummary,
          watches: dict[str, dict]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    policy = ShadowPolicy(**meta["policy"]["shadow"])
    heading = f"run {meta['run_id']} | hosts {', '.join(meta['hosts'])}"
    sandbox = _sandbox_label(meta)
    paths = []

    def figure(size, title, panels=1):
        """A figure of `panels` stacked axes sharing x, labelled with the run; returns it and its axes."""
        fig, axes = plt.subplots(panels, 1, figsize=size, sharex=True, squeeze=False)
        fig.suptitle(heading + ("\n" + sandbox if sandbox else ""), fontsize="small",
                     color="darkred" if sandbox else "black")
        axes[0][0].set_title(title)
        for ax in axes[:, 0]:
            ax.xaxis.set_major_locator(MaxNLocator(6))
            ax.yaxis.set_major_locator(MaxNLocator(6))
            ax.ticklabel_format(axis="both", style="sci", scilimits=(-2, 4))
        return fig, list(axes[:, 0])

    worst_layers = sorted(rows, key=lambda r: r["rel_l2_max"], reverse=True)[:WORST_LAYERS_PLOTTED]
    fig, (ax,) = figure((9, 4.8), f"Divergence over time ({len(worst_layers)} worst layers)")
    for row in worst_layers:
        points = series["interval_p99"].get(row["layer"], [])
        ax.plot([p[0] for p in points], [p[1] for p in points], label=f"layer {row['layer']}")
    ax.axhline(policy.rel_l2_p99, color="black", linestyle="--", label=f"p99 gate {policy.rel_l2_p99:g}")
    ax.axhline(policy.rel_l2_max, color="black", linestyle=":", label=f"max gate {policy.rel_l2_max:g}")
    ax.set(xlabel="seconds since start", ylabel="rel-L2 p99 per interval (upper bound)", ylim=(0, None))
    _legend(ax, "center right")
    paths.append(_save(fig, directory / "divergence.png"))

    fig, (ax,) = figure((6, 5.5), "Truth anchor samples")
    stock = [s["err_stock"] for s in series["truth"]]
    custom = [s["err_custom"] for s in series["truth"]]
    ax.scatter(stock, custom, s=8, label="samples")
    top = max(stock, default=0.0) or 1e-3
    ax.plot([0, top], [policy.truth_anchor_floor, policy.truth_anchor_k * top + policy.truth_anchor_floor],
            color="red", label=f"limit: {policy.truth_anchor_k} x Triton + {policy.truth_anchor_floor:g}")
    _legend(ax, "best")
    ax.set(xlabel="Triton error vs float64", ylabel="custom error vs float64", xlim=(0, None), ylim=(0, None))
    if not stock:
        ax.text(0.5, 0.5, "no float64-anchored sample in this run", transform=ax.transAxes, ha="center")
    paths.append(_save(fig, directory / "truth_anchor.png"))

    fig, (ax,) = figure((9, 4), "Calls compared per rank in its slowest layer, against the minimum")
    for host, points in sorted(series["slowest_compared"].items()):
        ax.step([p[0] for p in points], [p[1] for p in points], where="post", label=host)
    for ranks in sorted(set(Counter(host for host, _ in summary.rank_compared).values())):
        ax.axhline(rank_share(policy, ranks), color="red", linestyle="--",
                   label=f"minimum per rank ({policy.min_compared_calls} per host / {ranks} ranks)")
    ax.set(xlabel="seconds since start", ylabel="calls compared", ylim=(0, None))
    _legend(ax, "lower right")
    paths.append(_save(fig, directory / "compared.png"))
    if watches:
        paths.append(_plot_promote(figure, directory, watches))
    return paths


def _plot_promote(figure, directory: Path, watches: dict[str, dict]) -> Path:
    """Verify steps/s, accept length and tokens/s after the flip, per host, against its shadow baseline and its
    figure on Triton right before the flip; verify steps/s also against the rollback floor."""
    fig, axes = figure((12, 9), "Promote watch: after the flip, on Triton before it, in shadow", len(SERVED_FIGURES))
    for ax, (key, label) in zip(axes, SERVED_FIGURES):
        for index, (host, watch) in enumerate(sorted(watches.items())):
            _plot_watch_figure(ax, host, watch, key, f"C{index}")
        if not ax.lines:
            ax.text(0.5, 0.5, f"no {label} recorded in this watch", transform=ax.transAxes,
                    ha="center")
        ax.set(ylabel=label, ylim=(0, None))
        _legend(ax, "upper left", beside=True)
    axes[-1].set(xlabel="seconds since the flip")
    return _save(fig, directory / "promote_watch.png")


def _plot_watch_figure(ax, host: str, watch: dict, key: str, color: str) -> None:
    """One host's `key` over its watch, its shadow baseline and its value on Triton before the flip, in the
    host's `color`; the rollback floor under the verify rate."""
    known = [t for t in watch["ticks"] if t.get(key) is not None]
    base = watch["ticks"][-1].get(f"base_{key}") if watch["ticks"] else None
    triton = watch[f"triton_{key}"]
    if not (known or base or triton):
        return
    ax.plot([t["elapsed_s"] for t in known], [t[key] for t in known], color=color,
            label=f"{host} ({watch['outcome']})")
    if base:
        ax.axhline(base, color=color, linestyle="--", label=f"{host} shadow baseline {base:.3g}")
    if base and key == "verify_rate":
        floor = base * watch["ticks"][-1]["min_verify_rate_ratio"]
        ax.axhline(floor, color=color, linestyle=":", label=f"{host} rollback below {floor:.3g}")
    if triton:
        ax.axhline(triton, color=color, linestyle="-.", label=f"{host} on Triton before the flip {triton:.3g}")


def _legend(ax, where: str, beside: bool = False) -> None:
    """The axes' legend at `where`, inside the axes or (`beside`) to their right."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc=where, bbox_to_anchor=(1.01, 1) if beside else None)


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
    watches = _promote_watch(store.promote_records())
    files = ReportFiles(markdown=store.dir / "report.md", json=store.dir / "report.json")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        files.plot_note = "plots skipped: matplotlib is not installed (pip install 'cutover[report]')"
    else:
        plots_dir = store.dir / "plots"
        plots_dir.mkdir(parents=True, exist_ok=True)
        files.plots = _plot(plots_dir, series, rows, meta, summary, watches)
    document = {
        "run": meta,
        "verdict": json.loads(verdict.to_json()) if verdict else None,
        "totals": summary.totals(),
        "layers": rows,
        "series": series,  # the plots' data: seconds since the start on the operator's clock
        "promote_watch": watches,  # per host: each probe of the watch after this run passed, and its outcome
        "plots": [str(p) for p in files.plots],
        "plot_note": files.plot_note,
        "unreadable_stats_lines": store.unreadable_lines,
    }
    atomic_write_text(str(files.json), jsonout.dumps(document, indent=2, sort_keys=True))
    atomic_write_text(str(files.markdown), _markdown(meta, verdict, rows, summary, files, store.unreadable_lines,
                                                     watches, series["truth"]))
    return files
