#!/usr/bin/python
"""Ansible module: the host-side state changes of stage and rollback, with the shared file protocol.

Uses the same code as the operator side (module_utils/cutover_hostprotocol is a link to the package
cutover/hostprotocol/), so both sides read and write one format.

actions:
  stage        create the state dirs; control.json in mode triton (created if absent or corrupt; a non-triton
               mode is replaced by triton; a triton file in force is left alone); phase staged
  verify_release  check every file of release_dir against its sha256 (fails naming each mismatch)
  wait_release wait until every rank heartbeats with release_id (after a restart)
  rollback     control.json -> triton (unless a triton file is in force), wait until every live rank reports
               that generation in mode triton, phase rolled_back
  restore_previous  `rollback --to previous`, once: point current at the previous release and previous at the
               outgoing one. The switch is recorded (paths.rollback_record) before current moves, with the
               identity of the new current link (made under a temporary name, renamed into place: a rename keeps
               it). While current is that very link the switch has happened, so a re-run only completes what a
               cut left undone and reports "already"; any later stage makes a new link, so the record stops
               counting by itself.
  rollback_release  journal what `rollback --to previous` / `--uninstall` changed (the last task of
               playbooks/rollback.yml, so once per run, on either path); after a switch, a phase other than idle
               becomes rolled_back with the restored release

Every write of control.json holds the control write lock (cutover_hostprotocol/controlwrite.py), as the CLI's
writes do, so a lease renewal or another mode change cannot interleave with it.

A new control generation is hostlayout.next_generation: above the file's and above every generation a rank's
heartbeat says it saw, so a lost or corrupt control.json never restarts at a generation the ranks ignore. For
the same reason a triton file is in force only if no rank saw a newer generation.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cutover_hostprotocol.controlwrite import ControlLockBusy, ControlWriteLock, LocalFiles
from ansible.module_utils.cutover_hostprotocol.hostlayout import (
    ControlRecord,
    HostPaths,
    append_jsonl,
    atomic_write_text,
    generation_resets,
    journal_entry,
    live_heartbeats,
    next_generation,
    read_json,
    recorded_heartbeats,
    release_tree_problem,
    sha256_file,
    triton_in_force,
)
from ansible.module_utils.cutover_hostprotocol.phases import PhaseRecord, phase_after_stage

DOCUMENTATION = r"""
module: cutover_state
short_description: Stage and rollback state changes in a cutover state directory
options:
  action:
    type: str
    required: true
    choices: [stage, verify_release, wait_release, rollback, restore_previous, rollback_release]
    description: "what to do"
  release_dir: {type: path, description: "release directory to verify"}
  files: {type: dict, description: "file name -> sha256 (verify_release)"}
  cutover_root: {type: path, required: true, description: "release root"}
  state_dir: {type: path, required: true, description: "state directory"}
  operator: {type: str, required: true, description: "who acts (journal, set_by)"}
  release_id: {type: str, description: "release being staged or awaited"}
  tp_size: {type: int, default: 1, description: "ranks expected to heartbeat"}
  timeout_s: {type: float, default: 30, description: "how long to wait for heartbeats"}
  stale_s: {type: float, default: 10, description: "a heartbeat older than this is not live"}
  reason: {type: str, default: "", description: "why (journal)"}
  host: {type: str, default: "this host", description: "the inventory name, for messages (restore_previous)"}
  to_previous: {type: bool, default: false, description: "the run switched back to previous (rollback_release)"}
  uninstall: {type: bool, default: false, description: "the run uninstalled the plugin (rollback_release)"}
  rolled_back_from: {type: str, description: "the release switched away from (rollback_release)"}
  already: {type: bool, default: false, description: "an earlier run had switched already (rollback_release)"}
  restarted: {type: bool, default: false, description: "serving was restarted (rollback_release)"}
  completed: {type: bool, default: true, description: "every step after the switch succeeded (rollback_release)"}
