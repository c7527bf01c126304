"""Gate policy loading and validation: messages name the file and the field."""

import pytest

from checks.policy import DEFAULT_POLICY_PATH, load_policy
from cutover.errors import ConfigError


def write(tmp_path, text):
    path = tmp_path / "policy.yml"
    path.write_text(text)
    return path


def test_default_policy_loads_with_every_field():
    policy = load_policy()
    assert policy.source == str(DEFAULT_POLICY_PATH)
    assert policy.shadow.max_nonfinite == 0
    assert policy.shadow.rel_l2_p99 <= policy.shadow.rel_l2_max
    assert policy.promote.watch_minutes == 10


def test_partial_policy_overrides_only_what_it_sets(tmp_path):
    default = load_policy()
    policy = load_policy(write(tmp_path, "shadow:\n  min_duration_s: 5\n"))
    assert policy.shadow.min_duration_s == 5.0
    assert policy.shadow.rel_l2_max == default.shadow.rel_l2_max
    assert policy.promote == default.promote


def test_shipped_sandbox_policy_is_valid():
    policy = load_policy(DEFAULT_POLICY_PATH.parent / "sandbox.yml")
    assert policy.shadow.min_duration_s < load_policy().shadow.min_duration_s


@pytest.mark.parametrize(
    ("text", "field", "problem"),
    [
        ("shadow:\n  rel_l2_max: abc\n", "shadow.rel_l2_max", "must be a number"),
        ("shadow:\n  rel_l2_max: 0\n", "shadow.rel_l2_max", "must be > 0"),
        ("shadow:\n  max_nonfinite: 1.5\n", "shadow.max_nonfinite", "whole number"),
        ("shadow:\n  max_nonfinite: -1\n", "shadow.max_nonfinite", "must be >= 0"),
        ("shadow:\n  truth_anchor_k: 0.5\n", "shadow.truth_anchor_k", "must be >= 1.0"),
        ("shadow:\n  rel_l2_max: .nan\n", "shadow.rel_l2_max", "must be a finite number"),
        ("shadow:\n  rel_l2_maxx: 1\n", "shadow.rel_l2_maxx", "not a known field"),
        ("shadows:\n  rel_l2_max: 1\n", "shadows", "not a known section"),
        ("scop: sandbox\n", "scop", "other top-level fields: version, scope"),
        ("shadow: 3\n", "shadow", "must be a mapping"),
        ("version: 2\n", "version", "must be 1"),
        ("- a\n- b\n", "<top level>", "must be a mapping"),
        ("shadow:\n  rel_l2_p99: 0.5\n  rel_l2_max: 0.1\n", "shadow.rel_l2_p99", "must not exceed"),
        ("promote:\n  max_failed_probes: 0\n", "promote.max_failed_probes", "must be >= 1"),
        ("shadow:\n  max_silence_s: true\n", "shadow.max_silence_s", "must be a number"),
    ],
)
def test_bad_field_is_named_with_its_file(tmp_path, text, field, problem):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert str(path) in message
    assert f"'{field}'" in message
    assert problem in message


def test_unparsable_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_policy(write(tmp_path, "shadow: [unclosed\n"))
    with pytest.raises(ConfigError, match="file not found"):
        load_policy(tmp_path / "absent.yml")


def test_a_number_yaml_reads_as_text_is_named_with_the_fix(tmp_path):
    policy = tmp_path / "policy.yml"
    policy.write_text("shadow:\n  rel_l2_p99: 5e-3\n")
    with pytest.raises(ConfigError, match=r"field 'shadow.rel_l2_p99' must be a number, got '5e-3' \(YAML reads "
                                          r"5e-3 as text: write it with a decimal point, e\.g\. 5\.0e-3\)"):
        load_policy(policy)
