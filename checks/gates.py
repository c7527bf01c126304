"""Evaluate a shadow run against a gate policy: stats records + rank observations -> verdict with reasons.

`StatsSummary` folds the plugin's stats records (docs/architecture.md) into per-layer totals as they arrive
(with each host's own relative-L2 histogram per layer: the p99 gate is judged per host and layer);
`evaluate_shadow` checks them, together with what the operator side observed of every rank (heartbeat age,
mode, restarts), against a `ShadowPolicy`. While the run is going (`final=False`) only the gates a breach can
trip are checked; duration, volume (per host and rank), truth-anchor coverage and p99 are judged at the end (p99
earlier once a host's layer has the volume).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from checks.policy import ShadowPolicy
from cutover.hostprotocol.hostlayout import REL_L2_BIN_EDGES
from cutover.hostprotocol.statsrecord import LayerRecord, StatsRecord

HIST_BUCKETS = len(REL_L2_BIN_EDGES) + 1


@dataclass
class RelL2:
    """Compared calls of one layer with their relative-L2 histogram and maximum (NaN ranks worst)."""

    compared: int = 0
    rel_l2_hist: list[int] = field(default_factory=lambda: [0] * HIST_BUCKETS)
    rel_l2_max: float = 0.0

    def rel_l2_p99(self) -> float | None:
        return hist_quantile(self.rel_l2_hist, 0.99, self.rel_l2_max)

    def rel_l2_p99_bounds(self) -> tuple[float, float] | None:
        return hist_quantile_bounds(self.rel_l2_hist, 0.99, self.rel_l2_max)

    def fold(self, data: LayerRecord) -> bool:
        """Add one record's entry for the layer; True when it holds a new maximum."""
        self.compared += data.compared
        for index, count in enumerate(data.rel_l2_hist[:HIST_BUCKETS]):
            self.rel_l2_hist[index] += count
        rel_max = data.rel_l2_max
        if _rank_value(rel_max) > _rank_value(self.rel_l2_max):
            self.rel_l2_max = rel_max
            return True
        return False


@dataclass
class LayerStats(RelL2):
    """Totals of one attention layer over every host and rank of a run."""

    calls: int = 0
    max_abs: float = 0.0
    nonfinite_custom: int = 0
    nonfinite_stock: int = 0
    worst_at: str = ""  # "host rank r" where rel_l2_max was seen
    truth_samples: int = 0
    truth_worst: dict | None = None  # the sample with the largest err_custom / allowed ratio
    truth_violations: int = 0
    hosts: dict[str, RelL2] = field(default_factory=dict)  # host -> its own share (the p99 gate is per host)


def hist_quantile(hist: list[int], q: float, observed_max: float) -> float | None:
    """Upper bound of the q-quantile of a REL_L2_BIN_EDGES histogram: the upper edge of the bucket that holds
    it, capped by the largest value observed. None for an empty histogram."""
    bounds = hist_quantile_bounds(hist, q, observed_max)
    return None if bounds is None else bounds[1]


def hist_quantile_bounds(hist: list[int], q: float, observed_max: float) -> tuple[float, float] | None:
    """Where the q-quantile of a REL_L2_BIN_EDGES histogram lies: the edges of the bucket that holds it, the upper
    one capped by the largest value observed (4 buckets a decade: the quantile is known to within a factor of
    1.78; when the top values share the maximum's bucket the upper bound is the maximum). None when empty."""
    total = sum(hist)
    if total == 0:
        return None
    needed = math.ceil(q * total)
    running = 0
    for index, count in enumerate(hist):
        running += count
        if running >= needed:
            lower = REL_L2_BIN_EDGES[index - 1] if index > 0 else 0.0
            upper = REL_L2_BIN_EDGES[index] if index < len(REL_L2_BIN_EDGES) else math.inf
            return min(lower, observed_max), min(upper, observed_max)
    return observed_max, observed_max


def _layer_sort_key(name: str) -> tuple:
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


