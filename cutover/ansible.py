"""A thin wrapper over `ansible_runner.run`: decisions come from status, rc, stats and events, never stdout.

Each run gets a fresh private data dir holding the resolved inventory (config.Inventory.ansible_inventory),
so the playbooks see exactly the values the CLI validated. Host-key checking is forced on (ansible-runner
turns it off by default) and the venv's own ansible-playbook is used whether or not the venv is activated.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import ansible_runner

from cutover import resources
from cutover.config import Host, Inventory


@dataclass
class HostOutcome:
    """What one host did in a playbook run."""

    name: str
    ok: bool = True
    unreachable: bool = False
    changed: int = 0
    failed_task: str | None = None
    message: str | None = None
    failed_result: dict = field(default_factory=dict)
    facts: dict = field(default_factory=dict)


@dataclass
class PlaybookResult:
    playbook: str
    status: str
    rc: int
    hosts: dict[str, HostOutcome]

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0 and all(h.ok for h in self.hosts.values())

    def failed(self) -> list[HostOutcome]:
        return [h for h in self.hosts.values() if not h.ok]


def run_playbook(name: str, inventory: Inventory, hosts: list[Host], *, extravars: dict | None = None,
                 check: bool = False, verbose: bool = False) -> PlaybookResult:
    """Run playbooks/<name> on `hosts` (the --limit), return per-host outcomes."""
    playbook = resources.playbook(name)
    with tempfile.TemporaryDirectory(prefix="cutover-ansible-") as private:
        inventory_dir = Path(private, "inventory")
        inventory_dir.mkdir()
        (inventory_dir / "hosts.json").write_text(json.dumps(inventory.ansible_inventory(hosts)))
        venv_bin = os.path.dirname(sys.executable)
        runner = ansible_runner.run(
            private_data_dir=private,
            playbook=str(playbook),
            inventory=str(inventory_dir / "hosts.json"),
            limit=",".join(h.name for h in hosts),
            extravars=extravars or {},
            cmdline="--check" if check else None,
            envvars={
                "ANSIBLE_HOST_KEY_CHECKING": "True",
                "ANSIBLE_RETRY_FILES_ENABLED": "False",
                "ANSIBLE_PIPELINING": "True",  # one SSH call per task (sudoers must not require a tty)
                "ANSIBLE_NOCOLOR": "True",
                "ANSIBLE_LOCAL_TEMP": str(Path(private, "tmp")),
                "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
            },
            quiet=not verbose,
            json_mode=False,
        )
        return _collect(name, runner, hosts)


def _collect(name: str, runner, hosts: list[Host]) -> PlaybookResult:
    stats = runner.stats or {}
    outcomes = {h.name: HostOutcome(h.name) for h in hosts}
    for event in runner.events:
        data = event.get("event_data", {})
        host = data.get("host")
        if host not in outcomes:
            continue
        outcome = outcomes[host]
        result = data.get("res") or {}
        if event.get("event") == "runner_on_ok":
            outcome.facts.update(result.get("ansible_facts") or {})
        elif event.get("event") == "runner_on_failed" and not data.get("ignore_errors"):
            outcome.ok = False
            outcome.failed_task = data.get("task")
            outcome.message = str(result.get("msg") or result.get("stderr") or "failed")
            outcome.failed_result = result
        elif event.get("event") == "runner_on_unreachable":
            outcome.ok = False
            outcome.unreachable = True
            outcome.failed_task = data.get("task")
            outcome.message = str(result.get("msg") or "unreachable")
    for host, outcome in outcomes.items():
        outcome.changed = int((stats.get("changed") or {}).get(host, 0))
        if host in (stats.get("dark") or {}):
            outcome.ok, outcome.unreachable = False, True
        if host in (stats.get("failures") or {}):
            outcome.ok = False
        if stats and host not in (stats.get("processed") or {}):
            outcome.ok = False
            outcome.message = "not run: the rollout stopped at an earlier host (canary first)"
    if not stats or (runner.status != "successful" and all(o.ok for o in outcomes.values())):
        for outcome in outcomes.values():
            if outcome.ok or outcome.message is None:
                outcome.ok = False
                outcome.message = (f"{name} ended with status {runner.status} (rc {runner.rc}) before reaching "
                                   f"this host: re-run with --verbose to see Ansible's output")
    return PlaybookResult(playbook=name, status=runner.status, rc=runner.rc, hosts=outcomes)