"""


def read_control(paths):
    try:
        with open(paths.control) as handle:
            return ControlRecord.from_json(handle.read())
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        return ControlRecord(mode="corrupt")


def usable(current):
    """The control record to build on: None when the file is missing or corrupt."""
    return current if current is not None and current.mode != "corrupt" else None


def write_triton(paths, lock, current, beats, operator, reason, release_id):
    """control.json in mode triton at the next generation, holding `lock` (control_write_lock)."""
    record = ControlRecord(mode="triton", generation=next_generation(usable(current), beats),
                           resets=generation_resets(usable(current), beats),
                           release_id=release_id, set_by=operator, set_at=time.time(), reason=reason)
    lock.confirm()
    atomic_write_text(paths.control, record.to_json())
    return record


@contextlib.contextmanager
def control_write_lock(module, paths, params):
    """Hold the control write lock (cutover_hostprotocol/controlwrite.py) for one read-modify-write of
    control.json; in check mode nothing is written, so nothing is taken. A broken stale lock is journaled."""
    if module.check_mode:
        yield None
        return
    lock = ControlWriteLock(LocalFiles(), paths.control_lock, params["operator"], time.time)
    try:
        lock.acquire()
    except ControlLockBusy as exc:
        module.fail_json(msg="%s: control.json was not changed; run the command again" % exc)
    try:
        if lock.broken:
            append_jsonl(paths.journal, journal_entry("control_lock_broken", params["operator"],
                                                      previous_holder=lock.broken, path="ansible"))
        yield lock
    except ControlLockBusy as exc:
        module.fail_json(msg="%s" % exc)
    finally:
        lock.release()


def control_note(current):
    """What stage does to control.json, in one line."""
    if current is None:
        return "control.json created in mode triton"
    if current.mode == "corrupt":
        return "control.json was corrupt: rewritten in mode triton"
    if current.mode == "triton":
        return "control.json generation %d is below one the ranks saw: triton rewritten above it" % current.generation
    return "control.json mode %s replaced by triton" % current.mode


def stage(module, paths, params):
    changed, notes = False, []
    for directory in (paths.state_dir, paths.runtime, paths.stats, paths.captures, paths.verdicts):
        if not os.path.isdir(directory):
            changed = True
            if not module.check_mode:
                os.makedirs(directory, exist_ok=True)
    with control_write_lock(module, paths, params) as lock:
        current, beats = read_control(paths), recorded_heartbeats(paths)
        if not triton_in_force(current, beats):
            changed = True
            notes.append(control_note(current))
            if not module.check_mode:
                record = write_triton(paths, lock, current, beats, params["operator"],
                                      "stage " + params["release_id"], params["release_id"])
                append_jsonl(paths.journal, journal_entry("control_initialized", params["operator"],
                                                          generation=record.generation, mode="triton"))
    phase = read_phase(paths) or PhaseRecord()  # a damaged one is rewritten
    old_phase = phase.phase
    new_phase = phase_after_stage(old_phase, phase.release_id, params["release_id"])
    if new_phase != old_phase or phase.release_id != params["release_id"]:
        changed = True
        notes.append("phase %s -> %s" % (old_phase, new_phase))
        if not module.check_mode:
            write_phase(paths, new_phase, params["release_id"], params["operator"], "stage")
    return {"changed": changed, "notes": notes, "phase": new_phase}


def read_phase(paths):
    """phase.json's PhaseRecord: the idle record when there is none; None when it is damaged."""
    try:
        with open(paths.phase) as handle:
            text = handle.read()
    except FileNotFoundError:
        return PhaseRecord()
    except (OSError, UnicodeDecodeError):
        return None
    return PhaseRecord.parse(text)


def write_phase(paths, phase, release_id, operator, reason):
    atomic_write_text(paths.phase, PhaseRecord(phase, release_id, time.time(), operator, reason).to_text())


def file_mismatches(release_dir, files):
    """The files of release_dir whose sha256 differs from `files` ({name: sha256})."""
    mismatches = []
    for name, expected in sorted(files.items()):
        path = os.path.join(release_dir, name)
        found = sha256_file(path) if os.path.isfile(path) else "no file"
        if found != expected:
            mismatches.append({"file": name, "expected": expected, "found": found})
    return mismatches


def intact_other_build(release_dir):
    """True when release_dir matches its own manifest: a different build of the same sources, not damage."""
    files = (read_json(os.path.join(release_dir, "manifest.json")) or {}).get("files")
    return isinstance(files, dict) and bool(files) and not file_mismatches(release_dir, files)