@dataclass
class StatsSummary:
    """Per-layer totals of the stats records of one shadow run (its generation on each host, mode shadow)."""

    generations: dict[str, int]
    truth_k: float
    truth_floor: float
    layers: dict[str, LayerStats] = field(default_factory=dict)
    records: int = 0
    ignored: int = 0
    first_ts: float | None = None
    last_ts: float | None = None
    rank_compared: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)  # (host, rank) -> layer -> n

    def add(self, host: str, record: StatsRecord) -> bool:
        """Fold one stats record in; records of another generation or mode are ignored (returns False)."""
        if record.generation != self.generations.get(host) or record.mode != "shadow":
            self.ignored += 1
            return False
        self.records += 1
        self.first_ts = record.ts if self.first_ts is None else min(self.first_ts, record.ts)
        self.last_ts = record.ts if self.last_ts is None else max(self.last_ts, record.ts)
        where = f"{host} rank {record.rank}"
        rank_compared = self.rank_compared.setdefault((host, record.rank), {})
        for name, data in record.layers.items():
            layer = self.layers.setdefault(name, LayerStats())
            layer.calls += data.calls
            rank_compared[name] = rank_compared.get(name, 0) + data.compared
            layer.hosts.setdefault(host, RelL2()).fold(data)
            if layer.fold(data):
                layer.worst_at = where
            layer.max_abs = _worse(layer.max_abs, data.max_abs)
            layer.nonfinite_custom += data.nonfinite_custom
            layer.nonfinite_stock += data.nonfinite_stock
        for sample in record.truth:
            self._add_truth(where, sample)
        return True

    def _add_truth(self, where: str, sample: dict) -> None:
        layer = self.layers.setdefault(str(sample.get("layer")), LayerStats())
        err_custom = float(sample.get("err_custom", math.nan))
        err_stock = float(sample.get("err_stock", math.nan))
        allowed = self.truth_k * err_stock + self.truth_floor
        ratio = err_custom / allowed if math.isfinite(err_custom) and math.isfinite(allowed) else math.inf
        layer.truth_samples += 1
        if ratio > 1.0:
            layer.truth_violations += 1
        if layer.truth_worst is None or ratio > layer.truth_worst["ratio"]:
            layer.truth_worst = {"err_custom": err_custom, "err_stock": err_stock, "ratio": ratio, "at": where}

    def sorted_layers(self) -> list[tuple[str, LayerStats]]:
        return sorted(self.layers.items(), key=lambda item: _layer_sort_key(item[0]))

    def totals(self) -> dict:
        """Run-wide numbers for progress lines and reports."""
        layers = self.layers.values()
        worst_name, worst = max(
            self.layers.items(), key=lambda item: _rank_value(item[1].rel_l2_max), default=(None, None)
        )
        return {
            "records": self.records,
            "compared": sum(layer.compared for layer in layers),
            "calls": sum(layer.calls for layer in layers),
            "worst_rel_l2": worst.rel_l2_max if worst else None,
            "worst_layer": worst_name,
            "max_abs": max((layer.max_abs for layer in layers), key=_rank_value, default=0.0),
            "nonfinite_custom": sum(layer.nonfinite_custom for layer in layers),
            "nonfinite_stock": sum(layer.nonfinite_stock for layer in layers),
            "truth_samples": sum(layer.truth_samples for layer in layers),
        }


def _rank_value(value: float) -> float:
    """Order values so that NaN counts as the worst possible."""
    return math.inf if math.isnan(value) else value


def _worse(current: float, new: float) -> float:
    return new if _rank_value(new) > _rank_value(current) else current


@dataclass
class RankObservation:
    """What the operator side saw of one rank: heartbeat age, mode, restarts since the run was armed."""

    host: str
    rank: int
    heartbeat_age_s: float | None  # None: no heartbeat at all
    mode_active: str | None
    restarts: int = 0
    reason: str = ""
    stats_write_errors: int = 0  # stats lines the rank could not write during the run


@dataclass
class GateResult:
    gate: str
    passed: bool
    detail: str
    layer: str | None = None
    host: str | None = None
    rank: int | None = None


