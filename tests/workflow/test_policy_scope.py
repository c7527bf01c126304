"""A sandbox-only policy (`scope: sandbox`) never gates a production host, nor does one looser than the default
that declares no scope: shadow and promote refuse it before any host is touched, whether --policy or
CUTOVER_POLICY named it."""

import sys

import pytest
import yaml

from checks.policy import DEFAULT_POLICY_PATH, load_policy, refuse_out_of_scope
from cutover.errors import ConfigError

EXIT_CONFIG = 2
SANDBOX = DEFAULT_POLICY_PATH.parent / "sandbox.yml"


def write_policy(tmp_path, text):
    path = tmp_path / "policy.yml"
    path.write_text(text)
    return path


def mixed_inventory(tmp_path):
    """A local sandbox host `rehearsal` (state under tmp_path) and an SGLang host `ct200` whose SSH port refuses."""
    rehearsal = {
        "ansible_connection": "local",
        "cutover_root": str(tmp_path / "rehearsal" / "root"),
        "cutover_state_dir": str(tmp_path / "rehearsal" / "state"),
        "serving_kind": "sandbox",
        "serving_port": 30099,
        "tp_size": 2,
        "gpu_arch": "none",
        "serving_restart_command": "true",
    }
    ct200 = {
        "ansible_host": "127.0.0.1",
        "ansible_port": 1,
        "cutover_root": "/opt/cutover",
        "cutover_state_dir": "/var/lib/cutover",
        "serving_kind": "sglang",
        "serving_python": sys.executable,
        "serving_service": "sglang.service",
        "serving_port": 30000,
        "tp_size": 8,
        "gpu_arch": "sm_120",
    }
    path = tmp_path / "inventory.yml"
    # rehearsal first: without the refusal, shadow and promote would take its lock before failing to reach ct200
    path.write_text(yaml.safe_dump({"all": {"hosts": {"rehearsal": rehearsal, "ct200": ct200}}}, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("path", "scope"),
    [(SANDBOX, "sandbox"), (None, "any"), (DEFAULT_POLICY_PATH, "any")],
)
def test_shipped_policies_declare_their_scope(path, scope):
    assert load_policy(path).scope == scope


def test_a_stricter_policy_without_scope_may_gate_any_host(tmp_path):
    policy = load_policy(write_policy(tmp_path, "shadow:\n  min_duration_s: 7200\n  rel_l2_p99: 5.0e-3\n"))
    assert (policy.scope, policy.scope_declared) == ("any", False)
    refuse_out_of_scope(policy, {"ct200": "sglang", "rehearsal": "sandbox"})


LOOSE = "shadow:\n  min_duration_s: 60\n  max_abs: 0.5\npromote:\n  watch_minutes: 1\n"
LOOSE_FIELDS = ("shadow.min_duration_s 60, the default at least 3600; shadow.max_abs 0.5, the default at most 0.25; "
                "promote.watch_minutes 1, the default at least 10")


@pytest.mark.parametrize("from_environment", [False, True])
def test_a_looser_policy_without_scope_is_refused_for_a_production_host(tmp_path, from_environment):
    path = write_policy(tmp_path, LOOSE)
    with pytest.raises(ConfigError) as caught:
        refuse_out_of_scope(load_policy(path), {"rehearsal": "sandbox", "ct200": "sglang"},
                            from_environment=from_environment)
    named_by = " (from CUTOVER_POLICY)" if from_environment else ""
    assert caught.value.message == (
        f"policy {path}{named_by} declares no scope and is looser than checks/policies/default.yml "
        f"({LOOSE_FIELDS}): it may not gate ct200 (serving_kind sglang)"
    )
    assert "`scope: sandbox`" in caught.value.hint and "`scope: any`" in caught.value.hint


@pytest.mark.parametrize(("scope", "serving_kinds"), [
    ("any", {"ct200": "sglang", "rehearsal": "sandbox"}),
    ("sandbox", {"rehearsal": "sandbox"}),
])
def test_a_looser_policy_that_declares_its_scope_is_taken_at_its_word(tmp_path, scope, serving_kinds):
    refuse_out_of_scope(load_policy(write_policy(tmp_path, f"scope: {scope}\n" + LOOSE)), serving_kinds)


def test_a_looser_policy_without_scope_may_gate_sandbox_hosts(tmp_path):
    refuse_out_of_scope(load_policy(write_policy(tmp_path, LOOSE)), {"rehearsal": "sandbox", "local": "sandbox"})


@pytest.mark.parametrize("value", ["production", "Sandbox", "[sandbox]", "true"])
def test_bad_scope_is_refused_with_the_file_and_the_field(tmp_path, value):
    path = write_policy(tmp_path, f"scope: {value}\n")
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    assert caught.value.message.startswith(f"policy {path}: field 'scope' must be one of any, sandbox, got ")


@pytest.mark.parametrize(
    ("path", "serving_kinds"),
    [
        (SANDBOX, {"rehearsal": "sandbox", "local": "sandbox"}),
        (None, {"ct200": "sglang", "rehearsal": "sandbox"}),
    ],
)
def test_in_scope_targets_pass(path, serving_kinds):
    refuse_out_of_scope(load_policy(path), serving_kinds)


@pytest.mark.parametrize("from_environment", [False, True])
def test_sandbox_policy_is_refused_for_a_production_host(from_environment):
    with pytest.raises(ConfigError) as caught:
        refuse_out_of_scope(
            load_policy(SANDBOX),
            {"rehearsal": "sandbox", "ct200": "sglang", "ct201": "sglang"},
            from_environment=from_environment,
        )
    named_by = " (from CUTOVER_POLICY)" if from_environment else ""
    assert caught.value.message == (
        f"policy {SANDBOX}{named_by} has scope sandbox: it may gate only sandbox hosts, "
        "not ct200 (serving_kind sglang), ct201 (serving_kind sglang)"
    )
    assert "--policy with a production policy" in caught.value.hint
    assert "checks/policies/default.yml" in caught.value.hint
    assert ("unset CUTOVER_POLICY" in caught.value.hint) is from_environment


@pytest.mark.parametrize("verb", [["shadow", "--minutes", "2"], ["promote", "--force"]])
@pytest.mark.parametrize("from_environment", [False, True])
def test_cli_refuses_sandbox_policy_on_a_production_host_before_touching_any(
    cli, tmp_path, monkeypatch, verb, from_environment
):
    inventory = mixed_inventory(tmp_path)
    if from_environment:
        monkeypatch.setenv("CUTOVER_POLICY", str(SANDBOX))
        result = cli(*verb, "-i", inventory)
    else:
        monkeypatch.delenv("CUTOVER_POLICY", raising=False)
        result = cli(*verb, "-i", inventory, "--policy", SANDBOX)
    assert result.returncode == EXIT_CONFIG, result.stdout + result.stderr
    named_by = " (from CUTOVER_POLICY)" if from_environment else ""
    assert result.stderr.startswith(
        f"error: policy {SANDBOX}{named_by} has scope sandbox: it may gate only sandbox hosts, "
        "not ct200 (serving_kind sglang)\n  fix: "
    ), result.stderr
    assert not (tmp_path / "rehearsal").exists()  # no lock, journal or phase written on the sandbox host


def test_cli_refuses_a_looser_policy_without_scope_on_a_production_host_before_touching_any(cli, tmp_path, monkeypatch):
    inventory = mixed_inventory(tmp_path)
    policy = write_policy(tmp_path, LOOSE)
    monkeypatch.delenv("CUTOVER_POLICY", raising=False)
    result = cli("shadow", "--minutes", "2", "-i", inventory, "--policy", policy)
    assert result.returncode == EXIT_CONFIG, result.stdout + result.stderr
    assert result.stderr.startswith(f"error: policy {policy} declares no scope and is looser than "), result.stderr
    assert not (tmp_path / "rehearsal").exists()
