"""The real typer app in-process (CliRunner): exit codes and exact messages of build/stage/status/rollback
against a local-connection host under tmp_path (real ansible-runner, real playbooks)."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import click
import pytest
import typer
import yaml

from cutover.cli.main import app
from releases import second_release

from .conftest import read_journal, write_inventory
from .test_config import without


def test_help_lists_the_control_verbs(invoke):
    result = invoke("--help")
    assert result.exit_code == 0
    for verb in ("build", "stage", "status", "rollback"):
        assert f" {verb} " in result.stdout


def test_missing_inventory_is_a_config_error(invoke, tmp_path):
    result = invoke("status", "-i", tmp_path / "nope.yml")
    assert result.exit_code == 2
    assert result.stderr == (f"error: inventory file {tmp_path / 'nope.yml'} does not exist\n"
                             "  fix: pass an existing inventory with --inventory/-i (packaged: ct200.yml, local.yml)\n")


def test_invalid_inventory_field_is_named(invoke, tmp_path):
    inventory = write_inventory(tmp_path / "inv.yml", tmp_path, tp_size="eight")
    result = invoke("-i", inventory, "status")  # global option before the verb
    assert result.exit_code == 2
    assert result.stderr == (f"error: {inventory}: host 'local': field 'tp_size' must be a positive integer "
                             "(ranks on the host), found 'eight'\n")


def test_status_of_a_fresh_host(invoke, local_inventory):
    result = invoke("status", "-i", local_inventory, "--json")
    assert result.exit_code == 0, result.stderr
    (host,) = json.loads(result.stdout)["hosts"]
    assert host["phase"]["phase"] == "idle" and host["requested_mode"] is None and host["serving"] is False
    assert [r["rank"] for r in host["ranks"]] == [0, 1] and host["lock"] is None
    table = invoke("status", "-i", local_inventory)
    assert "no serving process" in table.stdout and "no control file" in table.stdout


def test_rollback_with_no_state_then_again_is_idempotent(invoke, local_inventory, state_dir):
    first = invoke("rollback", "-i", local_inventory)
    assert first.exit_code == 0, first.stderr
    assert json.loads((state_dir / "control.json").read_text())["mode"] == "triton"
    second = invoke("rollback", "-i", local_inventory)
    assert second.exit_code == 0
    assert "every host was already on triton: nothing changed (acknowledgements confirmed)" in second.stdout
    assert json.loads((state_dir / "control.json").read_text())["generation"] == 1
    assert [e["already_triton"] for e in read_journal(state_dir) if e["action"] == "rollback"] == [False, True]


def test_rollback_flips_a_shadowing_host_and_overrides_a_foreign_lock(invoke, local_inventory, state_dir):
    state_dir.mkdir()
    (state_dir / "control.json").write_text(json.dumps({"mode": "shadow", "generation": 4}))
    (state_dir / "phase.json").write_text(json.dumps({"phase": "shadowing", "release_id": "r1"}))
    (state_dir / "lock").write_text(json.dumps({"owner": "bob@test", "action": "shadow", "acquired_at": 0,
                                                "expires_at": time.time() + 600, "token": "b", "pid": 1}))
    result = invoke("rollback", "-i", local_inventory, "--json")
    assert result.exit_code == 0, result.stderr
    (line,) = json.loads(result.stdout)["hosts"]
    assert line["ok"] and line["generation"] == 5 and not line["already_triton"]
    assert "lock held by bob@test: rolled back to triton anyway (the safe direction)" in line["messages"]
    assert json.loads((state_dir / "control.json").read_text())["mode"] == "triton"
    assert json.loads((state_dir / "phase.json").read_text())["phase"] == "rolled_back"
    assert json.loads((state_dir / "lock").read_text())["owner"] == "bob@test"  # not stolen
    assert "rollback_overrode_lock" in [e["action"] for e in read_journal(state_dir)]


def test_a_rank_that_saw_the_flip_but_still_runs_custom_is_not_an_acknowledgement(invoke, local_inventory,
                                                                                   state_dir, tmp_path):
    state_dir.mkdir()
    (state_dir / "control.json").write_text(json.dumps({"mode": "triton", "generation": 5}))
    (state_dir / "runtime").mkdir()
    for rank, mode in ((0, "triton"), (1, "custom")):
        (state_dir / "runtime" / f"rank-{rank}.json").write_text(json.dumps({
            "rank": rank, "pid": 1, "host": "local", "mode_active": mode, "generation_seen": 5, "release_id": "r1",
            "kernel": "cuda", "written_at": time.time() + 60}))  # fresh through the wait
    settings = tmp_path / "cutover.yml"
    settings.write_text("ack_timeout_s: 1\n")
    result = invoke("rollback", "-i", local_inventory, "--config", settings)
    assert result.exit_code == 8, result.stdout + result.stderr
    assert "not every rank acknowledged generation 5 in mode triton" in result.stdout + result.stderr
    assert "rank 1: at generation 5, active custom" in result.stdout + result.stderr


def test_rollback_to_previous_without_one_is_refused_but_still_on_triton(invoke, local_inventory, state_dir):
    result = invoke("rollback", "-i", local_inventory, "--to", "previous")
    assert result.exit_code == 4
    assert "there is no previous release" in result.stderr and "nothing was switched" in result.stderr
    assert json.loads((state_dir / "control.json").read_text())["mode"] == "triton"


def test_build_without_nvcc_fails_cleanly(invoke, tmp_path):
    out = tmp_path / "releases"
    result = invoke("build", "--arch", "sm_90a", "--out", out, "--nvcc", tmp_path / "no-such-nvcc")
    assert result.exit_code == 3
    assert result.stderr.startswith("error: cannot build the kernel: ")
    assert "fix: install the CUDA toolkit (nvcc) or pass its path with --nvcc" in result.stderr
    assert not out.exists() or not any(out.iterdir())


def test_second_build_is_a_noop_that_says_so(invoke, release):
    result = invoke("build", "--arch", "sm_90a", "--out", release.parent)
    assert result.exit_code == 0, result.stderr
    assert (f"release {release.name} is already built at {release} (same sources, archs and nvcc): nothing to do"
            in result.stdout.replace("\n", ""))


def test_stage_then_restage_is_unchanged(invoke, local_inventory, release, tmp_path, state_dir):
    first = invoke("stage", "-i", local_inventory, "--release", release, "--json")
    assert first.exit_code == 0, first.stderr
    (line,) = json.loads(first.stdout)["hosts"]
    assert line["outcome"] == "staged" and line["changed"] > 0 and not line["restarted"]
    assert os.readlink(tmp_path / "root" / "current") == f"releases/{release.name}"
    assert json.loads((state_dir / "control.json").read_text())["mode"] == "triton"
    assert json.loads((state_dir / "phase.json").read_text())["phase"] == "staged"
    second = invoke("stage", "-i", local_inventory, "--release", release)
    assert second.exit_code == 0, second.stderr
    assert f"release {release.name} is already staged on every host: nothing changed" in second.stdout
    assert [e["outcome"] for e in read_journal(state_dir) if e["action"] == "stage"] == ["staged", "already staged"]


def test_check_mode_changes_nothing(invoke, local_inventory, release, tmp_path):
    result = invoke("stage", "-i", local_inventory, "--release", release, "--check")
    assert result.exit_code == 0, result.stderr
    assert not (tmp_path / "root" / "current").exists() and not (tmp_path / "state" / "control.json").exists()
    assert not (tmp_path / "state" / "journal.jsonl").exists()


def corrupt(path):
    with open(path, "r+b") as handle:
        handle.seek(100)
        handle.write(b"\x00garbage")


def test_corrupted_local_release_is_refused_before_touching_the_host(invoke, local_inventory, release, tmp_path):
    copy = tmp_path / "copy" / release.name
    shutil.copytree(release, copy)
    library = json.loads((copy / "manifest.json").read_text())["library"]
    corrupt(copy / library)
    result = invoke("stage", "-i", local_inventory, "--release", copy)
    assert result.exit_code == 2  # a bad input file (cutover/release.py says why), not "the kernel did not build"
    assert result.stderr == (f"error: release {release.name}: {library} does not match its sha256 in the manifest\n"
                             "  fix: the file was changed after the build: rebuild with `cutover build`\n")
    assert not (tmp_path / "root").exists() and not (tmp_path / "state").exists()


def test_corrupted_copy_on_the_host_is_refused_and_journaled(invoke, local_inventory, release, tmp_path, state_dir):
    on_host = tmp_path / "root" / "releases" / release.name
    shutil.copytree(release, on_host)
    library = json.loads((on_host / "manifest.json").read_text())["library"]
    corrupt(on_host / library)
    result = invoke("stage", "-i", local_inventory, "--release", release)
    assert result.exit_code == 4
    assert f"sha256 mismatch for {library}" in result.stderr and "nothing was switched" in result.stderr
    assert not (tmp_path / "root" / "current").exists()
    (refusal,) = [e for e in read_journal(state_dir) if e["action"] == "stage_refused"]
    assert refusal["stage"] == "stage" and "sha256 mismatch" in refusal["reason"]


def test_preflight_mismatch_names_host_fact_expected_found(invoke, tmp_path, release):
    inventory = write_inventory(tmp_path / "inv.yml", tmp_path, gpu_arch="sm_120")
    result = invoke("stage", "-i", inventory, "--release", release)
    assert result.exit_code == 4
    assert ("host local: gpu compute capability: expected sm_120, found no GPU (nvidia-smi missing or failing)"
            in result.stderr)
    assert result.stderr.startswith("error: preflight failed; nothing was changed:")
    assert not (tmp_path / "root" / "current").exists()


def test_stage_is_refused_while_another_operator_holds_the_lock(invoke, local_inventory, release, state_dir):
    state_dir.mkdir()
    (state_dir / "lock").write_text(json.dumps({"owner": "bob@test", "action": "shadow", "acquired_at": 0,
                                                "expires_at": time.time() + 600, "token": "b", "pid": 1}))
    result = invoke("stage", "-i", local_inventory, "--release", release)
    assert result.exit_code == 5
    assert result.stderr.startswith("error: host local is locked by bob@test (shadow, ")
    assert not (state_dir / "control.json").exists()


def test_stage_is_refused_on_a_promoted_host(invoke, local_inventory, release, state_dir):
    state_dir.mkdir()
    (state_dir / "phase.json").write_text(json.dumps({"phase": "promoted", "release_id": "old"}))
    result = invoke("stage", "-i", local_inventory, "--release", release)
    assert result.exit_code == 6
    assert result.stderr == ("error: host local: cannot go from promoted to staged: the custom kernel is live: "
                             "run `cutover rollback` before staging another release\n")


def test_restart_that_never_heartbeats_fails_the_host_in_triton(invoke, local_inventory, release, state_dir):
    result = invoke("stage", "-i", local_inventory, "--release", release, "--yes")
    assert result.exit_code == 4
    assert f"serving did not come up with release {release.name} on all 2 ranks within 1 s" in result.stderr
    assert json.loads((state_dir / "control.json").read_text())["mode"] == "triton"


def test_stage_installs_the_plugin_wheel_and_rollback_uninstalls_it(invoke, tmp_path, release, wheel):
    serving = tmp_path / "serving-venv"
    subprocess.run([sys.executable, "-m", "venv", str(serving)], check=True, timeout=300)
    python = serving / "bin" / "python"
    inventory = write_inventory(tmp_path / "inv.yml", tmp_path, serving_python=str(python),
                                cutover_install_plugin=True, cutover_plugin_wheel=str(wheel))
    first = invoke("stage", "-i", inventory, "--release", release)
    assert first.exit_code == 0, first.stderr
    probe = ("import importlib.metadata as m, importlib.util as u; "
             "print([e.value for e in m.entry_points(group='sglang.srt.plugins')], u.find_spec('typer') is None)")
    isolated = [str(python), "-I", "-c", probe]  # -I: the checkout's own metadata in the cwd must not count
    out = subprocess.run(isolated, capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert out.strip() == "['cutover.plugin:load_plugin'] True"  # the plugin, and no operator-side deps
    second = invoke("stage", "-i", inventory, "--release", release, "--json")
    assert second.exit_code == 0, second.stderr
    assert json.loads(second.stdout)["hosts"][0]["changed"] == 0
    removed = invoke("rollback", "-i", inventory, "--uninstall", "--json")
    assert removed.exit_code == 0, removed.stderr
    assert json.loads(removed.stdout)["hosts"][0]["uninstalled"] is True
    (entry,) = [e for e in read_journal(tmp_path / "state") if e["action"] == "rollback_release"]
    assert (entry["uninstall"], entry["to_previous"], entry["release_id"]) == (True, False, None)
    out = subprocess.run(isolated, capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert out.strip() == "[] True"


def test_rollback_to_previous_switches_the_release_back(invoke, local_inventory, release, tmp_path, state_dir):
    newer = second_release(release, tmp_path)
    assert invoke("stage", "-i", local_inventory, "--release", release).exit_code == 0
    assert invoke("stage", "-i", local_inventory, "--release", newer).exit_code == 0
    root = tmp_path / "root"
    assert (os.readlink(root / "current"), os.readlink(root / "previous")) == (
        f"releases/{newer.name}", f"releases/{release.name}")
    result = invoke("rollback", "-i", local_inventory, "--to", "previous", "--json")
    assert result.exit_code == 0, result.stderr
    (line,) = json.loads(result.stdout)["hosts"]
    assert line["ok"] and line["release_switched_to"] == release.name
    assert (os.readlink(root / "current"), os.readlink(root / "previous")) == (
        f"releases/{release.name}", f"releases/{newer.name}")
    phase = json.loads((state_dir / "phase.json").read_text())
    assert (phase["phase"], phase["release_id"]) == ("rolled_back", release.name)
    assert json.loads((state_dir / "control.json").read_text())["mode"] == "triton"


def test_missing_plugin_wheel_is_named_before_anything_changes(invoke, tmp_path, release):
    missing = tmp_path / "nope.whl"
    inventory = write_inventory(tmp_path / "inv.yml", tmp_path, cutover_install_plugin=True,
                                cutover_plugin_wheel=str(missing))
    result = invoke("stage", "-i", inventory, "--release", release)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {inventory}: host 'local': field 'cutover_plugin_wheel': {missing} "
                                    "does not exist")
    assert not (tmp_path / "state").exists()


def test_a_wheel_with_other_kernel_ext_code_than_the_release_is_refused(invoke, tmp_path, release, wheel):
    edited = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(edited, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            target.writestr(item, data + b"# changed after the release was built\n"
                            if item.filename == "kernel_ext/api.py" else data)
    inventory = write_inventory(tmp_path / "inv.yml", tmp_path, cutover_install_plugin=True,
                                cutover_plugin_wheel=str(edited))
    result = invoke("stage", "-i", inventory, "--release", release)
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"error: {inventory}: host 'local': field 'cutover_plugin_wheel': {edited} carries other kernel_ext code "
        f"than release {release.name} (api.py): serving would run Python around the kernel library that the "
        "release's acceptance never ran\n")
    assert not (tmp_path / "state").exists()


@pytest.mark.slow  # nvcc
def test_compile_error_leaves_nothing_behind(invoke, tmp_path):
    nvcc = tmp_path / "nvcc"  # the real nvcc, handed one source file that does not exist
    nvcc.write_text('#!/bin/sh\nif [ "$1" = --version ]; then exec nvcc --version; fi\n'
                    'exec nvcc "$@" /nonexistent/broken.cu\n')
    nvcc.chmod(0o755)
    out = tmp_path / "releases"
    result = invoke("build", "--arch", "sm_90a", "--out", out, "--nvcc", nvcc)
    assert result.exit_code == 3
    assert result.stderr.startswith("error: the kernel failed to compile for sm_90a: ")
    assert [p.name for p in out.iterdir()] == []  # no release, no temporary directory, no LATEST


def test_status_reports_corrupt_state_files_without_calling_the_host_unreachable(invoke, local_inventory, state_dir):
    state_dir.mkdir()
    (state_dir / "phase.json").write_text("{torn")
    (state_dir / "control.json").write_text("[]")
    result = invoke("status", "-i", local_inventory, "--json")
    assert result.exit_code == 0, result.stderr
    (host,) = json.loads(result.stdout)["hosts"]
    assert host["reachable"] and host["phase"]["phase"] == "unknown"
    assert f"{state_dir / 'phase.json'} is corrupt" in host["phase_error"]
    assert f"{state_dir / 'control.json'} is corrupt" in host["control_error"]


def test_rollback_repairs_corrupt_control_and_phase_files(invoke, local_inventory, state_dir):
    state_dir.mkdir()
    (state_dir / "phase.json").write_text("{torn")
    (state_dir / "control.json").write_text("{torn")
    result = invoke("rollback", "-i", local_inventory)
    assert result.exit_code == 0, result.stderr
    assert json.loads((state_dir / "control.json").read_text())["mode"] == "triton"
    assert json.loads((state_dir / "phase.json").read_text())["phase"] == "rolled_back"


def test_no_restart_when_every_rank_already_runs_the_release(invoke, local_inventory, release, state_dir):
    (state_dir / "runtime").mkdir(parents=True)
    for rank in (0, 1):  # what the serving process's ranks write while they run this release
        (state_dir / "runtime" / f"rank-{rank}.json").write_text(json.dumps({
            "rank": rank, "pid": 1, "host": "local", "mode_active": "triton", "generation_seen": 0,
            "release_id": release.name, "kernel": "reference (no GPU)", "written_at": time.time() + 60}))
    result = invoke("stage", "-i", local_inventory, "--release", release, "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    (line,) = json.loads(result.stdout)["hosts"]
    assert line["outcome"] == "staged" and line["restarted"] is False


def test_sandbox_up_without_serving_port_names_the_field_and_starts_nothing(invoke, tmp_path, state_dir):
    inventory = without(write_inventory(tmp_path / "inv.yml", tmp_path), "serving_port")
    result = invoke("sandbox", "up", "-i", inventory)
    assert result.exit_code == 2
    assert result.stderr == (f"error: {inventory}: host 'local': field 'serving_port' is missing\n"
                             "  fix: set the HTTP port of the serving process (SGLang or the sandbox) in the host's "
                             "or a group's vars, e.g. serving_port: 30001\n")
    assert not state_dir.exists()


def test_sandbox_up_without_torch_names_the_missing_module_as_the_cause(invoke, tmp_path, state_dir):
    """An environment without torch (here: a `torch` on PYTHONPATH that fails to import as a missing one does):
    the rank's ModuleNotFoundError, read from its log, is the error, not a guess about the port."""
    no_torch = tmp_path / "no_torch"
    (no_torch / "torch").mkdir(parents=True)
    (no_torch / "torch" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    inventory = write_inventory(tmp_path / "inv.yml", tmp_path, serving_port=free_port())
    result = invoke("sandbox", "up", "-i", inventory, "--timeout", "120", PYTHONPATH=str(no_torch))
    assert result.exit_code != 0
    first = result.stderr.splitlines()[0]
    assert re.search(r"while starting: ModuleNotFoundError: No module named 'torch' \(in "
                     + re.escape(str(state_dir / "sandbox")) + r"/(rank-\d|server)\.log\); log tail:$", first), first
    assert "  fix: install what is missing into the environment of " in result.stderr
    assert "is port" not in result.stderr


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def hand_made_release(tmp_path, **manifest) -> Path:
    """A release directory whose manifest.json holds exactly `manifest`."""
    release = tmp_path / "hand-made"
    release.mkdir()
    (release / "lib.so").write_bytes(b"\x7fELF")
    (release / "manifest.json").write_text(json.dumps(manifest))
    return release


GOOD_MANIFEST = {"release_id": "r1", "archs": ["sm_120"], "min_driver": "580.65.06",
                 "files": {"lib.so": "0" * 64}}


@pytest.mark.parametrize("field,problem,wanted", [
    ("release_id", "is missing", "a non-empty string"),
    ("files", "is missing",
     "a non-empty mapping of file name to sha256, which every host verifies the release against"),
    ("archs", "is missing", "a non-empty list of archs such as sm_120"),
])
def test_stage_of_a_manifest_without_a_field_names_it_and_touches_nothing(invoke, local_inventory, tmp_path,
                                                                          field, problem, wanted):
    release = hand_made_release(tmp_path, **{k: v for k, v in GOOD_MANIFEST.items() if k != field})
    result = invoke("stage", "-i", local_inventory, "--release", release)
    assert result.exit_code == 2
    assert result.stderr == (f"error: {release / 'manifest.json'}: field '{field}' {problem}\n"
                             f"  fix: rebuild the release with `cutover build`; {field} must be {wanted}\n")
    assert not (tmp_path / "root").exists() and not (tmp_path / "state").exists()


def test_stage_of_a_manifest_with_no_files_is_refused(invoke, local_inventory, tmp_path):
    release = hand_made_release(tmp_path, **{**GOOD_MANIFEST, "files": {}})
    result = invoke("stage", "-i", local_inventory, "--release", release)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {release / 'manifest.json'}: field 'files' must be a non-empty mapping "
                                    "of file name to sha256, which every host verifies the release against, found {}")
    assert not (tmp_path / "root").exists()


