"""Hostile values from flags and files (config, inventory, policy) end in one clear error and a non-zero exit,
never a traceback; anything unexpected at the CLI boundary is one line that says how to see the traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from checks.policy import load_policy
from cutover.config import load_inventory, load_settings
from cutover.errors import ConfigError
from tests.unit.conftest import write_inventory

BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8))


def test_an_unexpected_exception_is_one_line_with_how_to_see_the_traceback(invoke, local_inventory, monkeypatch):
    def broken(host, settings):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(sys.modules["cutover.cli.status"], "host_status", broken)
    result = invoke("status", "-i", local_inventory)
    assert result.exit_code == 9
    assert result.stderr.splitlines() == [
        "error: unexpected RuntimeError: boom",
        "  fix: run the same command with -v to see the traceback, and report it"]
    assert "Traceback" not in result.output
    verbose = invoke("status", "-i", local_inventory, "-v")
    assert isinstance(verbose.exception, RuntimeError)  # -v lets the traceback through


def test_json_errors_are_one_json_object_on_stdout(invoke, tmp_path):
    result = invoke("status", "-i", tmp_path / "missing.yml", "--json")
    assert result.exit_code == 2
    error = json.loads(result.stdout)
    assert error["exit_code"] == 2 and "does not exist" in error["error"] and "--inventory" in error["fix"]
    before = invoke("--json", "status", "-i", tmp_path / "missing.yml")
    assert json.loads(before.stdout)["exit_code"] == 2
    usage = invoke("shadow", "--minutes", "nan", "--json")
    assert usage.exit_code == 2 and "--minutes" in json.loads(usage.stdout)["error"]


@pytest.mark.parametrize("args, expected", [
    (("--minutes", "nan"), "nan is not a finite number"),
    (("--hours", "inf"), "inf is not a finite number"),
    (("--minutes", "1", "--lease-ttl", "1e9"), "--lease-ttl"),
    (("--minutes", "1", "--lease-ttl", "nan"), "--lease-ttl"),
])
def test_shadow_flags_out_of_range_are_refused(invoke, local_inventory, args, expected):
    result = invoke("shadow", "-i", local_inventory, *args)
    assert result.exit_code == 2 and expected in result.output and "Traceback" not in result.output


def test_promote_refuses_a_lease_above_the_maximum(invoke, local_inventory):
    result = invoke("promote", "-i", local_inventory, "--lease-ttl", "901")
    assert result.exit_code == 2 and "--lease-ttl" in result.output


@pytest.mark.parametrize("content, expected", [
    ("shadow:\n  max_rel_l2_p99: " + "9" * 401 + "\n", "out of range"),
    (b"shadow:\n  max_rel_l2_p99: \xff\xfe\n", "not UTF-8"),
    ("shadow: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than"),
    (BILLION_LAUGHS, "expands to more than"),
    ("shadow:\n  max_rel_l2_p99: " + "9" * 5000 + "\n", "holds a value Python cannot read"),
], ids=["401-digits", "non-utf8", "deep", "billion-laughs", "5000-digits"])
def test_a_hostile_policy_is_a_config_error(invoke, local_inventory, tmp_path, content, expected):
    policy = tmp_path / "policy.yml"
    policy.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ConfigError, match=expected):
        load_policy(policy)
    result = invoke("promote", "-i", local_inventory, "--policy", policy)
    assert result.exit_code == 2 and expected in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize("overrides, expected", [
    ({"ansible_port": "abc"}, "field 'ansible_port' must be a TCP port"),
    ({"ansible_port": 70000}, "field 'ansible_port' must be a TCP port"),
    ({"serving_port": 1.5}, "field 'serving_port' must be a TCP port"),
    ({"cutover_connect_timeout_s": "soon"}, "field 'cutover_connect_timeout_s' must be a number of seconds"),
    ({"serving_start_timeout_s": float("nan")}, "must be a finite number"),
], ids=["port-text", "port-range", "serving-port-float", "timeout-text", "timeout-nan"])
def test_inventory_values_of_the_wrong_type_are_refused(invoke, tmp_path, overrides, expected):
    inventory = write_inventory(tmp_path / "inventory.yml", tmp_path, **overrides)
    result = invoke("status", "-i", inventory)
    assert result.exit_code == 2 and expected in result.stderr, result.output


def test_an_infinite_group_priority_is_refused(invoke, tmp_path):
    inventory = write_inventory(tmp_path / "inventory.yml", tmp_path)
    data = yaml.safe_load(inventory.read_text())
    data["all"]["children"] = {"gpus": {"vars": {"ansible_group_priority": float("inf")}, "hosts": {"local": None}}}
    inventory.write_text(yaml.safe_dump(data))
    result = invoke("status", "-i", inventory)
    assert result.exit_code == 2 and "all.children.gpus.vars.ansible_group_priority" in result.stderr, result.output


@pytest.mark.parametrize("value", [".nan", ".inf", "-1", "'soon'", "1" + "0" * 30])
def test_config_durations_must_be_finite_positive_numbers(invoke, local_inventory, tmp_path, value):
    config = tmp_path / "config.yml"
    config.write_text(f"lock_ttl_s: {value}\n")
    result = invoke("status", "-i", local_inventory, "--config", config)
    assert result.exit_code == 2 and "lock_ttl_s" in result.stderr, result.output


YAML_TEXTS = st.one_of(
    st.binary(max_size=300),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**80), max_value=10**80),
                           st.floats(), st.text(max_size=12)),
                 lambda inner: st.one_of(st.lists(inner, max_size=4),
                                         st.dictionaries(st.sampled_from(["shadow", "promote", "all", "hosts",
                                                                          "vars", "lock_ttl_s", "version", "local",
                                                                          "max_rel_l2_p99", "ansible_port"]),
                                                         inner, max_size=4)),
                 max_leaves=15).map(lambda value: yaml.safe_dump(value).encode()),
    st.integers(min_value=1, max_value=20_000).map(lambda depth: b"[" * depth + b"]" * depth),
)


@given(content=YAML_TEXTS)
def test_any_file_content_loads_or_is_a_config_error(tmp_path_factory, content):
    """Config, inventory and policy files holding anything: a result or a ConfigError, never another exception."""
    folder = tmp_path_factory.mktemp("files")
    path = Path(folder / "file.yml")
    path.write_bytes(content)
    for load in (load_settings, load_inventory, load_policy):
        try:
            load(str(path))
        except ConfigError:
            pass


def test_a_json_document_already_written_stays_the_only_thing_on_stdout(invoke, tmp_path):
    """status --json writes its document, then fails for the unreachable host: stdout stays that one document and
    the error goes to stderr."""
    inventory = write_inventory(tmp_path / "inventory.yml", tmp_path, ansible_connection="ssh",
                                ansible_host="127.0.0.1", ansible_port=1, serving_python="/usr/bin/python3",
                                cutover_connect_timeout_s=2)
    result = invoke("status", "-i", inventory, "--json")
    assert result.exit_code == 4
    document = json.loads(result.stdout)
    assert document["hosts"][0]["reachable"] is False
    assert result.stderr.startswith("error: ")
