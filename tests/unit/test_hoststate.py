"""Host state through the local transport: control generations, lock, phase, journal, acknowledgement."""

import json
import threading
import time

import pytest

from cutover import config
from cutover.config import Settings
from cutover.errors import AckTimeoutError, HostError, LockHeldError, PhaseError
from cutover.hostprotocol.hostlayout import ControlRecord, Heartbeat
from cutover.hostprotocol.statsrecord import StatsRecord
from cutover.hoststate import STATS_TAIL_BYTES, HostState, summarize_stats
from cutover.transport import LocalTransport

from .conftest import read_journal


def make_state(local_inventory, operator="alice@test", **settings) -> HostState:
    host = config.load_inventory(str(local_inventory)).hosts[0]
    return HostState(host, LocalTransport(host.name), Settings(operator=operator, **settings))


def write_heartbeat(state: HostState, rank: int, generation: int, mode="triton", written_at=None):
    beat = Heartbeat(rank=rank, pid=1, host="local", mode_active=mode, generation_seen=generation,
                     release_id="r1", kernel="reference (no GPU)", written_at=written_at or time.time())
    state.transport.write_atomic(state.paths.heartbeat(rank), beat.to_json())


def test_set_mode_bumps_the_generation_atomically(local_inventory):
    state = make_state(local_inventory)
    first = state.set_mode("shadow", reason="t", lease_s=60, sample_rate=4)
    second = state.set_mode("triton", reason="t")
    assert (first.generation, second.generation) == (1, 2)
    on_disk = ControlRecord.from_json(open(state.paths.control).read())
    assert (on_disk.mode, on_disk.generation, on_disk.sample_rate, on_disk.set_by) == ("triton", 2, 4, "alice@test")


def test_corrupt_control_is_replaced_above_what_ranks_saw(local_inventory):
    state = make_state(local_inventory)
    write_heartbeat(state, 0, generation=7)
    state.transport.write_atomic(state.paths.control, "{not json")
    with pytest.raises(HostError, match="is corrupt"):
        state.read_control()
    assert state.set_mode("triton", reason="repair").generation == 8


def test_renew_lease_refuses_when_someone_changed_the_generation(local_inventory):
    state = make_state(local_inventory)
    armed = state.set_mode("shadow", reason="t", lease_s=5)
    renewed = state.renew_lease(armed.generation, ttl_s=100)
    assert renewed.lease_expires_at > armed.lease_expires_at and renewed.generation == armed.generation
    state.set_mode("triton", reason="someone rolled back")
    with pytest.raises(HostError, match=f"control generation is {armed.generation + 1} \\(triton, set by "
                                        f"alice@test\\), not {armed.generation}: someone else changed the mode"):
        state.renew_lease(armed.generation, ttl_s=100)


def test_lock_refuses_a_second_operator_by_name(local_inventory):
    alice = make_state(local_inventory, "alice@test")
    bob = make_state(local_inventory, "bob@test")
    lock = alice.acquire_lock("stage", ttl_s=300)
    with pytest.raises(LockHeldError) as caught:
        bob.acquire_lock("shadow")
    assert caught.value.message.startswith("host local is locked by alice@test (stage, ")
    assert caught.value.exit_code == 5
    bob.release_lock(lock.__class__(**{**lock.__dict__, "token": "not-bobs"}))  # not his: left alone
    assert alice.read_lock().token == lock.token
    alice.release_lock(lock)
    assert alice.read_lock() is None


def test_expired_lock_is_taken_over_and_journaled(local_inventory, state_dir):
    alice = make_state(local_inventory, "alice@test")
    bob = make_state(local_inventory, "bob@test")
    alice.acquire_lock("shadow", ttl_s=0.01)
    time.sleep(0.05)
    taken = bob.acquire_lock("stage", ttl_s=60)
    assert bob.read_lock().owner == "bob@test" and bob.read_lock().token == taken.token
    (entry,) = [e for e in read_journal(state_dir) if e["action"] == "lock_takeover"]
    assert (entry["actor"], entry["previous_owner"], entry["previous_action"]) == ("bob@test", "alice@test", "shadow")
    with pytest.raises(LockHeldError, match="our lock was lost"):
        alice.renew_lock(alice.read_lock().__class__(**{**taken.__dict__, "token": "alices-old"}))


def test_same_operator_reacquires_its_own_lock(local_inventory):
    state = make_state(local_inventory)
    first = state.acquire_lock("stage", ttl_s=60)
    second = state.acquire_lock("stage", ttl_s=60)  # e.g. a re-run after a killed stage
    assert second.token != first.token and state.read_lock().token == second.token


