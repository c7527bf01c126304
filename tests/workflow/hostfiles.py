"""A local (ansible_connection: local) host whose state files a test writes the way stage/plugin would."""

import json
import time

from checks.policy import load_policy, shadow_thresholds
from cutover.config import Host, Settings
from cutover.hostprotocol.hostlayout import ControlRecord, Heartbeat, atomic_write_text


def local_host(tmp_path, name="h1", tp_size=2):
    root = tmp_path / name
    return Host(
        name=name,
        inventory_file=str(tmp_path / "inventory.yml"),
        vars={
            "ansible_connection": "local",
            "cutover_root": str(root / "opt"),
            "cutover_state_dir": str(root / "state"),
            "tp_size": tp_size,
            "serving_kind": "sandbox",
            "gpu_arch": "none",
            "serving_port": 1,
        },
    )


SETTINGS = Settings(operator="tester@here")
# the serving stack write_heartbeats reports and write_verdict records (cutover.servingstack)
STACK = {"sglang": "0.5.23", "torch": "2.11.0+cu130 (CUDA 13.0)", "plugin": "0123456789ab", "gpu": "NVIDIA H200"}


def write_phase(host, phase, release_id="rel-a", run_id=None):
    atomic_write_text(
        host.paths.phase,
        json.dumps(
            {
                "phase": phase,
                "release_id": release_id,
                "run_id": run_id,
                "updated_at": time.time(),
                "set_by": "x",
                "reason": "",
            }
        ),
    )


def write_heartbeats(host, release_id="rel-a", mode="triton", generation=1, pid=4242, stack=STACK):
    for rank in range(host.tp_size):
        beat = Heartbeat(
            rank=rank,
            pid=pid + rank,
            host=host.name,
            mode_active=mode,
            generation_seen=generation,
            release_id=release_id,
            kernel="reference (no GPU)",
            written_at=time.time(),
            stack=dict(stack),
        )
        atomic_write_text(host.paths.heartbeat(rank), beat.to_json())


def write_control(host, mode="triton", generation=1, lease_expires_at=None, release_id="rel-a"):
    record = ControlRecord(mode=mode, generation=generation, lease_expires_at=lease_expires_at, release_id=release_id)
    atomic_write_text(host.paths.control, record.to_json())
    return record


def write_verdict(host, run_id, release_id="rel-a", outcome="passed", baseline=None, policy_file=None,
                  stacks=(STACK,)):
    """A verdict as shadow writes it, judged under the policy of `policy_file` (default: the default policy), on
    `stacks` (None: no stacks recorded, as an older cutover wrote it)."""
    atomic_write_text(
        host.paths.verdict(run_id),
        json.dumps(
            {
                "run_id": run_id,
                "release_id": release_id,
                "outcome": outcome,
                "passed": outcome == "passed",
                "verdict": "pass" if outcome == "passed" else "fail",
                "baseline": {host.name: baseline or {}},
                "policy_source": str(policy_file or "default"),
                "policy_shadow": shadow_thresholds(load_policy(policy_file).shadow),
                **({} if stacks is None else {"stacks": {host.name: [dict(stack) for stack in stacks]}}),
            }
        ),
    )