def test_only_the_verbs_that_may_restart_serving_take_yes_after_the_verb(invoke):
    """docs/runbook.md's opening names these two; every other verb refuses --yes after it."""
    def commands(group, prefix=""):
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                yield from commands(command, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", command

    taking_yes = {name for name, command in commands(typer.main.get_command(app))
                  if any("--yes" in param.opts for param in command.params)}
    assert taking_yes == {"stage", "rollback"}
    refused = invoke("shadow", "--yes")
    assert refused.exit_code == 2 and "No such option: --yes" in refused.stderr


def _two_host_inventory(path: Path, root: Path, names: tuple[str, ...]) -> Path:
    """write_inventory's host under each of `names`, each with its own root and state dir."""
    hosts = {}
    for name in names:
        data = yaml.safe_load(write_inventory(root / f"{name}.yml", root / name).read_text())
        hosts[name] = data["all"]["hosts"]["local"]
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


@pytest.mark.parametrize("position", ["before", "after"])
@pytest.mark.parametrize("verb", [("status",), ("sandbox", "status")])
def test_a_typed_inventory_wins_over_cutover_inventory(invoke, tmp_path, position, verb):
    """With $CUTOVER_INVENTORY pointing at prod, `-i staging.yml` typed before or after the verb targets staging."""
    typed = _two_host_inventory(tmp_path / "staging.yml", tmp_path, ("staging",))
    environment = _two_host_inventory(tmp_path / "prod.yml", tmp_path, ("prod",))
    args = ["-i", typed, *verb, "--json"] if position == "before" else [*verb, "-i", typed, "--json"]
    result = invoke(*args, CUTOVER_INVENTORY=str(environment))
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    names = [h["host"] for h in document["hosts"]] if verb == ("status",) else list(document)
    assert names == ["staging"]


@pytest.mark.parametrize("position", ["before", "after"])
def test_a_typed_limit_wins_over_cutover_limit(invoke, tmp_path, position):
    inventory = _two_host_inventory(tmp_path / "inv.yml", tmp_path, ("canary", "bulk"))
    args = ["--limit", "canary", "status", "-i", inventory, "--json"] if position == "before" else [
        "status", "-i", inventory, "--limit", "canary", "--json"]
    result = invoke(*args, CUTOVER_LIMIT="bulk")
    assert result.exit_code == 0, result.stderr
    assert [h["host"] for h in json.loads(result.stdout)["hosts"]] == ["canary"]


@pytest.mark.parametrize("position", ["before", "after"])
def test_a_typed_config_wins_over_cutover_config(invoke, tmp_path, local_inventory, state_dir, position):
    """The typed config's operator is the one the journal records; $CUTOVER_CONFIG's is not."""
    typed, environment = tmp_path / "typed.yml", tmp_path / "env.yml"
    typed.write_text("operator: typed@test\n")
    environment.write_text("operator: env@test\n")
    args = ["--config", typed, "rollback", "-i", local_inventory] if position == "before" else [
        "rollback", "-i", local_inventory, "--config", typed]
    result = invoke(*args, CUTOVER_CONFIG=str(environment))
    assert result.exit_code == 0, result.stderr
    assert [e["actor"] for e in read_journal(state_dir) if e["action"] == "rollback"] == ["typed@test"]


def test_the_environment_still_applies_when_nothing_is_typed(invoke, tmp_path):
    inventory = _two_host_inventory(tmp_path / "inv.yml", tmp_path, ("canary", "bulk"))
    result = invoke("status", "--json", CUTOVER_INVENTORY=str(inventory), CUTOVER_LIMIT="bulk")
    assert result.exit_code == 0, result.stderr
    assert [h["host"] for h in json.loads(result.stdout)["hosts"]] == ["bulk"]


def test_typed_after_the_verb_wins_over_typed_before_it(invoke, tmp_path):
    inventory = _two_host_inventory(tmp_path / "inv.yml", tmp_path, ("canary", "bulk"))
    result = invoke("--limit", "bulk", "status", "-i", inventory, "--limit", "canary", "--json")
    assert result.exit_code == 0, result.stderr
    assert [h["host"] for h in json.loads(result.stdout)["hosts"]] == ["canary"]


def _all_commands(group, prefix=()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _all_commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


@pytest.mark.parametrize("path", [path for path, _ in _all_commands(typer.main.get_command(app))], ids=" ".join)
def test_help_shows_every_options_help_whole_with_its_default(invoke, path):
    """Rich markup must not eat a bracketed part of a help text; options with a default show it."""
    command = dict(_all_commands(typer.main.get_command(app)))[path]
    result = invoke(*path, "--help")
    assert result.exit_code == 0
    shown = " ".join(result.stdout.translate(str.maketrans("│╭╮╰╯─", "      ")).split())
    for param in command.params:
        help_text = getattr(param, "help", None)
        if help_text:
            assert " ".join(help_text.split()) in shown, (param.name, help_text)
        default = param.default
        if getattr(param, "show_default", None) is not False and isinstance(default, (int, float, str)) and not \
                isinstance(default, bool) and param.name != "help":
            assert f"[default: {default}]" in shown, (param.name, default)


def test_shell_completion_is_offered(invoke):
    result = invoke("--help")
    assert "--install-completion" in result.stdout and "--show-completion" in result.stdout