def verify_release(module, paths, params):
    problem = release_tree_problem(params["release_dir"])
    if problem:
        module.fail_json(msg="release %s: %s; a release holds regular files only: nothing was switched (remove %s "
                             "on the host, then stage again)" % (os.path.basename(params["release_dir"]), problem,
                                                                 params["release_dir"]))
    mismatches = file_mismatches(params["release_dir"], params["files"])
    if mismatches:
        if os.path.basename(params["release_dir"]).startswith(".incoming-"):
            advice = ""
        elif intact_other_build(params["release_dir"]):
            advice = (" (the host holds an intact, different build of this release id: the same sources built"
                      " in another place give other bytes; stage that build, or remove %s on the host and"
                      " stage again)" % params["release_dir"])
        else:
            advice = " (remove the damaged copy %s on the host, then stage again)" % params["release_dir"]
        module.fail_json(msg="; ".join("sha256 mismatch for %(file)s: expected %(expected)s, found %(found)s" % m
                                       for m in mismatches) + "; nothing was switched" + advice,
                         mismatches=mismatches)
    return {"changed": False, "verified": len(params["files"])}


def wait_release(module, paths, params):
    deadline = time.monotonic() + params["timeout_s"]
    while True:
        beats = live_heartbeats(paths, params["tp_size"], params["stale_s"])
        loaded = {r: b.release_id for r, b in beats.items()}
        if len(beats) == params["tp_size"] and set(loaded.values()) == {params["release_id"]}:
            return {"changed": False, "ranks": loaded}
        if time.monotonic() >= deadline:
            module.fail_json(msg="serving did not come up with release %s on all %d ranks within %.0f s "
                                 "(live ranks and their releases: %s); the host stays in mode triton"
                                 % (params["release_id"], params["tp_size"], params["timeout_s"], loaded or "none"),
                             ranks=loaded)
        time.sleep(0.25)


def unacknowledged(beats, tp_size, generation, mode):
    """{rank: what it reports} for every rank whose live heartbeat does not show `generation` in `mode`."""
    return {rank: "no live heartbeat" if rank not in beats
            else "generation %d, active %s" % (beats[rank].generation_seen, beats[rank].mode_active)
            for rank in range(tp_size) if rank not in beats or not beats[rank].acknowledges(generation, mode)}


def rollback(module, paths, params):
    with control_write_lock(module, paths, params) as lock:
        current, beats = read_control(paths), recorded_heartbeats(paths)
        already = triton_in_force(current, beats)
        result = {"changed": not already, "already_triton": already}
        if module.check_mode:
            return result
        if already:
            generation = current.generation
        else:
            base = usable(current)
            generation = write_triton(paths, lock, current, beats, params["operator"],
                                      params["reason"] or "rollback", base.release_id if base else None).generation
    result["generation"] = generation
    behind = wait_for_triton(paths, params, generation, result)
    result["acknowledged"] = not behind
    # recorded before any failure: control.json asks for triton either way, and the phase must say so
    append_jsonl(paths.journal, journal_entry("rollback", params["operator"], generation=generation,
                                              already_triton=already, path="ansible", reason=params["reason"],
                                              acknowledged=not behind))
    phase = read_phase(paths)
    if phase is None or phase.phase not in ("idle", "rolled_back"):  # a damaged one is rewritten
        write_phase(paths, "rolled_back", phase.release_id if phase else None, params["operator"],
                    params["reason"] or "rollback")
        result["changed"] = True
    if behind:
        module.fail_json(msg="ranks did not acknowledge generation %d in mode triton within %.0f s (%s)"
                             % (generation, params["timeout_s"],
                                "; ".join("rank %d: %s" % item for item in sorted(behind.items()))), **result)
    return result


def wait_for_triton(paths, params, generation, result):
    """Wait until every live rank reports `generation` in mode triton; {rank: what it reports} of those that did
    not within timeout_s ({} when all did, or when no rank is live: nothing serves). Sets result["serving"]."""
    deadline = time.monotonic() + params["timeout_s"]
    while True:
        live = live_heartbeats(paths, params["tp_size"], params["stale_s"])
        result["serving"] = bool(live)
        behind = unacknowledged(live, params["tp_size"], generation, "triton") if live else {}
        if not behind or time.monotonic() >= deadline:
            return behind
        time.sleep(0.2)


