"""The phase state machine: allowed transitions pass, refused ones say what to do instead."""

import pytest

from cutover.hostprotocol import phases


@pytest.mark.parametrize("current,target", [
    ("idle", "staged"), ("staged", "shadowing"), ("shadowing", "shadow_passed"), ("shadowing", "shadow_failed"),
    ("shadow_passed", "promoted"), ("promoted", "rolled_back"), ("rolled_back", "staged"),
    ("shadow_failed", "shadowing"), ("rolled_back", "rolled_back"),
])
def test_allowed_transitions(current, target):
    assert phases.refusal(current, target) is None


@pytest.mark.parametrize("current,target,advice", [
    ("promoted", "staged", "run `cutover rollback` before staging another release"),
    ("staged", "promoted", "run `cutover shadow` first"),
    ("idle", "shadowing", "run `cutover stage` first"),
    ("shadowing", "staged", "let it finish, or run `cutover rollback` first"),
    ("shadow_failed", "promoted", "fix the kernel, stage and shadow again"),
])
def test_refused_transitions_say_what_to_do(current, target, advice):
    message = phases.refusal(current, target)
    assert message == f"cannot go from {current} to {target}: " + phases._ADVICE[(current, target)]
    assert advice in message


def test_unknown_phase_is_refused_with_a_way_out():
    assert "run `cutover rollback`" in phases.refusal("bogus", "staged")
    assert phases.refusal("idle", "bogus").startswith("unknown phase 'bogus'")


@pytest.mark.parametrize("current,staged,new,expected", [
    ("idle", None, "r1", "staged"),
    ("staged", "r1", "r1", "staged"),
    ("shadow_passed", "r1", "r1", "shadow_passed"),  # restaging the same release keeps its verdict
    ("shadow_passed", "r1", "r2", "staged"),  # a new release must be shadowed again
    ("rolled_back", "r1", "r1", "staged"),
])
def test_phase_after_stage(current, staged, new, expected):
    assert phases.phase_after_stage(current, staged, new) == expected
