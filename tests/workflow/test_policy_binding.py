"""A verdict records the shadow thresholds it was judged under; `looser_than` lists where they are looser than
the policy promote runs with (a sandbox-policy pass must not promote a production host)."""

import dataclasses
import json

import pytest

from checks import policy as policy_module
from checks.policy import (
    AT_LEAST, AT_MOST, DEFAULT_POLICY_PATH, PROMOTE_DIRECTIONS, SHADOW_DIRECTIONS, PromotePolicy, ShadowPolicy,
    load_policy, looser_than, shadow_thresholds,
)
from cutover.workflow.verdict import VerdictRecord

from .test_shadow_run import world  # noqa: F401  (the end-to-end fixture)

SANDBOX = DEFAULT_POLICY_PATH.parent / "sandbox.yml"


def record(**extra) -> VerdictRecord:
    return VerdictRecord(run_id="20250101T000000Z-abcdef", release_id="r1", hosts=["h1"], outcome="passed",
                         reasons=[], started_at=0.0, ended_at=120.0, policy_source=str(SANDBOX), actor="a@b",
                         **extra)


def test_every_shadow_field_has_a_direction():
    names = {f.name for f in dataclasses.fields(ShadowPolicy)}
    assert set(SHADOW_DIRECTIONS) == names, "decide AT_MOST or AT_LEAST for each new ShadowPolicy field"
    assert set(SHADOW_DIRECTIONS.values()) <= {AT_MOST, AT_LEAST}


def test_every_promote_field_has_a_direction():
    names = {f.name for f in dataclasses.fields(PromotePolicy)}
    assert set(PROMOTE_DIRECTIONS) == names, "decide AT_MOST or AT_LEAST for each new PromotePolicy field"
    assert set(PROMOTE_DIRECTIONS.values()) <= {AT_MOST, AT_LEAST}


def test_minimums_are_at_least_and_limits_at_most():
    assert {n for n, d in SHADOW_DIRECTIONS.items() if d == AT_LEAST} == {
        "min_duration_s", "min_compared_calls", "truth_anchor_min_samples"}


def test_a_field_without_a_direction_is_refused_not_guessed(monkeypatch):
    directions = dict(SHADOW_DIRECTIONS)
    del directions["max_abs"]
    monkeypatch.setattr(policy_module, "SHADOW_DIRECTIONS", directions)
    shadow = load_policy().shadow
    with pytest.raises(RuntimeError, match="max_abs"):
        looser_than(shadow_thresholds(shadow), shadow)


def test_a_sandbox_verdict_is_looser_than_the_default_policy():
    lines = looser_than(shadow_thresholds(load_policy(SANDBOX).shadow), load_policy().shadow)
    assert lines == [
        "shadow.min_duration_s: the verdict was judged with 60, this policy needs at least 3600",
        "shadow.min_compared_calls: the verdict was judged with 50, this policy needs at least 10000",
        "shadow.truth_anchor_min_samples: the verdict was judged with 20, this policy needs at least 600",
    ]


def test_the_same_policy_lists_nothing():
    for path in (None, SANDBOX):
        shadow = load_policy(path).shadow
        assert looser_than(shadow_thresholds(shadow), shadow) == []


def test_a_stricter_recorded_policy_lists_nothing():
    default = load_policy().shadow
    stricter = dataclasses.replace(
        default, min_duration_s=7200.0, min_compared_calls=20000, rel_l2_p99=5e-3, rel_l2_max=1e-2,
        max_abs=0.1, truth_anchor_k=1.1, truth_anchor_floor=1e-4, truth_anchor_min_samples=1200, max_silence_s=5.0)
    assert looser_than(shadow_thresholds(stricter), default) == []
    # ... while the default judged against that stricter policy is looser on every field that differs
    assert [line.split(":")[0] for line in looser_than(shadow_thresholds(default), stricter)] == [
        "shadow.min_duration_s", "shadow.min_compared_calls", "shadow.rel_l2_p99", "shadow.rel_l2_max",
        "shadow.max_abs", "shadow.truth_anchor_k", "shadow.truth_anchor_floor", "shadow.truth_anchor_min_samples",
        "shadow.max_silence_s"]


