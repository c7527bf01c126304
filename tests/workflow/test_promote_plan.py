"""Promote refuses unless the exact staged release passed shadow on each target (nothing changes on
refusal), and its watch names every kind of regression against the shadow baseline."""

import json
from pathlib import Path

import pytest

from checks.policy import load_policy
from cutover.errors import PhaseError
from cutover.hostprotocol.hostlayout import Heartbeat
from cutover.hoststate import RankView
from cutover.workflow.observe import HostLink, trackers_from_ack
from cutover.workflow.probes import ServerSample
from cutover.workflow.promote import PromoteOptions, find_regression, plan_promotion, watch_tick

from .hostfiles import SETTINGS, STACK, local_host, write_control, write_heartbeats, write_phase, write_verdict

RUN = "20261129T090000Z-aaaaaa"


def passed_host(tmp_path, name="h1"):
    host = local_host(tmp_path, name)
    write_phase(host, "shadow_passed", run_id=RUN)
    write_verdict(host, RUN, baseline={"verify_rate": 7.0})
    write_heartbeats(host)
    write_control(host)
    return host


def plan(*hosts, force=False, policy=None):
    return plan_promotion([HostLink(host, SETTINGS) for host in hosts], force, policy or load_policy())


def test_passed_release_is_planned_with_its_baseline(tmp_path):
    [only] = plan(passed_host(tmp_path))
    assert only.action == "promote" and only.release_id == "rel-a" and only.override == ""
    assert only.baseline == {"verify_rate": 7.0}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda h: write_phase(h, "staged"), "has not passed shadow"),
        (lambda h: write_phase(h, "shadow_failed", run_id=RUN), "has not passed shadow"),
        (lambda h: write_phase(h, "rolled_back", run_id=RUN), "has not passed shadow"),
        (lambda h: write_verdict(h, RUN, outcome="failed"), "did not pass release rel-a"),
        (lambda h: write_verdict(h, RUN, release_id="rel-old"), "did not pass release rel-a"),
        (lambda h: write_heartbeats(h, release_id="rel-b"), "release rel-a is staged but the ranks run rel-b"),
        (
            lambda h: (write_phase(h, "shadow_passed", release_id="rel-b", run_id=RUN), write_heartbeats(h, "rel-b")),
            "did not pass release rel-b",
        ),
        (lambda h: write_heartbeats(h) or _age_heartbeats(h), "not every rank is heartbeating"),
        (
            lambda h: write_heartbeats(h, stack={**STACK, "sglang": "0.5.24"}),
            "does not cover what the host serves with now: the serving stack changed since the run: "
            "sglang 0.5.23 -> 0.5.24",
        ),
        (
            lambda h: write_heartbeats(h, stack={**STACK, "plugin": "fedcba987654", "torch": "2.12.0"}),
            "plugin 0123456789ab -> fedcba987654; torch 2.11.0+cu130 (CUDA 13.0) -> 2.12.0",
        ),
        (lambda h: write_verdict(h, RUN, stacks=None), "the verdict records no serving stack"),
    ],
)
def test_refusals_name_the_host_and_change_nothing(tmp_path, change, expected):
    good = passed_host(tmp_path, "h1")
    bad = passed_host(tmp_path, "h2")
    change(bad)
    before = [open(h.paths.control).read() for h in (good, bad)]
    with pytest.raises(PhaseError) as caught:
        plan(good, bad)
    assert "h2" in str(caught.value) and expected in str(caught.value)
    assert "h1:" not in str(caught.value)
    assert [open(h.paths.control).read() for h in (good, bad)] == before


def _age_heartbeats(host):
    for rank in range(host.tp_size):
        data = json.loads(open(host.paths.heartbeat(rank)).read())
        data["written_at"] -= 3600
        open(host.paths.heartbeat(rank), "w").write(json.dumps(data))


def test_force_plans_the_refused_host_and_keeps_the_refusal_for_the_journal(tmp_path):
    host = passed_host(tmp_path)
    write_phase(host, "staged")
    [only] = plan(host, force=True)
    assert only.action == "promote" and "has not passed shadow" in only.override


