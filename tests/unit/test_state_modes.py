"""State files and report folders get explicit modes whatever the operator's umask: nobody else may write the
lock, the control write lock, the journal or a run's report folder."""

from __future__ import annotations

import os
import stat

import pytest

from cutover.config import Settings, load_inventory
from cutover.hoststate import HostState
from cutover.transport import open_transport
from cutover.hostprotocol.statsrecord import StatsRecord
from cutover.workflow.runstore import RunStore
from tests.unit.conftest import OPERATOR


@pytest.fixture
def open_umask():
    previous = os.umask(0)
    yield
    os.umask(previous)


def mode_of(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_lock_control_and_journal_are_not_world_writable_under_umask_000(local_inventory, tmp_path, open_umask):
    inventory = load_inventory(str(local_inventory))
    host = inventory.hosts[0]
    with open_transport(host) as transport:
        state = HostState(host, transport, Settings(operator=OPERATOR))
        state.acquire_lock("shadow")
        state.set_mode("triton", reason="test")
        state.journal("test")
    assert mode_of(host.paths.lock) == 0o644
    assert mode_of(host.paths.control) == 0o644
    assert mode_of(host.paths.journal) == 0o644
    assert mode_of(host.paths.state_dir) == 0o755


def test_a_run_report_folder_is_0755_under_umask_000(tmp_path, open_umask):
    store = RunStore(tmp_path / "reports", "20260101T000000Z-abcdef")
    store.save_run({"run_id": store.run_id})
    store.append_stats("host-a", StatsRecord(ts=1.0, rank=0, generation=1, mode="shadow"))
    assert mode_of(tmp_path / "reports") == 0o755
    assert mode_of(store.dir) == 0o755
    assert mode_of(store.dir / "stats" / "host-a") == 0o755
    assert mode_of(store.run_file) == 0o644