@pytest.mark.parametrize(
    ("name", "looser_value", "text"),
    [
        ("rel_l2_p99", 0.02, "shadow.rel_l2_p99: the verdict was judged with 0.02, this policy needs at most 0.01"),
        ("max_nonfinite", 3, "shadow.max_nonfinite: the verdict was judged with 3, this policy needs at most 0"),
        ("max_unclean_restarts", 1, "judged with 1, this policy needs at most 0"),
        ("truth_anchor_floor", 1e-3, "judged with 0.001, this policy needs at most 0.0005"),
    ],
)
def test_a_larger_limit_is_looser(name, looser_value, text):
    default = load_policy().shadow
    lines = looser_than({**shadow_thresholds(default), name: looser_value}, default)
    assert len(lines) == 1 and text in lines[0]


def test_a_smaller_sample_minimum_is_looser():
    required = dataclasses.replace(load_policy().shadow, truth_anchor_min_samples=1200)
    assert looser_than(shadow_thresholds(load_policy().shadow), required) == [
        "shadow.truth_anchor_min_samples: the verdict was judged with 600, this policy needs at least 1200"]


def test_an_older_verdict_without_thresholds_gives_one_line():
    lines = looser_than(None, load_policy().shadow)
    assert len(lines) == 1 and "records no thresholds" in lines[0]


def test_missing_or_malformed_recorded_fields_fail_closed():
    default = load_policy().shadow
    recorded = {k: v for k, v in shadow_thresholds(default).items() if k != "max_abs"}
    recorded.update(rel_l2_max="0.03", max_nonfinite=True, unknown_future_field=1)
    lines = looser_than(recorded, default)
    assert [line.split(":")[0] for line in lines] == ["shadow.rel_l2_max", "shadow.max_abs", "shadow.max_nonfinite"]
    assert "judged without this threshold" in lines[1]
    assert len(looser_than(["not", "a", "dict"], default)) == 1


def test_the_verdict_round_trips_its_thresholds_through_json():
    thresholds = shadow_thresholds(load_policy(SANDBOX).shadow)
    stored = json.loads(record(policy_shadow=thresholds).to_json())
    assert stored["policy_shadow"] == thresholds
    assert VerdictRecord.from_json(json.dumps(stored)).policy_shadow == thresholds
    assert looser_than(stored["policy_shadow"], load_policy().shadow)  # promote reads the host file as a dict


def test_an_older_verdict_file_without_thresholds_still_loads():
    stored = json.loads(record().to_json())
    del stored["policy_shadow"]
    loaded = VerdictRecord.from_json(json.dumps(stored))
    assert loaded.passed and loaded.policy_shadow is None
    assert "older cutover" in looser_than(stored.get("policy_shadow"), load_policy().shadow)[0]


def test_a_shadow_run_records_its_policy_on_the_host(world):  # noqa: F811
    hosts, run = world({"h1": True})
    outcome = run()
    assert outcome.record.passed
    on_host = json.loads(open(hosts[0].paths.verdict(outcome.record.run_id)).read())
    assert on_host["policy_shadow"]["min_duration_s"] == 1 and on_host["policy_shadow"]["min_compared_calls"] == 4
    assert set(on_host["policy_shadow"]) == set(SHADOW_DIRECTIONS)
    assert looser_than(on_host["policy_shadow"], load_policy(outcome.record.policy_source).shadow) == []
    assert [line.split(":")[0] for line in looser_than(on_host["policy_shadow"], load_policy().shadow)] == [
        "shadow.min_duration_s", "shadow.min_compared_calls", "shadow.truth_anchor_min_samples"]
