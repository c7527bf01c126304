"""The sandbox's stand-in for SGLang's speculative series: generated tokens and accept length from its traffic."""

import pytest

from cutover.sandbox.speculative import ACCEPT_LOG_STEPS, SpeculativeStats


def values(stats: SpeculativeStats) -> tuple[float, float]:
    """(sglang:generation_tokens_total, sglang:spec_accept_length) as /metrics would show them."""
    return (stats.registry.get_sample_value("sglang:generation_tokens_total"),
            stats.registry.get_sample_value("sglang:spec_accept_length"))


def test_each_request_of_a_step_accepts_one_to_the_trees_depth_plus_one_tokens():
    stats = SpeculativeStats(seed=3)
    for _ in range(ACCEPT_LOG_STEPS - 1):
        stats.record(tree_size=8, requests=2)  # depth log2(8) = 3: 1 to 4 tokens a request
    tokens, accept = values(stats)
    steps = ACCEPT_LOG_STEPS - 1
    assert 2 * steps <= tokens <= 8 * steps and tokens != 2 * steps
    assert accept == 0  # not logged before a full interval: SGLang's gauge reads 0 then, which probes leave out
    stats.record(tree_size=8, requests=2)
    tokens, accept = values(stats)
    assert accept == tokens / (2 * ACCEPT_LOG_STEPS) and 1 < accept < 4


def test_the_accept_length_is_the_running_mean_since_the_rank_started():
    stats = SpeculativeStats(seed=7)
    for step in range(3 * ACCEPT_LOG_STEPS):
        stats.record(tree_size=64 if step % 3 else 4, requests=1 + step % 5)  # a mix of trees and batch sizes
    tokens, accept = values(stats)
    requests = sum(1 + step % 5 for step in range(3 * ACCEPT_LOG_STEPS))
    assert accept == tokens / requests


def test_larger_trees_accept_more_tokens():
    small, large = SpeculativeStats(seed=5), SpeculativeStats(seed=5)
    for _ in range(ACCEPT_LOG_STEPS):
        small.record(tree_size=4, requests=3)
        large.record(tree_size=16, requests=3)
    assert values(small)[1] < values(large)[1]


@pytest.mark.parametrize(("tree_size", "requests"), [(0, 1), (8, 0)])
def test_an_impossible_step_is_refused_by_name(tree_size, requests):
    with pytest.raises(ValueError, match=f"tree size {tree_size} and {requests} request"):
        SpeculativeStats(seed=1).record(tree_size, requests)