@dataclass
class Verdict:
    passed: bool
    final: bool
    results: list[GateResult]

    @property
    def failures(self) -> list[GateResult]:
        return [result for result in self.results if not result.passed]

    def reasons(self) -> list[str]:
        """One line per failed gate, or one line per passed gate when nothing failed."""
        chosen = self.failures or self.results
        return [f"{result.gate}: {result.detail}" for result in chosen]

    def to_dict(self) -> dict:
        return {"passed": self.passed, "final": self.final, "results": [asdict(r) for r in self.results]}

    @classmethod
    def from_dict(cls, data: dict) -> "Verdict":
        return cls(passed=data["passed"], final=data["final"], results=[GateResult(**r) for r in data["results"]])


def _exceeds(value: float, limit: float) -> bool:
    return math.isnan(value) or value > limit


def _layer_gates(policy: ShadowPolicy, name: str, layer: LayerStats, final: bool) -> list[GateResult]:
    """Failed gates of one layer, most specific first (a NaN also shows as a huge relative L2)."""
    failed = []

    def fail(gate: str, message: str, host: str | None = None) -> None:
        failed.append(GateResult(gate, False, f"layer {name}: {message}", layer=name, host=host))

    if layer.nonfinite_custom > policy.max_nonfinite:
        fail("nonfinite", f"{layer.nonfinite_custom} non-finite output values from the custom kernel "
                          f"(allowed {policy.max_nonfinite})")
    if layer.nonfinite_stock > policy.max_nonfinite:
        fail("nonfinite", f"{layer.nonfinite_stock} non-finite output values from Triton itself: "
                          "the comparison is not trustworthy")
    if layer.truth_violations:
        worst = layer.truth_worst
        fail("truth_anchor", f"custom error vs float64 {worst['err_custom']:.3g} > {policy.truth_anchor_k} x "
                             f"Triton's {worst['err_stock']:.3g} + {policy.truth_anchor_floor:.3g} "
                             f"({layer.truth_violations} of {layer.truth_samples} samples, worst at {worst['at']})")
    if _exceeds(layer.rel_l2_max, policy.rel_l2_max):
        fail("rel_l2_max", f"worst relative L2 {layer.rel_l2_max:.3g} > {policy.rel_l2_max:.3g} "
                           f"(at {layer.worst_at})")
    for host, part in sorted(layer.hosts.items()):  # per host: promote trusts the verdict host by host
        p99 = part.rel_l2_p99()
        judged = final or part.compared >= policy.min_compared_calls
        if p99 is not None and judged and _exceeds(p99, policy.rel_l2_p99):
            fail("rel_l2_p99", f"host {host}: relative L2 p99 {p99:.3g} > {policy.rel_l2_p99:.3g} "
                               f"over {part.compared} compared calls", host=host)
    if _exceeds(layer.max_abs, policy.max_abs):
        fail("max_abs", f"max abs difference {layer.max_abs:.3g} > {policy.max_abs:.3g}")
    return failed


def _rank_gates(policy: ShadowPolicy, rank: RankObservation, expected_mode: str) -> list[GateResult]:
    failed = []
    where = dict(host=rank.host, rank=rank.rank)
    label = f"{rank.host} rank {rank.rank}"
    if rank.heartbeat_age_s is None:
        failed.append(GateResult("silence", False, f"{label}: no heartbeat", **where))
    elif rank.heartbeat_age_s > policy.max_silence_s:
        failed.append(
            GateResult(
                "silence",
                False,
                f"{label}: silent for {rank.heartbeat_age_s:.1f} s " f"(> {policy.max_silence_s:g} s)",
                **where,
            )
        )
    if rank.restarts > policy.max_unclean_restarts:
        failed.append(
            GateResult(
                "restart",
                False,
                f"{label}: restarted {rank.restarts} time(s) during the run "
                f"(allowed {policy.max_unclean_restarts}) {rank.reason}".rstrip(),
                **where,
            )
        )
    if rank.stats_write_errors:
        failed.append(
            GateResult("stats", False, f"{label}: {rank.stats_write_errors} stats line(s) could not be written "
                       "on the host (a full or failing disk under the state dir?): the divergence record of the "
                       "run may be incomplete", **where)
        )
    if rank.mode_active is not None and rank.mode_active != expected_mode:
        why = f": {rank.reason}" if rank.reason else ""
        failed.append(
            GateResult("mode", False, f"{label}: running {rank.mode_active}, not {expected_mode}{why}", **where)
        )
    return failed


