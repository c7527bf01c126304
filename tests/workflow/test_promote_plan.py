"""Promote refuses unless the exact staged release passed shadow on each target; nothing changes on refusal."""

import pytest

from cutover.errors import PhaseError
from cutover.workflow.observe import HostLink
from cutover.workflow.promote import plan_promotion

from .hostfiles import SETTINGS, local_host, write_control, write_heartbeats, write_phase, write_verdict

RUN = "20261129T090000Z-aaaaaa"


def passed_host(tmp_path, name="h1"):
    host = local_host(tmp_path, name)
    write_phase(host, "shadow_passed", run_id=RUN)
    write_verdict(host, RUN, baseline={"verify_rate": 7.0})
    write_heartbeats(host)
    write_control(host)
    return host


def plan(*hosts, force=False):
    return plan_promotion([HostLink(host, SETTINGS) for host in hosts], force)


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
        (lambda h: (write_phase(h, "shadow_passed", release_id="rel-b", run_id=RUN), write_heartbeats(h, "rel-b")),
         "did not pass release rel-b"),
        (lambda h: write_heartbeats(h) or _age_heartbeats(h), "not every rank is heartbeating"),
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
    import json
    for rank in range(host.tp_size):
        data = json.loads(open(host.paths.heartbeat(rank)).read())
        data["written_at"] -= 3600
        open(host.paths.heartbeat(rank), "w").write(json.dumps(data))


def test_force_plans_the_refused_host_and_keeps_the_refusal_for_the_journal(tmp_path):
    host = passed_host(tmp_path)
    write_phase(host, "staged")
    [only] = plan(host, force=True)
    assert only.action == "promote" and "has not passed shadow" in only.override


def test_already_promoted_is_a_no_op_plan(tmp_path):
    host = passed_host(tmp_path)
    write_phase(host, "promoted", run_id=RUN)
    write_control(host, mode="custom", generation=5)
    assert plan(host)[0].action == "already promoted"
    write_control(host, mode="custom", generation=5, lease_expires_at=9e9)  # still under its watch lease
    with pytest.raises(PhaseError, match="has not passed shadow"):
        plan(host)
