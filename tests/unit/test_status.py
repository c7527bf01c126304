"""`cutover status` table and JSON: the lock's holder (and a dead one), rank reasons and stopped ranks, a corrupt
phase file, the verdict's outcome (and one spent by a rollback), which verdict is the latest, the SANDBOX label,
full-width tables in logs, and `--watch` until Ctrl-C."""

import json
import os
import signal
import socket
import subprocess
import time

import pytest
from clirunner import Cli

from cutover.cli.status import _rank_notes, _stack_notes
from cutover.errors import LockHeldError
from cutover.hostprotocol.hostlayout import Heartbeat
from cutover.workflow.verdict import VerdictRecord

from .conftest import write_inventory
from .test_hoststate import make_state

UNCLEAN = ("previous process (pid 4242) exited uncleanly while armed in custom at generation 3; staying on "
           "triton until a newer generation is written")


def tables(output: str) -> list[list[list[str]]]:
    """The rows of each rich table in `output` (hosts, then ranks), each row a list of its cells."""
    found = []
    for line in output.splitlines():
        if line.startswith("┏"):
            found.append([])
        elif line.startswith("│"):
            found[-1].append([cell.strip() for cell in line.strip("│").split("│")])
    return found


def host_status(invoke, inventory) -> dict:
    result = invoke("status", "-i", inventory, "--json")
    assert result.exit_code == 0, result.stderr
    (host,) = json.loads(result.stdout)["hosts"]
    return host


def status_table(invoke, inventory) -> str:
    result = invoke("status", "-i", inventory)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def write_beat(state_dir, rank: int, **fields) -> None:
    beat = Heartbeat(**{"rank": rank, "pid": 4242 + rank, "host": "local", "mode_active": "triton",
                        "generation_seen": 3, "release_id": "r1", "kernel": "cuda", "written_at": time.time(),
                        **fields})
    (state_dir / "runtime").mkdir(parents=True, exist_ok=True)
    (state_dir / "runtime" / f"rank-{rank}.json").write_text(beat.to_json())


def write_verdict(state_dir, run_id: str, outcome: str) -> None:
    record = VerdictRecord(run_id=run_id, release_id="r1", hosts=["local"], outcome=outcome, reasons=["why"],
                           started_at=0.0, ended_at=1.0, policy_source="default", actor="alice@test")
    (state_dir / "verdicts").mkdir(parents=True, exist_ok=True)
    (state_dir / "verdicts" / f"{run_id}.json").write_text(record.to_json())


def write_phase(state_dir, run_id: str | None) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "phase.json").write_text(json.dumps({"phase": "shadow_passed", "release_id": "r1",
                                                      "run_id": run_id}))


def test_the_lock_is_shown_with_its_pid_and_machine(invoke, local_inventory, state_dir):
    state_dir.mkdir()
    (state_dir / "lock").write_text(json.dumps({
        "owner": "bob@elsewhere", "action": "shadow", "acquired_at": time.time(), "expires_at": time.time() + 605,
        "token": "bobs", "pid": 4242, "client": "laptop-bob"}))

    lock = host_status(invoke, local_inventory)["lock"]
    assert lock["description"] in ("bob@elsewhere (shadow, 605 s left, pid 4242 on laptop-bob)",
                                   "bob@elsewhere (shadow, 604 s left, pid 4242 on laptop-bob)")
    (row,), _ = tables(status_table(invoke, local_inventory))
    assert row[6] in ("bob@elsewhere (shadow, 605 s left, pid 4242 on laptop-bob)",
                      "bob@elsewhere (shadow, 604 s left, pid 4242 on laptop-bob)")


def test_a_free_lock_reads_free(invoke, local_inventory):
    (row,), _ = tables(status_table(invoke, local_inventory))
    assert row[6] == "free"


def test_a_ranks_reason_is_a_line_under_the_ranks_table_and_a_stopped_rank_says_so(invoke, local_inventory,
                                                                                    state_dir):
    write_beat(state_dir, 0, reason=UNCLEAN)
    write_beat(state_dir, 1, counters={"stopped": 1})

    ranks = host_status(invoke, local_inventory)["ranks"]
    assert [(r["reason"], r["stopped"], r["live"]) for r in ranks] == [(UNCLEAN, False, True), ("", True, False)]

    table = status_table(invoke, local_inventory)
    (host_row,), (rank0, rank1) = tables(table)
    assert host_row[3] == "1/2 triton"
    assert rank0[:6] == ["local", "0", "triton", "3", "r1", "0s"]
    assert rank1[:6] == ["local", "1", "stopped", "3", "r1", "0s"]
    assert table.endswith(f"\nhost local rank 0: {UNCLEAN}\nhost local serves with not reported (a plugin older "
                          "than the serving-stack heartbeat)\n")  # rank 1 stopped: not serving


