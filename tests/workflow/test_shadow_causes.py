"""A run ended by something other than the kernel says what: another operator's rollback (named from the host's
journal, with when and why), or the rank whose heartbeat stopped first when a serving process went down."""

from __future__ import annotations

import threading
import time

import pytest

from checks.gates import RankObservation
from cutover.config import Settings
from cutover.errors import GateFailedError
from cutover.hostprotocol.hostlayout import read_heartbeat
from cutover.rollback import rollback_hosts
from cutover.workflow.verdict import first_to_stop, operator_rollbacks

from .test_shadow_run import world  # noqa: F401 - world: a fixture

BOB = Settings(operator="bob@elsewhere", ack_timeout_s=5.0)


def test_another_operators_rollback_is_named_with_when_and_why(world):
    hosts, run = world({"h1": True}, duration_s=30.0)
    [h1] = hosts

    def bob_rolls_back_once_shadow_runs():
        deadline = time.time() + 20
        while time.time() < deadline:
            beat = read_heartbeat(h1.paths.heartbeat(0))
            if beat is not None and beat.mode_active == "shadow":
                rollback_hosts(None, [h1], BOB, reason="pager: p99 latency")
                return
            time.sleep(0.05)

    bob = threading.Thread(target=bob_rolls_back_once_shadow_runs, daemon=True)
    bob.start()
    with pytest.raises(GateFailedError) as caught:
        run()
    bob.join(timeout=10)
    message = str(caught.value)
    head = message.split(": ", 1)[1]
    assert head.startswith("rolled back: host h1 by bob@elsewhere at "), message
    assert "(pager: p99 latency), overriding this run's lock: an operator ended the run" in message
    assert caught.value.hint == "ask who rolled back why (`cutover status` shows the journal), then shadow again"


def observation(rank, age, mode, reason=""):
    return RankObservation("h1", rank, age, mode, reason=reason)


def test_the_rank_whose_heartbeat_stopped_first_is_named():
    """kill -9 of rank 1: its last heartbeat (still shadow) is older than rank 0's, which left shadow when the
    serving process went down with rank 1."""
    seen = [observation(0, 0.3, "triton", "process exited"), observation(1, 2.4, "shadow")]
    assert first_to_stop(seen, "shadow") == [
        "first to stop: h1 rank 1 (last heartbeat 2.4 s ago, still in shadow); rank(s) 0 left shadow after it"]


def test_no_rank_is_named_when_every_rank_left_together():
    """A rollback moves every rank to triton: none stopped first."""
    seen = [observation(0, 0.3, "triton"), observation(1, 0.1, "triton")]
    assert first_to_stop(seen, "shadow") == []
    assert first_to_stop([observation(0, 0.2, "shadow"), observation(1, 0.4, "shadow")], "shadow") == []


def test_only_rollbacks_by_others_since_the_start_are_named():
    journal = [
        {"action": "rollback", "actor": "carol", "ts": 50.0, "reason": "old"},
        {"action": "shadow_armed", "actor": "tester@here", "ts": 100.0},
        {"action": "rollback_overrode_lock", "actor": "bob", "ts": 120.0},
        {"action": "rollback", "actor": "bob", "ts": 120.5, "reason": "pager"},
        {"action": "rollback", "actor": "tester@here", "ts": 130.0},
        {"action": "rollback", "actor": "mallory", "ts": "soon"},
    ]
    assert operator_rollbacks("h1", journal, 100.0, "tester@here") == [
        "rolled back: host h1 by bob at 1970-01-01 00:02:00 UTC (pager), overriding this run's lock: an operator "
        "ended the run"]
