#!/usr/bin/python
"""Ansible module: the release's kernel acceptance on this host's GPU, before stage points `current` at it.

Runs cutover/hostprotocol/acceptance.py (module_utils link): the release's GPU parity subset in the serving Python, on GPU
`device`. A pass is recorded in <state_dir>/acceptance/<release_id>.json with the sha256 of the library it ran,
so a re-run of the same stage skips it, while another build under the same id (other library bytes) runs it
again and says why; the run's output stays in <release_id>.log. Every outcome is journaled (action gpu_check).
A host without a GPU (sandbox) has nothing to run; `enabled: false` (the inventory's gpu_check) skips the run,
journaled. Under CUDA MPS with serving live the run is refused: a fault in it would reach the serving ranks on
its GPU.
"""

from __future__ import annotations

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cutover_hostprotocol.acceptance import (
    PYTHON_DIR,
    log_tail,
    mps_control_pipe,
    recorded_pass,
    run_acceptance,
)
from ansible.module_utils.cutover_hostprotocol.hostlayout import (
    HostPaths,
    append_jsonl,
    atomic_write_text,
    journal_entry,
    live_heartbeats,
    read_json,
    sha256_file,
)

DOCUMENTATION = r"""
module: cutover_acceptance
short_description: Run a kernel release's GPU parity subset on the host before it goes live
options:
  release_dir: {type: path, required: true, description: "the staged release directory"}
  release_id: {type: str, required: true, description: "its id"}
  serving_python: {type: str, required: true, description: "python of the serving environment (torch, SGLang)"}
  cutover_root: {type: path, required: true, description: "release root"}
  state_dir: {type: path, required: true, description: "state directory"}
  operator: {type: str, required: true, description: "who acts (journal)"}
  gpu_arch: {type: str, required: true, description: "the inventory's gpu_arch; none = no GPU (sandbox)"}
  enabled: {type: bool, default: true, description: "the inventory's gpu_check"}
  device: {type: int, default: 0, description: "which GPU runs the check (CUDA_VISIBLE_DEVICES)"}
  timeout_s: {type: float, default: 900, description: "the run is killed and refused after this long"}
  tp_size: {type: int, default: 1, description: "ranks that heartbeat while serving runs"}
  stale_s: {type: float, default: 10, description: "a heartbeat older than this is not live serving"}
"""


def library_sha256(release_dir, manifest):
    """The sha256 of the release's kernel library as it is on disk now, or None without one."""
    library = manifest.get("library")
    path = os.path.join(release_dir, library or "")
    return sha256_file(path) if library and os.path.isfile(path) else None


def main():
    module = AnsibleModule(
        argument_spec={
            "release_dir": {"type": "path", "required": True},
            "release_id": {"type": "str", "required": True},
            "serving_python": {"type": "str", "required": True},
            "cutover_root": {"type": "path", "required": True},
            "state_dir": {"type": "path", "required": True},
            "operator": {"type": "str", "required": True},
            "gpu_arch": {"type": "str", "required": True},
            "enabled": {"type": "bool", "default": True},
            "device": {"type": "int", "default": 0},
            "timeout_s": {"type": "float", "default": 900},
            "tp_size": {"type": "int", "default": 1},
            "stale_s": {"type": "float", "default": 10},
        },
        supports_check_mode=True,
    )
    p = module.params
    paths = HostPaths(cutover_root=p["cutover_root"], state_dir=p["state_dir"])
    release_id, device = p["release_id"], p["device"]

    def journal(outcome, **details):
        if not module.check_mode:
            append_jsonl(paths.journal, journal_entry("gpu_check", p["operator"], release_id=release_id,
                                                      outcome=outcome, device=device, **details))

    def done(changed, note):
        module.exit_json(changed=changed, ansible_facts={"cutover_acceptance": {"note": note}})

    if p["gpu_arch"] == "none":
        done(False, "no GPU (sandbox host): the kernel acceptance on a GPU does not apply")
    if not p["enabled"]:
        journal("skipped", reason="gpu_check: false in the inventory")
        done(False, "gpu_check is false in the inventory: the kernel was NOT run on this host's GPU before "
                    "going live (journaled)")
    manifest = read_json(os.path.join(p["release_dir"], "manifest.json")) or {}
    library_hash = library_sha256(p["release_dir"], manifest)
    record = read_json(paths.acceptance_record(release_id))
    covered, rerun = recorded_pass(record, release_id, library_hash)
    if covered:
        done(False, "kernel already accepted on this host: " + record.get("summary", ""))
    why = " (%s)" % rerun if rerun else ""
    if module.check_mode:
        done(True, "would run the kernel acceptance on GPU %d%s" % (device, why))

    pipe = mps_control_pipe(os.environ)
    if pipe and live_heartbeats(paths, p["tp_size"], p["stale_s"]):
        module.fail_json(msg="this host runs CUDA MPS (%s) and serving is live: under MPS a fault in the acceptance "
                             "run would reach every client on GPU %d, serving ranks included. Stage in a maintenance "
                             "window with serving stopped (the run then has the GPU to itself), or set gpu_check: "
                             "false for this host (journaled); nothing was switched" % (pipe, device))
    if not library_hash or not os.path.isdir(os.path.join(p["release_dir"], PYTHON_DIR)):
        module.fail_json(msg="release %s has no kernel library or no %s/ directory with its kernel_ext code (built "
                             "before stage ran the kernel acceptance): rebuild it with `cutover build` and stage "
                             "again; nothing was switched" % (release_id, PYTHON_DIR))
    log_path = paths.acceptance_log(release_id)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    result = run_acceptance(p["release_dir"], manifest["library"], p["serving_python"], device, p["timeout_s"],
                            log_path)
    journal("passed" if result.passed else "failed", summary=result.summary, log=log_path,
            library_sha256=library_hash, **({"rerun": rerun} if rerun else {}))
    if result.passed:
        atomic_write_text(paths.acceptance_record(release_id), json.dumps(
            {"release_id": release_id, "library_sha256": library_hash, "passed": True, "summary": result.summary,
             "device": device, "at": time.time(), "operator": p["operator"], "report": result.report},
            sort_keys=True))
        done(True, "kernel accepted on GPU %d: %s%s" % (device, result.summary, why))
    module.fail_json(msg="kernel acceptance on GPU %d failed: %s%s; nothing was switched (current still names the "
                         "release before) and serving was not restarted; full log on the host: %s; last lines:\n%s"
                         % (device, result.summary, why, log_path, log_tail(log_path)))


if __name__ == "__main__":
    main()