def test_a_stale_rank_is_still_marked_stale(invoke, local_inventory, state_dir):
    write_beat(state_dir, 0)
    write_beat(state_dir, 1)
    beat = json.loads((state_dir / "runtime" / "rank-1.json").read_text())
    (state_dir / "runtime" / "rank-1.json").write_text(json.dumps({**beat, "written_at": time.time() - 600}))
    _, (rank0, rank1) = tables(status_table(invoke, local_inventory))
    assert (rank0[2], rank0[5]) == ("triton", "0s")
    assert (rank1[2], rank1[5]) == ("triton", "10m (stale)")


def test_ranks_with_one_reason_share_a_line():
    reason = "lease of generation 4 (shadow) expired at 2024-01-01T00:00:00Z; running triton until a newer " \
             "generation arrives"
    statuses = [{"host": "ct200", "reachable": True,
                 "ranks": [{"rank": 0, "reason": reason}, {"rank": 1, "reason": reason}, {"rank": 2, "reason": ""},
                           {"rank": 3, "reason": UNCLEAN}]},
                {"host": "gone", "reachable": False, "error": "unreachable"}]
    assert _rank_notes(statuses) == [f"host ct200 ranks 0, 1: {reason}", f"host ct200 rank 3: {UNCLEAN}"]


def test_a_corrupt_phase_file_is_explained_under_the_hosts_table(invoke, local_inventory, state_dir):
    state_dir.mkdir()
    (state_dir / "phase.json").write_text("{torn")
    error = (f"host local: {state_dir / 'phase.json'} is corrupt (phase file is not valid JSON: JSONDecodeError: "
             "Expecting property name enclosed in double quotes: line 1 column 2 (char 1))")
    assert host_status(invoke, local_inventory)["phase_error"] == error

    table = status_table(invoke, local_inventory)
    (row,), _ = tables(table)
    assert row[1] == "unknown"
    lines = table.splitlines()
    hosts_table_end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    assert lines[hosts_table_end + 1] == error


def test_an_aborted_shadow_run_shows_as_aborted(invoke, local_inventory, state_dir):
    write_phase(state_dir, "20240101T000000Z-aaaaaa")
    write_verdict(state_dir, "20240101T000000Z-aaaaaa", "aborted")

    verdict = host_status(invoke, local_inventory)["verdict"]
    assert (verdict["outcome"], verdict["run_id"]) == ("aborted", "20240101T000000Z-aaaaaa")
    (row,), _ = tables(status_table(invoke, local_inventory))
    assert row[8] == "aborted 20240101T000000Z-aaaaaa r1"


def test_status_shows_the_verdict_of_the_run_the_phase_names(invoke, local_inventory, state_dir):
    write_phase(state_dir, "20240101T000000Z-aaaaaa")
    write_verdict(state_dir, "20240101T000000Z-aaaaaa", "passed")
    write_verdict(state_dir, "20990101T000000Z-ffffff", "failed")  # a laptop whose clock runs far ahead

    assert host_status(invoke, local_inventory)["verdict"]["run_id"] == "20240101T000000Z-aaaaaa"
    (row,), _ = tables(status_table(invoke, local_inventory))
    assert row[8] == "passed 20240101T000000Z-aaaaaa r1"


def test_latest_verdict_falls_back_to_the_newest_by_name(local_inventory, state_dir):
    state = make_state(local_inventory)
    assert state.latest_verdict() is None
    write_verdict(state_dir, "20240101T000000Z-aaaaaa", "passed")
    write_verdict(state_dir, "20240102T000000Z-bbbbbb", "failed")

    assert state.latest_verdict()["run_id"] == "20240102T000000Z-bbbbbb"  # no phase file
    write_phase(state_dir, "20240103T000000Z-cccccc")  # a run whose verdict this host never got
    assert state.latest_verdict()["run_id"] == "20240102T000000Z-bbbbbb"
    (state_dir / "phase.json").write_text("{torn")
    assert state.latest_verdict()["run_id"] == "20240102T000000Z-bbbbbb"
    write_phase(state_dir, "20240101T000000Z-aaaaaa")
    assert state.latest_verdict()["run_id"] == "20240101T000000Z-aaaaaa"


