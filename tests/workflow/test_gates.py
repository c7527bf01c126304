"""Gate evaluation over constructed stats records and rank observations."""

import dataclasses
import math

import pytest

from checks.gates import RankObservation, StatsSummary, compared_progress, evaluate_shadow, gauges
from checks.policy import load_policy
from .stats_records import layer, record

POLICY = dataclasses.replace(load_policy().shadow, truth_anchor_min_samples=0)  # coverage: its own tests below


TRUTH = {"layer": 0, "err_custom": 2.0e-3, "err_stock": 2.1e-3}


def summary_of(*records, host="h1", hosts=("h1",)):
    summary = StatsSummary(
        generations={name: 3 for name in hosts}, truth_k=POLICY.truth_anchor_k, truth_floor=POLICY.truth_anchor_floor
    )
    for item in records:
        summary.add(host, item)
    return summary


def healthy_ranks(count=2, host="h1"):
    return [RankObservation(host=host, rank=r, heartbeat_age_s=0.5, mode_active="shadow") for r in range(count)]


def rank_records(compared=POLICY.min_compared_calls, layers=("0", "1"), ranks=2, truth=(TRUTH,)):
    """One record per rank, each carrying its share of `compared` calls per layer (truth samples on rank 0)."""
    values = [2e-3] * math.ceil(compared / ranks)
    return [
        record({name: layer(values) for name in layers}, rank=rank, truth=truth if rank == 0 else ())
        for rank in range(ranks)
    ]


def clean_run(compared=POLICY.min_compared_calls, layers=("0", "1")):
    return summary_of(*rank_records(compared, layers))


def failed_gates(verdict):
    return {result.gate for result in verdict.failures}


def test_clean_run_passes_at_the_end():
    verdict = evaluate_shadow(POLICY, clean_run(), healthy_ranks(), POLICY.min_duration_s, final=True)
    assert verdict.passed, verdict.reasons()
    assert {"duration", "compared_calls", "rel_l2_p99", "truth_anchor"} <= {r.gate for r in verdict.results}
    p99 = next(r.detail for r in verdict.results if r.gate == "rel_l2_p99")
    assert p99 == f"every host's relative L2 p99 in every layer <= {POLICY.rel_l2_p99:.3g}"


def test_short_run_fails_duration_only_at_the_end():
    summary = clean_run()
    assert evaluate_shadow(POLICY, summary, healthy_ranks(), 10.0, final=False).passed
    verdict = evaluate_shadow(POLICY, summary, healthy_ranks(), 10.0, final=True)
    assert failed_gates(verdict) == {"duration"}


