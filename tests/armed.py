"""What a rank needs before it runs shadow or custom: the release it loaded (`<cutover_root>/current`, as
`cutover stage` leaves it) and a control record with the fields `cutover shadow` and `cutover promote` write."""

from __future__ import annotations

import os
import time

from cutover.hostprotocol.hostlayout import ControlRecord, HostPaths

TEST_RELEASE = "0123456789-test00"


def stage_test_release(paths: HostPaths, release_id: str = TEST_RELEASE) -> str:
    """An empty release `release_id` made current (ranks without a GPU load no library from it)."""
    os.makedirs(paths.release(release_id))
    os.symlink(paths.release(release_id), paths.current)
    return release_id


def armed_record(mode: str, generation: int, *, lease_s: float | None = 60.0, sample_rate: int = 1,
                 release_id: str = TEST_RELEASE, set_by: str = "test") -> ControlRecord:
    """control.json asking for `mode` as the CLI writes it (lease_s None: leaseless, as after a promote)."""
    return ControlRecord(mode=mode, generation=generation, sample_rate=sample_rate, set_by=set_by,
                         set_at=time.time(), release_id=release_id,
                         lease_expires_at=None if lease_s is None else time.time() + lease_s)