def test_an_unreadable_verdict_of_the_phases_run_says_so(invoke, local_inventory, state_dir):
    write_phase(state_dir, "20240101T000000Z-aaaaaa")
    write_verdict(state_dir, "20240102T000000Z-bbbbbb", "passed")
    (state_dir / "verdicts" / "20240101T000000Z-aaaaaa.json").write_text("{torn")
    (row,), _ = tables(status_table(invoke, local_inventory))
    assert row[8] == "unreadable 20240101T000000Z-aaaaaa"


STACK = {"sglang": "0.5.23", "torch": "2.11.0", "plugin": "0123456789ab", "gpu": "NVIDIA H200"}


def test_the_live_ranks_serving_stack_is_a_line_per_host_and_stack(invoke, local_inventory, state_dir):
    write_beat(state_dir, 0, stack=STACK)
    write_beat(state_dir, 1, stack=STACK)
    assert [r["stack"] for r in host_status(invoke, local_inventory)["ranks"]] == [STACK, STACK]
    assert status_table(invoke, local_inventory).endswith(
        "\nhost local serves with sglang 0.5.23, torch 2.11.0, plugin 0123456789ab, gpu NVIDIA H200\n")

    write_beat(state_dir, 1, stack={**STACK, "sglang": "0.5.24"})
    assert _stack_notes([host_status(invoke, local_inventory)]) == [
        "host local rank 0 serves with sglang 0.5.23, torch 2.11.0, plugin 0123456789ab, gpu NVIDIA H200",
        "host local rank 1 serves with sglang 0.5.24, torch 2.11.0, plugin 0123456789ab, gpu NVIDIA H200",
    ]


def write_stats(state_dir, rank: int, mode: str, compared: int) -> None:
    (state_dir / "stats").mkdir(parents=True, exist_ok=True)
    layer = {"calls": 10, "compared": compared, "rel_l2_max": 2e-3 if compared else 0.0,
             "max_abs": 0.01 if compared else 0.0, "nonfinite_custom": 0, "nonfinite_stock": 0}
    line = {"ts": time.time(), "mode": mode, "kernel": "cuda", "rank": rank, "generation": 1, "layers": {"3": layer}}
    with open(state_dir / "stats" / f"rank-{rank}.jsonl", "a") as handle:
        handle.write(json.dumps(line) + "\n")


def test_custom_mode_with_nothing_compared_shows_no_divergence_figures(invoke, local_inventory, state_dir):
    """Custom mode runs one kernel: there is no divergence to show, not a divergence of zero."""
    write_beat(state_dir, 0, mode_active="custom")
    write_beat(state_dir, 1, mode_active="shadow")
    write_stats(state_dir, 0, "custom", compared=0)
    write_stats(state_dir, 1, "shadow", compared=5)

    divergence = host_status(invoke, local_inventory)["divergence"]
    assert (divergence["0"]["rel_l2_max"], divergence["0"]["max_abs"]) == (None, None)
    assert divergence["1"]["rel_l2_max"] == 2e-3
    _, (rank0, rank1) = tables(status_table(invoke, local_inventory))
    assert rank0[7:9] == ["-", "-"]
    assert rank1[7:9] == ["2.00e-03", "1.00e-02"]