def test_phase_transitions_are_enforced(local_inventory):
    state = make_state(local_inventory)
    assert state.read_phase().phase == "idle"
    with pytest.raises(PhaseError) as caught:
        state.set_phase("promoted")
    assert str(caught.value) == "host local: cannot go from idle to promoted: promoted can only follow shadow_passed"
    state.set_phase("staged", release_id="r1")
    state.set_phase("shadowing", run_id="run-1")
    record = state.set_phase("shadow_passed", run_id="run-1")
    assert (record.phase, record.release_id, record.run_id) == ("shadow_passed", "r1", "run-1")
    assert state.set_phase("staged", force=False).phase == "staged"
    assert state.set_phase("promoted", force=True).phase == "promoted"


def test_wait_for_ack_without_a_serving_process_returns_at_once(local_inventory):
    state = make_state(local_inventory)
    result = state.wait_for_ack(3, timeout_s=5)
    assert not result.serving and "no serving process" in result.summary()


def write_control(state: HostState, generation: int, mode="triton"):
    state.transport.write_atomic(state.paths.control, ControlRecord(mode=mode, generation=generation).to_json())


def test_wait_for_ack_waits_for_every_rank(local_inventory):
    state = make_state(local_inventory)
    write_heartbeat(state, 0, 1)
    write_heartbeat(state, 1, 1)
    write_control(state, 2)
    writer = threading.Timer(0.5, lambda: [write_heartbeat(state, r, 2) for r in (0, 1)])
    writer.start()
    started = time.monotonic()
    result = state.wait_for_ack(2, timeout_s=10)
    assert result.serving and time.monotonic() - started >= 0.4
    assert [v.heartbeat.generation_seen for v in result.ranks] == [2, 2]


def test_ack_timeout_names_the_lagging_ranks(local_inventory):
    state = make_state(local_inventory)
    write_heartbeat(state, 0, 5)
    write_heartbeat(state, 1, 4)
    write_control(state, 5)
    with pytest.raises(AckTimeoutError) as caught:
        state.wait_for_ack(5, timeout_s=0.3)
    assert "rank 1: at generation 4" in caught.value.message and "rank 0" not in caught.value.message


def test_a_flip_to_triton_is_acknowledged_only_by_ranks_that_run_triton(local_inventory):
    state = make_state(local_inventory)
    write_heartbeat(state, 0, 5, mode="triton")
    write_heartbeat(state, 1, 5, mode="custom")
    write_control(state, 5)
    assert state.wait_for_ack(5, timeout_s=0.3).serving  # the generation alone: both ranks saw it
    with pytest.raises(AckTimeoutError) as caught:
        state.wait_for_ack(5, timeout_s=0.3, mode="triton")
    assert "acknowledged generation 5 in mode triton" in caught.value.message
    assert "rank 1: at generation 5, active custom" in caught.value.message and "rank 0" not in caught.value.message


def test_a_control_file_replaced_while_waiting_is_named(local_inventory):
    """Control.json put back below the awaited generation by a writer that ignores the control write lock (a
    hand edit): the ranks that had not read the awaited generation never will, so the wait stops and says so."""
    state = make_state(local_inventory)
    write_heartbeat(state, 0, 5)
    write_heartbeat(state, 1, 4)
    write_control(state, 4, mode="shadow")
    with pytest.raises(HostError, match="control.json was replaced while waiting for generation 5: it now holds "
                                        "generation 4 \\(shadow\\)"):
        state.wait_for_ack(5, timeout_s=5)


def test_stale_heartbeats_mean_no_serving_process(local_inventory):
    state = make_state(local_inventory, heartbeat_stale_s=10)
    for rank in (0, 1):
        write_heartbeat(state, rank, 1, written_at=time.time() - 60)
    assert not state.wait_for_ack(2, timeout_s=1).serving
    assert state.serving_release() is None