def test_too_few_compared_calls_names_the_rank_and_its_thinnest_layer():
    share = [1e-3] * (POLICY.min_compared_calls // 2)
    summary = summary_of(
        record({"0": layer(share), "7": layer(share)}, rank=0),
        record({"0": layer(share), "7": layer([1e-3] * 5)}, rank=1),
    )
    verdict = evaluate_shadow(POLICY, summary, healthy_ranks(), POLICY.min_duration_s, final=True)
    assert failed_gates(verdict) == {"compared_calls"}
    [failure] = verdict.failures
    assert (failure.host, failure.rank, failure.layer) == ("h1", 1, "7")
    assert f"5 compared calls, policy needs at least {len(share)} per rank" in failure.detail


def test_a_host_whose_stats_were_never_read_fails_by_name():
    """h1 alone has the whole volume of every layer: summed over hosts it would pass; h2 showed nothing."""
    summary = summary_of(*rank_records(compared=2 * POLICY.min_compared_calls), hosts=("h1", "h2"))
    ranks = healthy_ranks(host="h1") + healthy_ranks(host="h2")
    verdict = evaluate_shadow(POLICY, summary, ranks, POLICY.min_duration_s, final=True)
    assert failed_gates(verdict) == {"compared_calls"}
    [failure] = verdict.failures
    assert failure.host == "h2" and failure.detail.startswith("host h2: no stats record of this run was read")


def test_a_run_without_truth_samples_passes_with_the_anchor_labelled_not_checked():
    summary = summary_of(*rank_records(truth=()))
    verdict = evaluate_shadow(POLICY, summary, healthy_ranks(), POLICY.min_duration_s, final=True)
    assert verdict.passed, verdict.reasons()
    [anchor] = [r for r in verdict.results if r.gate == "truth_anchor"]
    assert anchor.detail.startswith("NOT CHECKED (not gating): no float64-anchored sample")
    assert "one shadow-sampled verify call per second" in anchor.detail and "truth_anchor_min_samples" in anchor.detail


def test_the_default_policy_requires_truth_samples():
    default = load_policy().shadow
    assert default.truth_anchor_min_samples == 600
    verdict = evaluate_shadow(default, clean_run(), healthy_ranks(), default.min_duration_s, final=True)
    assert "truth_anchor" in failed_gates(verdict)


def test_required_truth_samples_fail_a_run_without_enough_and_pass_one_with_them():
    policy = dataclasses.replace(POLICY, truth_anchor_min_samples=3)
    short = evaluate_shadow(policy, clean_run(), healthy_ranks(), policy.min_duration_s, final=True)
    assert failed_gates(short) == {"truth_anchor"}
    assert short.failures[0].detail.startswith("1 float64-anchored samples, policy needs at least 3")
    assert evaluate_shadow(policy, clean_run(), healthy_ranks(), policy.min_duration_s, final=False).passed
    enough = evaluate_shadow(
        policy, summary_of(*rank_records(truth=[TRUTH] * 3)), healthy_ranks(), policy.min_duration_s, final=True
    )
    assert enough.passed, enough.reasons()
    assert "on all 3 samples" in next(r.detail for r in enough.results if r.gate == "truth_anchor")


def test_no_stats_at_all_cannot_pass():
    verdict = evaluate_shadow(POLICY, summary_of(), healthy_ranks(), POLICY.min_duration_s, final=True)
    assert "compared_calls" in failed_gates(verdict)


def test_one_divergent_call_breaches_rel_l2_max_and_names_layer_and_rank():
    bad = record({"0": layer([1e-3] * 10), "12": layer([1e-3] * 9 + [0.5])}, rank=1)
    verdict = evaluate_shadow(POLICY, summary_of(bad), healthy_ranks(), 5.0, final=False)
    assert not verdict.passed
    failure = next(r for r in verdict.failures if r.gate == "rel_l2_max")
    assert failure.layer == "12"
    assert "h1 rank 1" in failure.detail


def test_p99_breach_with_max_under_limit():
    values = [POLICY.rel_l2_max * 0.9] * 50 + [1e-4] * 950
    summary = summary_of(record({"3": layer(values)}))
    assert summary.layers["3"].rel_l2_p99() > POLICY.rel_l2_p99
    verdict = evaluate_shadow(POLICY, summary, healthy_ranks(), POLICY.min_duration_s, final=True)
    assert "rel_l2_p99" in failed_gates(verdict)
    assert "rel_l2_max" not in failed_gates(verdict)


TAIL = (POLICY.rel_l2_p99 + POLICY.rel_l2_max) / 2  # over the p99 limit, under the max limit


def host_records(compared, tail=0, ranks=2, name="3"):
    """One record per rank of a host: `compared` calls of layer `name` in all, `tail` of them at TAIL."""
    share, bad = compared // ranks, tail // ranks
    return [record({name: layer([1e-3] * (share - bad) + [TAIL] * bad)}, rank=rank) for rank in range(ranks)]


def summary_of_hosts(by_host):
    summary = summary_of(hosts=tuple(by_host))
    for host, records in by_host.items():
        for item in records:
            summary.add(host, item)
    return summary


def p99_failures(verdict):
    return [(r.host, r.layer, r.detail) for r in verdict.failures if r.gate == "rel_l2_p99"]


def test_one_hosts_p99_tail_is_not_diluted_by_another_hosts_clean_volume():
    n = POLICY.min_compared_calls
    summary = summary_of_hosts({"gpu-a": host_records(3 * n), "gpu-b": host_records(n, tail=n // 50)})
    assert summary.layers["3"].rel_l2_p99() <= POLICY.rel_l2_p99  # pooled over both hosts it would pass
    ranks = healthy_ranks(host="gpu-a") + healthy_ranks(host="gpu-b")
    verdict = evaluate_shadow(POLICY, summary, ranks, POLICY.min_duration_s, final=True)
    assert failed_gates(verdict) == {"rel_l2_p99"}
    assert p99_failures(verdict) == [
        ("gpu-b", "3", f"layer 3: host gpu-b: relative L2 p99 {TAIL:.3g} > {POLICY.rel_l2_p99:.3g} "
                       f"over {n} compared calls")
    ]


def test_mid_run_p99_is_judged_per_host_once_that_host_has_the_volume():
    n = POLICY.min_compared_calls
    summary = summary_of_hosts({"gpu-a": host_records(n, tail=n // 50), "gpu-b": host_records(n // 2, tail=n // 50)})
    ranks = healthy_ranks(host="gpu-a") + healthy_ranks(host="gpu-b")
    live = evaluate_shadow(POLICY, summary, ranks, 1.0, final=False)
    assert [(host, layer) for host, layer, _ in p99_failures(live)] == [("gpu-a", "3")]
    final = evaluate_shadow(POLICY, summary, ranks, POLICY.min_duration_s, final=True)
    assert [(host, layer) for host, layer, _ in p99_failures(final)] == [("gpu-a", "3"), ("gpu-b", "3")]


def test_p99_is_bounded_by_histogram_edge_and_by_max():
    summary = summary_of(record({"0": layer([1e-3] * 100)}))
    p99 = summary.layers["0"].rel_l2_p99()
    assert p99 == pytest.approx(1e-3)  # capped by the observed max, not the bucket's upper edge
    assert summary_of(record({"0": layer([])})).layers["0"].rel_l2_p99() is None


@pytest.mark.parametrize("field", ["nonfinite_custom", "nonfinite_stock"])
def test_any_nonfinite_output_breaches(field):
    summary = summary_of(record({"5": layer([1e-3] * 10, **{field: 1})}))
    verdict = evaluate_shadow(POLICY, summary, healthy_ranks(), 1.0, final=False)
    assert failed_gates(verdict) == {"nonfinite"}
    assert verdict.failures[0].layer == "5"


def test_nan_divergence_counts_as_worst():
    summary = summary_of(record({"2": layer([1e-3], max_abs=math.nan)}), record({"2": layer([math.nan])}))
    verdict = evaluate_shadow(POLICY, summary, healthy_ranks(), 1.0, final=False)
    assert {"rel_l2_max", "max_abs"} <= failed_gates(verdict)


def test_max_abs_breach():
    summary = summary_of(record({"4": layer([1e-3], max_abs=POLICY.max_abs * 2)}))
    assert failed_gates(evaluate_shadow(POLICY, summary, healthy_ranks(), 1.0, final=False)) == {"max_abs"}


def test_truth_anchor_rule():
    k, floor = POLICY.truth_anchor_k, POLICY.truth_anchor_floor
    within = {"layer": 1, "err_custom": k * 1e-2 + floor * 0.5, "err_stock": 1e-2}
    worse = {"layer": 9, "err_custom": k * 1e-2 + floor * 2, "err_stock": 1e-2}
    summary = summary_of(record({"1": layer([1e-3])}, truth=[within, worse]))
    verdict = evaluate_shadow(POLICY, summary, healthy_ranks(), 1.0, final=False)
    assert failed_gates(verdict) == {"truth_anchor"}
    assert verdict.failures[0].layer == "9"
    assert summary.layers["1"].truth_violations == 0


def test_silent_missing_restarted_and_wrong_mode_ranks():
    ranks = [
        RankObservation("h1", 0, heartbeat_age_s=POLICY.max_silence_s + 1, mode_active="shadow"),
        RankObservation("h1", 1, heartbeat_age_s=None, mode_active=None),
        RankObservation("h2", 0, heartbeat_age_s=0.1, mode_active="shadow", restarts=1),
        RankObservation("h2", 1, heartbeat_age_s=0.1, mode_active="triton", reason="lease expired"),
    ]
    verdict = evaluate_shadow(POLICY, clean_run(), ranks, 1.0, final=False)
    by_gate = {(r.gate, r.host, r.rank) for r in verdict.failures}
    assert by_gate == {("silence", "h1", 0), ("silence", "h1", 1), ("restart", "h2", 0), ("mode", "h2", 1)}
    assert "lease expired" in next(r.detail for r in verdict.failures if r.gate == "mode")


def test_a_rank_that_could_not_write_stats_lines_fails_the_run():
    """Its divergence record may be incomplete: a missing line may have held the worst value."""
    ranks = healthy_ranks()
    ranks[1].stats_write_errors = 2
    verdict = evaluate_shadow(POLICY, clean_run(), ranks, 1.0, final=False)
    [failure] = verdict.failures
    assert (failure.gate, failure.rank) == ("stats", 1)
    assert "2 stats line(s) could not be written" in failure.detail


def test_stats_write_errors_count_from_the_arming_heartbeat():
    from cutover.hostprotocol.hostlayout import Heartbeat
    from cutover.hoststate import RankView
    from cutover.workflow.observe import trackers_from_ack

    def view(errors: int, written_at: float) -> RankView:
        beat = Heartbeat(rank=0, pid=7, host="h1", mode_active="shadow", generation_seen=3, release_id="r",
                         kernel="cuda", counters={"stats_write_errors": errors}, written_at=written_at)
        return RankView(0, beat, 0.1, True)

    [tracker] = trackers_from_ack("h1", [view(5, 1.0)])  # five failures before this run: not its own
    assert tracker.observation().stats_write_errors == 0
    tracker.update(view(6, 2.0))
    assert tracker.observation().stats_write_errors == 1


def test_records_of_other_runs_are_ignored():
    summary = summary_of(
        record({"0": layer([0.9])}, generation=2),
        record({"0": layer([0.9])}, mode="custom"),
        record({"0": layer([1e-3])}),
    )
    assert summary.ignored == 2
    assert summary.layers["0"].rel_l2_max == 1e-3


def test_totals_and_verdict_round_trip():
    summary = summary_of(record({"0": layer([1e-3] * 4), "1": layer([5e-3] * 6, nonfinite_custom=2)}))
    totals = summary.totals()
    assert totals["compared"] == 10 and totals["worst_layer"] == "1" and totals["nonfinite_custom"] == 2
    verdict = evaluate_shadow(POLICY, summary, healthy_ranks(), 1.0, final=False)
    from checks.gates import Verdict

    assert Verdict.from_dict(verdict.to_dict()) == verdict


def test_nonfinite_is_reported_before_the_sentinel_divergence_it_causes():
    """The plugin records 1e30 as rel-L2/max-abs of a non-finite comparison: the reason must say NaN first."""
    summary = summary_of(record({"3": layer([1e-3, 1e30], max_abs=1e30, nonfinite_custom=1)}))
    verdict = evaluate_shadow(POLICY, summary, healthy_ranks(), 1.0, final=False)
    assert verdict.failures[0].gate == "nonfinite"
    assert verdict.reasons()[0].startswith("nonfinite: layer 3")


def test_progress_gauges_give_each_gate_its_observed_value_and_threshold():
    summary = summary_of(record({"0": layer([1e-3] * 99 + [2.5e-2], max_abs=0.1)}, truth=(TRUTH,)))
    allowed = POLICY.truth_anchor_k * TRUTH["err_stock"] + POLICY.truth_anchor_floor
    shown = {name: (seen, limit) for name, seen, limit in gauges(POLICY, summary)}
    assert shown["rel-L2 max"] == (2.5e-2, POLICY.rel_l2_max)
    assert shown["max abs"] == (0.1, POLICY.max_abs)
    assert shown["non-finite"] == (0, POLICY.max_nonfinite)
    assert shown["truth error/allowed"] == (pytest.approx(TRUTH["err_custom"] / allowed), 1.0)
    p99, limit = shown["rel-L2 p99"]
    assert 1e-3 <= p99 < 2.5e-2 and limit == POLICY.rel_l2_p99  # the 99th of 100 calls, not the worst
    assert {name: seen for name, seen, _ in gauges(POLICY, summary_of())} == {
        "rel-L2 p99": None, "rel-L2 max": None, "max abs": None, "non-finite": 0, "truth error/allowed": None}


def test_compared_progress_is_each_hosts_slowest_rank_and_layer_against_its_share():
    records = rank_records(compared=4000, layers=("0", "1"))
    records[1] = record({"0": layer([2e-3] * 2000), "1": layer([2e-3] * 700)}, rank=1)  # rank 1 lags in layer 1
    progress = compared_progress(POLICY, summary_of(*records), healthy_ranks(2))
    assert progress == {"h1": (700, math.ceil(POLICY.min_compared_calls / 2))}