def link_id(path):
    """The identity of a symlink itself (inode and mtime; a rename keeps both), or "" when there is none."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    return "%d:%s" % (st.st_ino, st.st_mtime)


def point_link(path, target):
    """Make `path` a symlink to `target`, atomically (a new link under a temporary name, renamed over it)."""
    tmp = "%s.tmp-%d" % (path, os.getpid())
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, path)


def read_link(path):
    try:
        return os.readlink(path)
    except OSError:
        return None


def restore_previous(module, paths, params):
    current, previous = read_link(paths.current), read_link(paths.previous)
    record = read_json(paths.rollback_record) or {}
    already = (current is not None and record.get("to_target") == current
               and record.get("link_id") == link_id(paths.current))
    if not already:
        if previous is None:
            module.fail_json(msg="no previous release on %s (%s is missing): nothing was switched"
                                 % (params["host"], paths.previous))
        if previous == current:
            module.fail_json(msg="current and previous both name %s on %s: there is no other release to go back "
                                 "to: nothing was switched" % (os.path.basename(previous), params["host"]))
        if module.check_mode:
            return {"changed": True}
        incoming = os.path.join(params["cutover_root"], ".current-rollback")
        point_link(incoming, previous)
        record = {"from": os.path.basename(current or ""), "to": os.path.basename(previous),
                  "from_target": current or "", "to_target": previous, "link_id": link_id(incoming),
                  "at": time.time(), "by": params["operator"], "done": False}
        atomic_write_text(paths.rollback_record, json.dumps(record, sort_keys=True))  # before current moves
        os.replace(incoming, paths.current)
    changed = not already or not record.get("done")
    if changed and not module.check_mode:
        if record["from_target"]:
            point_link(paths.previous, record["from_target"])
        atomic_write_text(paths.rollback_record, json.dumps(dict(record, done=True), sort_keys=True))
    return {"changed": changed, "ansible_facts": {
        "cutover_restored_release": record["to"], "cutover_rolled_back_from": record["from"],
        "cutover_switched_at": record["at"], "cutover_already_switched": already}}


def rollback_release(module, paths, params):
    """Journal what --to previous / --uninstall changed, with the fields the operator side reports; after a
    switch, a phase other than idle becomes rolled_back with the restored release."""
    if module.check_mode:
        return {"changed": True}
    if params["to_previous"] and params["release_id"]:
        phase = read_phase(paths)
        if phase is None or phase.phase != "idle":
            write_phase(paths, "rolled_back", params["release_id"], params["operator"], "rollback --to previous")
    append_jsonl(paths.journal, journal_entry(
        "rollback_release", params["operator"], to_previous=params["to_previous"], uninstall=params["uninstall"],
        release_id=params["release_id"], rolled_back_from=params["rolled_back_from"] or None,
        already=params["already"], restarted=params["restarted"], completed=params["completed"]))
    return {"changed": True}


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "required": True,
                       "choices": ["stage", "verify_release", "wait_release", "rollback", "restore_previous",
                                   "rollback_release"]},
            "release_dir": {"type": "path"},
            "files": {"type": "dict"},
            "cutover_root": {"type": "path", "required": True},
            "state_dir": {"type": "path", "required": True},
            "operator": {"type": "str", "required": True},
            "release_id": {"type": "str"},
            "tp_size": {"type": "int", "default": 1},
            "timeout_s": {"type": "float", "default": 30},
            "stale_s": {"type": "float", "default": 10},
            "reason": {"type": "str", "default": ""},
            "host": {"type": "str", "default": "this host"},
            "to_previous": {"type": "bool", "default": False},
            "uninstall": {"type": "bool", "default": False},
            "rolled_back_from": {"type": "str"},
            "already": {"type": "bool", "default": False},
            "restarted": {"type": "bool", "default": False},
            "completed": {"type": "bool", "default": True},
        },
        required_if=[("action", "stage", ["release_id"]), ("action", "wait_release", ["release_id"]),
                     ("action", "verify_release", ["release_dir", "files"])],
        supports_check_mode=True,
    )
    params = module.params
    paths = HostPaths(cutover_root=params["cutover_root"], state_dir=params["state_dir"])
    action = {"stage": stage, "verify_release": verify_release, "wait_release": wait_release,
              "rollback": rollback, "restore_previous": restore_previous,
              "rollback_release": rollback_release}[params["action"]]
    module.exit_json(**action(module, paths, params))


if __name__ == "__main__":
    main()