def evaluate_shadow(
    policy: ShadowPolicy,
    summary: StatsSummary,
    ranks: list[RankObservation],
    elapsed_s: float,
    *,
    final: bool,
    expected_mode: str = "shadow",
) -> Verdict:
    """Check a shadow run against `policy`. `final=False` checks only what can breach mid-run."""
    results: list[GateResult] = []
    for name, layer in summary.sorted_layers():
        results.extend(_layer_gates(policy, name, layer, final))
    for rank in ranks:
        results.extend(_rank_gates(policy, rank, expected_mode))
    if final:
        results.extend(_completion_gates(policy, summary, ranks, elapsed_s))
    reported = {result.gate for result in results}
    for gate, text in _passed_descriptions(policy, summary, final).items():
        if gate not in reported:
            results.append(GateResult(gate, True, text))
    return Verdict(passed=all(result.passed for result in results), final=final, results=results)


def _completion_gates(
    policy: ShadowPolicy, summary: StatsSummary, ranks: list[RankObservation], elapsed_s: float
) -> list[GateResult]:
    """Duration, volume and truth-anchor coverage: judged once, at the end of the run."""
    results = []
    if elapsed_s < policy.min_duration_s:
        results.append(
            GateResult(
                "duration", False, f"ran {elapsed_s:.0f} s, policy needs at least " f"{policy.min_duration_s:.0f} s"
            )
        )
    results.extend(_volume_gates(policy, summary, ranks))
    truth = _truth_coverage(policy, summary)
    if truth:
        results.append(truth)
    return results


def _volume_gates(policy: ShadowPolicy, summary: StatsSummary, ranks: list[RankObservation]) -> list[GateResult]:
    """Every host compared `min_compared_calls` in every layer, and each of its ranks its share: the ranks of a
    host see the same verify calls (tensor parallelism), and promote trusts the verdict host by host."""
    if not summary.layers:
        return [
            GateResult(
                "compared_calls",
                False,
                "no verify call was compared (no stats records for " "this run: is traffic reaching the server?)",
            )
        ]
    failed = []
    for host, rank_ids in _ranks_by_host(ranks).items():
        if not any((host, rank) in summary.rank_compared for rank in rank_ids):
            failed.append(
                GateResult(
                    "compared_calls",
                    False,
                    f"host {host}: no stats record of this run was read from any of its {len(rank_ids)} ranks "
                    f"(is verify traffic reaching it? can cutover read its stats/ directory?)",
                    host=host,
                )
            )
            continue
        share = rank_share(policy, len(rank_ids))
        for rank in rank_ids:
            name, count = _slowest_layer(summary, host, rank)
            if count < share:
                failed.append(
                    GateResult(
                        "compared_calls",
                        False,
                        f"host {host} rank {rank}: layer {name}: {count} compared calls, policy needs at least "
                        f"{share} per rank ({policy.min_compared_calls} per host over {len(rank_ids)} ranks)",
                        layer=name,
                        host=host,
                        rank=rank,
                    )
                )
    return failed


def rank_share(policy: ShadowPolicy, ranks: int) -> int:
    """The compared calls each of a host's `ranks` ranks must carry in every layer."""
    return math.ceil(policy.min_compared_calls / ranks)


def _slowest_layer(summary: StatsSummary, host: str, rank: int) -> tuple[str | None, int]:
    """The layer in which `rank` of `host` compared the fewest calls, and that count."""
    counts = summary.rank_compared.get((host, rank), {})
    return min(((name, counts.get(name, 0)) for name, _ in summary.sorted_layers()), key=lambda item: item[1],
               default=(None, 0))


def compared_progress(policy: ShadowPolicy, summary: StatsSummary,
                      ranks: list[RankObservation]) -> dict[str, tuple[int, int]]:
    """Per host: the fewest calls any of its ranks compared in any layer, and the per-rank share the volume gate
    needs at the end, for progress lines."""
    return {host: (min(_slowest_layer(summary, host, rank)[1] for rank in rank_ids), rank_share(policy, len(rank_ids)))
            for host, rank_ids in _ranks_by_host(ranks).items()}