def test_journal_tail_verdict_and_divergence(local_inventory, state_dir):
    state = make_state(local_inventory)
    for index in range(2000):  # longer than the tail window: only the last line matters
        state.journal("noise", index=index)
    assert state.last_journal_entry()["index"] == 1999
    state.transport.write_atomic(f"{state.paths.verdicts}/20261129T0800Z-a.json", json.dumps({"verdict": "fail"}))
    state.transport.write_atomic(f"{state.paths.verdicts}/20261129T0900Z-b.json", json.dumps({"verdict": "pass"}))
    assert state.latest_verdict() == {"verdict": "pass"}
    line = {"ts": 1.0, "rank": 1, "generation": 3, "mode": "shadow", "kernel": "cuda", "layers": {
        "3": {"calls": 10, "compared": 5, "rel_l2_max": 1e-3, "max_abs": 0.5, "nonfinite_custom": 1,
              "nonfinite_stock": 0},
        "4": {"calls": 10, "compared": 5, "rel_l2_max": 4e-3, "max_abs": 0.1, "nonfinite_custom": 0,
              "nonfinite_stock": 2}}}
    state.transport.append_line(state.paths.stats_file(1), json.dumps(line))
    summary = state.recent_divergence()
    assert list(summary) == [1]
    assert summary[1] == summarize_stats(StatsRecord.parse(line)) == {"ts": 1.0, "mode": "shadow", "kernel": "cuda", "calls": 20,
                                                   "compared": 10, "rel_l2_max": 4e-3, "max_abs": 0.5, "nonfinite": 3}


def stats_line(layers: int, rel_l2_max: float) -> dict:
    """A stats record shaped like the plugin's (`StatsRecord`), with `layers` layers."""
    entry = {"calls": 10, "compared": 5, "rel_l2_max": rel_l2_max, "max_abs": 0.5, "nonfinite_custom": 0,
             "nonfinite_stock": 0, "rel_l2_hist": [0] * 20 + [5] + [0] * 20}
    return {"ts": 1.0, "rank": 0, "generation": 3, "mode": "shadow", "kernel": "cuda",
            "layers": {str(i): entry for i in range(layers)}}


def test_divergence_of_a_model_with_many_layers_skips_half_and_truth_only_lines(local_inventory):
    """A 61-layer model's line is ~16 KB, more than a small tail window; the last line may be a truth-only record (no
    layers) or half-written: the summary comes from the last whole line with layers."""
    state = make_state(local_inventory)
    path = state.paths.stats_file(0)
    state.transport.append_line(path, json.dumps(stats_line(80, 1e-3)))
    big = stats_line(400, 2e-3)  # longer than the first window, so the window grows
    assert len(json.dumps(big)) > STATS_TAIL_BYTES
    state.transport.append_line(path, json.dumps(big))
    state.transport.append_line(path, json.dumps({"ts": 2.0, "rank": 0, "generation": 3, "mode": "shadow",
                                                  "layers": {}, "truth": []}))
    with open(path, "a") as handle:
        handle.write(json.dumps(stats_line(80, 9e-3))[:5000])  # a line being appended
    assert state.recent_divergence()[0] == summarize_stats(StatsRecord.parse(big))


def test_read_from_returns_whole_lines_and_the_next_offset(tmp_path):
    transport = LocalTransport("local")
    path = str(tmp_path / "stats.jsonl")
    assert transport.read_from(path, 0) is None
    with open(path, "w") as handle:
        handle.write('{"a": 1}\n{"b": 2}\n{"c"')
    text, offset = transport.read_from(path, 0)
    assert text == '{"a": 1}\n{"b": 2}\n' and offset == len(text)
    with open(path, "a") as handle:
        handle.write(': 3}\n')
    assert transport.read_from(path, offset) == ('{"c": 3}\n', offset + 9)
    assert (transport.size(path), transport.size(str(tmp_path / "missing"))) == (offset + 9, None)


def test_a_failed_local_file_operation_names_the_host_and_path(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    transport = LocalTransport("h1")
    with pytest.raises(HostError, match=f"host h1: cannot write {blocker}/control.json: "):
        transport.write_atomic(f"{blocker}/control.json", "{}")
    with pytest.raises(HostError, match=f"host h1: cannot append to {blocker}/journal.jsonl: "):
        transport.append_line(f"{blocker}/journal.jsonl", "{}")


class SlowLink(LocalTransport):
    """Each read takes 0.5 s, as over a slow VPN link."""

    def read_text(self, path):
        time.sleep(0.5)
        return super().read_text(path)


def test_each_rank_is_aged_when_its_heartbeat_is_read(local_inventory):
    state = make_state(local_inventory)
    written_at = time.time()  # one time for both, so only the reads' spacing can separate their ages
    for rank in (0, 1):
        write_heartbeat(state, rank, 1, written_at=written_at)
    slow = HostState(state.host, SlowLink(state.host.name), state.settings)
    first, second = slow.ranks()
    assert second.age_s - first.age_s >= 0.45  # the second read came 0.5 s later: not one `now` for both