def test_a_looser_policy_and_a_changed_stack_are_both_named_so_force_journals_both(tmp_path):
    host = passed_host(tmp_path)
    write_verdict(host, RUN, policy_file=Path(__file__).resolve().parents[2] / "checks/policies/sandbox.yml")
    write_heartbeats(host, stack={**STACK, "sglang": "0.5.24"})
    with pytest.raises(PhaseError) as caught:
        plan(host)
    assert "was judged under a looser policy" in str(caught.value)
    assert "; and it does not cover what the host serves with now: the serving stack changed since the run: " \
           "sglang 0.5.23 -> 0.5.24" in str(caught.value)
    [only] = plan(host, force=True)
    assert "looser policy" in only.override and "sglang 0.5.23 -> 0.5.24" in only.override


def test_force_overrides_a_changed_serving_stack_and_keeps_it_for_the_journal(tmp_path):
    host = passed_host(tmp_path)
    write_heartbeats(host, stack={**STACK, "gpu": "NVIDIA RTX PRO 6000 Blackwell Server Edition"})
    [only] = plan(host, force=True)
    assert only.action == "promote" and "gpu NVIDIA H200 -> NVIDIA RTX PRO 6000" in only.override


def test_already_promoted_is_a_no_op_plan(tmp_path):
    host = passed_host(tmp_path)
    write_phase(host, "promoted", run_id=RUN)
    write_control(host, mode="custom", generation=5)
    write_heartbeats(host, mode="custom", generation=5)
    assert plan(host)[0].action == "already promoted"
    write_control(host, mode="custom", generation=5, lease_expires_at=9e9)  # a promote stopped before its last flip
    with pytest.raises(PhaseError, match="host h1: phase is promoted but control.json asks for custom under a lease "
                                         r"\(fix: run `cutover rollback` on it, then shadow and promote again"):
        plan(host)
    assert plan(host, force=True)[0].action == "promote"  # --force watches and promotes it again (journaled)


def test_a_verdict_judged_under_a_looser_policy_is_refused_naming_the_fields(tmp_path):
    """A rehearsal's sandbox policy left in the environment must not let a 2-minute shadow promote prod."""
    sandbox = Path(__file__).resolve().parents[2] / "checks" / "policies" / "sandbox.yml"
    host = passed_host(tmp_path)
    write_verdict(host, RUN, baseline={"verify_rate": 7.0}, policy_file=sandbox)
    with pytest.raises(PhaseError) as caught:
        plan(host)
    message = str(caught.value)
    assert f"host h1: shadow run {RUN} was judged under a looser policy ({sandbox}) than this one (" in message
    assert "shadow.min_duration_s: the verdict was judged with 60" in message
    assert plan(host, policy=load_policy(sandbox))[0].override == ""  # promoted under the policy it was judged by
    assert "looser policy" in plan(host, force=True)[0].override  # --force overrides it, journaled


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda h: write_heartbeats(h, release_id="rel-b"),
         "host h1: release rel-a is staged but the ranks run rel-b (fix: restart serving so it loads the staged "
         "release (`cutover stage --yes`))"),
        (lambda h: write_heartbeats(h) or _age_heartbeats(h),
         "host h1: not every rank is heartbeating: the serving process is down or the plugin is not loaded (fix: "
         "start serving"),
    ],
)
def test_force_never_flips_a_host_that_does_not_serve_the_staged_release(tmp_path, change, expected):
    host = passed_host(tmp_path)
    write_phase(host, "staged")  # no shadow either: --force would override that alone
    change(host)
    with pytest.raises(PhaseError) as caught:
        plan(host, force=True)
    assert expected in str(caught.value)
    assert "has not passed shadow" not in str(caught.value)  # what --force overrides is not listed
    assert caught.value.hint.startswith("--force overrides a missing or failed shadow verdict, never a host")


def test_a_promoted_host_whose_ranks_fell_back_is_not_already_promoted(tmp_path):
    """A rank restarted after a crash refuses the generation it had armed and runs triton: promote says so and
    what to do, instead of "already promoted: nothing to do"."""
    host = passed_host(tmp_path)
    write_phase(host, "promoted", run_id=RUN)
    write_control(host, mode="custom", generation=5)
    write_heartbeats(host, mode="triton", generation=5)
    with pytest.raises(PhaseError, match="host h1: promoted, but rank 0 runs triton .*run `cutover rollback` on it"):
        plan(host)