def write_lock_of_a_dead_holder(state_dir) -> int:
    """bob's lock on this machine, held by a cutover process that has ended; returns that pid."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    state_dir.mkdir()
    (state_dir / "lock").write_text(json.dumps({
        "owner": "bob@elsewhere", "action": "shadow", "acquired_at": time.time(), "expires_at": time.time() + 600.4,
        "token": "bobs", "pid": dead.pid, "client": socket.gethostname()}))
    return dead.pid


def test_a_lock_whose_holder_died_says_so_with_the_fix(invoke, local_inventory, state_dir):
    dead_pid = write_lock_of_a_dead_holder(state_dir)

    lock = host_status(invoke, local_inventory)["lock"]
    assert lock["holder_gone"] is True
    assert lock["description"].endswith(f"pid {dead_pid} on {socket.gethostname()} - that process is gone)")
    table = status_table(invoke, local_inventory)
    note = next(line for line in table.splitlines() if "no longer running" in line)
    assert note.startswith(f"host local: the lock's holder (pid {dead_pid} on {socket.gethostname()}) is no longer "
                           "running: that cutover ended without releasing the lock. Fix: bob@elsewhere's next cutover "
                           "command takes it over; anyone else waits until it expires in ")
    assert note.endswith(" s (`cutover rollback` is never blocked)")


def test_a_live_lock_holder_gets_no_such_note(invoke, local_inventory, state_dir):
    state_dir.mkdir()
    (state_dir / "lock").write_text(json.dumps({
        "owner": "bob@elsewhere", "action": "shadow", "acquired_at": time.time(), "expires_at": time.time() + 600,
        "token": "bobs", "pid": os.getppid(), "client": socket.gethostname()}))
    assert host_status(invoke, local_inventory)["lock"]["holder_gone"] is False
    assert "no longer running" not in status_table(invoke, local_inventory)


def test_a_passed_verdict_after_a_rollback_reads_spent_as_promote_sees_it(invoke, local_inventory, state_dir):
    """promote refuses a rolled-back host; status must not present its passed verdict as promotable."""
    write_phase(state_dir, "20240101T000000Z-aaaaaa")
    write_verdict(state_dir, "20240101T000000Z-aaaaaa", "passed")
    phase = json.loads((state_dir / "phase.json").read_text())
    (state_dir / "phase.json").write_text(json.dumps({**phase, "phase": "rolled_back"}))

    host = host_status(invoke, local_inventory)
    assert host["verdict_spent"] == "rolled back since: promote needs a new passed shadow"
    table = status_table(invoke, local_inventory)
    (row,), _ = tables(table)
    assert row[8] == "passed 20240101T000000Z-aaaaaa r1 (spent)"
    assert ("host local: shadow run 20240101T000000Z-aaaaaa passed, but rolled back since: promote needs a new "
            "passed shadow") in table.splitlines()


def test_a_passed_verdict_of_the_phases_run_is_not_spent(invoke, local_inventory, state_dir):
    write_phase(state_dir, "20240101T000000Z-aaaaaa")
    write_verdict(state_dir, "20240101T000000Z-aaaaaa", "passed")
    assert host_status(invoke, local_inventory)["verdict_spent"] is None


def test_a_sandbox_host_is_labelled_in_the_table_and_the_json(invoke, tmp_path, local_inventory):
    assert host_status(invoke, local_inventory)["sandbox"] is True
    (row,), _ = tables(status_table(invoke, local_inventory))
    assert row[0] == "local (SANDBOX)"
    real = write_inventory(tmp_path / "real.yml", tmp_path, serving_kind="sglang", gpu_arch="sm_120")
    assert host_status(invoke, real)["sandbox"] is False
    (row,), _ = tables(status_table(invoke, real))
    assert row[0] == "local"


def test_status_off_a_terminal_keeps_tables_at_full_width(invoke, local_inventory, state_dir):
    """A log gets every cell whole: no 80-column squeeze (no $COLUMNS, stdout not a terminal)."""
    write_beat(state_dir, 0, release_id="r" * 40)
    write_beat(state_dir, 1, release_id="r" * 40)
    result = invoke("status", "-i", local_inventory, COLUMNS=None)
    assert result.exit_code == 0, result.stderr
    assert "r" * 40 in result.stdout and "…" not in result.stdout
    assert max(map(len, result.stdout.splitlines())) > 80


def test_status_watch_follows_until_ctrl_c_and_exits_0(tmp_path, local_inventory, state_dir):
    """A real `cutover status --watch` in a log: one plain line per host per interval; Ctrl-C ends it cleanly."""
    write_beat(state_dir, 0)
    write_beat(state_dir, 1)
    (tmp_path / "home").mkdir()
    log = tmp_path / "watch.log"
    process = Cli(tmp_path / "home", tmp_path / "releases", tmp_path).start(
        "status", "--watch", "--interval", "0.5", "-i", local_inventory, log=log)
    deadline = time.monotonic() + 120
    while log.read_text().count("\n") < 2:
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "no two watch lines within 120 s"
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 0
    *lines, last = log.read_text().splitlines()
    assert len(lines) >= 2 and last == "stopped watching (Ctrl-C); nothing on the hosts was changed"
    for line in lines:
        assert line.endswith(" local (SANDBOX): phase idle | requested - | ranks 2/2 triton | release - | lease none | "
                             "lock free | compared 0, rel L2 max - | verdict -"), line


def test_taking_a_lock_whose_holder_died_says_who_can_take_it_over(local_inventory, state_dir):
    dead_pid = write_lock_of_a_dead_holder(state_dir)
    with pytest.raises(LockHeldError) as refused:
        make_state(local_inventory).acquire_lock("stage")
    assert refused.value.message.endswith(f"pid {dead_pid} on {socket.gethostname()} - that process is gone)")
    assert refused.value.hint.startswith("its holder ended without releasing it: bob@elsewhere's next cutover command "
                                         "takes it over; the lock expires at ")
    taken = make_state(local_inventory, operator="bob@elsewhere").acquire_lock("stage")
    assert taken.owner == "bob@elsewhere" and taken.pid == os.getpid()