def gauges(policy: ShadowPolicy, summary: StatsSummary) -> list[tuple[str, float | None, float]]:
    """Each divergence gate's observed value beside its threshold (None: nothing observed yet), for progress
    lines; the truth anchor as the worst sample's error over its allowed error (the gate: <= 1)."""
    layers = list(summary.layers.values())
    p99s = [value for layer in layers for share in layer.hosts.values() if (value := share.rel_l2_p99()) is not None]
    ratios = [layer.truth_worst["ratio"] for layer in layers if layer.truth_worst]
    totals = summary.totals()
    return [
        ("rel-L2 p99", max(p99s, key=_rank_value, default=None), policy.rel_l2_p99),
        ("rel-L2 max", totals["worst_rel_l2"], policy.rel_l2_max),
        ("max abs", totals["max_abs"] if layers else None, policy.max_abs),
        ("non-finite", totals["nonfinite_custom"] + totals["nonfinite_stock"], policy.max_nonfinite),
        ("truth error/allowed", max(ratios, key=_rank_value, default=None), 1.0),
    ]


def _ranks_by_host(ranks: list[RankObservation]) -> dict[str, list[int]]:
    by_host: dict[str, list[int]] = {}
    for rank in ranks:
        by_host.setdefault(rank.host, []).append(rank.rank)
    return by_host


TRUTH_SAMPLES_HINT = (
    "each rank snapshots about one shadow-sampled verify call per second, graph-replayed or eager, and only the "
    "requests of a call that fit its 64 MiB staging area (about 58k prefix tokens for the first request); a run "
    "without samples had no shadow-sampled traffic, or only calls whose first request is larger (the heartbeat's "
    "errors and the rank's log say if the snapshots were turned off)"
)


def _truth_coverage(policy: ShadowPolicy, summary: StatsSummary) -> GateResult | None:
    """A failure when the run has fewer float64-anchored samples than the policy needs; a non-gating,
    labelled result when it has none and the policy needs none; None when samples were checked."""
    samples = summary.totals()["truth_samples"]
    needed = policy.truth_anchor_min_samples
    if samples < needed:
        return GateResult(
            "truth_anchor",
            False,
            f"{samples} float64-anchored samples, policy needs at least {needed} "
            f"(shadow.truth_anchor_min_samples): {TRUTH_SAMPLES_HINT}",
        )
    if samples == 0:
        return GateResult(
            "truth_anchor",
            True,
            f"NOT CHECKED (not gating): no float64-anchored sample in this run; {TRUTH_SAMPLES_HINT}; "
            f"set shadow.truth_anchor_min_samples to make samples required",
        )
    return None


def _passed_descriptions(policy: ShadowPolicy, summary: StatsSummary, final: bool) -> dict[str, str]:
    truth_samples = summary.totals()["truth_samples"]
    texts = {
        "rel_l2_max": f"every layer's worst relative L2 <= {policy.rel_l2_max:.3g}",
        "max_abs": f"every layer's max abs difference <= {policy.max_abs:.3g}",
        "nonfinite": f"non-finite outputs <= {policy.max_nonfinite}",
        "truth_anchor": (
            f"custom error vs float64 <= {policy.truth_anchor_k} x Triton's + {policy.truth_anchor_floor:.3g} "
            f"on all {truth_samples} samples"
        ),
        "silence": f"every rank heartbeating within {policy.max_silence_s:g} s",
        "restart": f"restarts <= {policy.max_unclean_restarts}",
        "mode": "every rank running the requested mode",
        "stats": "every rank wrote every stats line",
    }
    if final:
        texts["rel_l2_p99"] = f"every host's relative L2 p99 in every layer <= {policy.rel_l2_p99:.3g}"
        texts["duration"] = f"ran at least {policy.min_duration_s:.0f} s"
        texts["compared_calls"] = (
            f"every host compared at least {policy.min_compared_calls} calls in every layer, each rank its share"
        )
    return texts