# -- the watch: regressions against the shadow baseline ----------------------------------------------------

POLICY = load_policy()
BASE = {"verify_rate": 10.0, "accept_length": 3.0}


def custom_ranks(mode="custom"):
    views = [
        RankView(
            r,
            Heartbeat(
                rank=r, pid=100 + r, host="h1", mode_active=mode, generation_seen=4, release_id="rel-a", kernel="cuda"
            ),
            0.1,
            True,
        )
        for r in range(2)
    ]
    return trackers_from_ack("h1", views)


def samples(*points):
    """(seconds, verify steps, errors, nonfinite, accept length) -> healthy samples."""
    return [
        ServerSample(at=t, healthy=True, verify_steps_total=v, errors_total=e, nonfinite_total=n, accept_length=a)
        for t, v, e, n, a in points
    ]


def test_steady_host_has_no_regression():
    series = samples((0, 0, 2, 0, 3.0), (5, 50, 2, 0, 3.1), (10, 100, 2, 0, 2.9))
    assert find_regression(POLICY, BASE, custom_ranks(), series, 0, series[-1]) is None


@pytest.mark.parametrize(
    ("series", "failed", "expected"),
    [
        (samples((0, 0, 2, 0, 3.0), (5, 50, 3, 0, 3.0)), 0, "new errors"),
        (samples((0, 0, 0, 0, 3.0), (5, 50, 0, 1, 3.0)), 0, "new non-finite outputs"),
        (samples((0, 0, 0, 0, 3.0), (5, 10, 0, 0, 3.0), (10, 20, 0, 0, 3.0)), 0, "verify steps/s fell to 2.00"),
        (samples((0, 0, 0, 0, 2.0), (5, 50, 0, 0, 2.0)), 0, "accept length fell to 2.00"),
        (samples((0, 0, 0, 0, 3.0)), POLICY.promote.max_failed_probes, "consecutive failed health probes"),
    ],
)
def test_each_regression_is_named(series, failed, expected):
    last = series[-1] if not failed else ServerSample(at=9, healthy=False, error="HTTP 503")
    assert expected in find_regression(POLICY, BASE, custom_ranks(), series, failed, last)


def test_rank_off_custom_or_restarted_is_a_regression():
    series = samples((0, 0, 0, 0, 3.0))
    assert "running triton, not custom" in find_regression(POLICY, BASE, custom_ranks("triton"), series, 0, series[0])
    ranks = custom_ranks()
    ranks[1].update(
        RankView(
            1,
            Heartbeat(
                rank=1,
                pid=999,
                host="h1",
                mode_active="custom",
                generation_seen=4,
                release_id="rel-a",
                kernel="cuda",
                written_at=1.0,
            ),
            0.1,
            True,
        )
    )
    assert "rank 1 restarted" in find_regression(POLICY, BASE, ranks, series, 0, series[0])


def test_the_watch_shows_tokens_per_s_and_accept_length_beside_the_shadows():
    series = [ServerSample(at=t, healthy=True, verify_steps_total=10 * t, accept_length=2.5,
                           generation_tokens_total=1000 + 60 * t) for t in (0, 5, 10)]
    base = {**BASE, "tokens_per_s": 50.0}
    tick = watch_tick("h1", POLICY, base, series, 0, series[-1], 10.0, PromoteOptions(POLICY, 1), 20.0)
    assert (tick.tokens_per_s, tick.base_tokens_per_s, tick.accept_length) == (60.0, 50.0, 2.5)
    assert tick.line().endswith(
        f"| accept length 2.50 vs shadow {BASE['accept_length']:.2f} | tokens/s 60.00 vs shadow 50.00 "
        "| lease 20 s left")


def test_a_server_without_token_figures_gives_the_watch_none_and_the_line_leaves_them_out():
    series = samples((0, 0, 0, 0, None), (5, 50, 0, 0, None), (10, 100, 0, 0, None))
    tick = watch_tick("h1", POLICY, {"verify_rate": 10.0}, series, 0, series[-1], 10.0, PromoteOptions(POLICY, 1),
                      20.0)
    assert tick.tokens_per_s is None and tick.base_tokens_per_s is None
    assert "tokens/s" not in tick.line() and "accept length" not in tick.line()
