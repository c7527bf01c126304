"""Inventory and config loading: the packaged inventories load; bad input names file and field."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cutover import config
from cutover.errors import ConfigError

from .conftest import write_inventory


def test_packaged_local_inventory_is_the_default(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # no inventories/ here: the packaged copy is used
    inventory = config.load_inventory(None)
    (host,) = inventory.hosts
    assert host.is_local and host.serving_kind == "sandbox" and host.tp_size == 2 and host.gpu_arch == "none"
    assert host.paths.state_dir == str(tmp_path / ".local/share/cutover/local/state")
    assert host.serving_address == "127.0.0.1"


def test_ct200_inventory_describes_the_production_target():
    inventory = config.load_inventory(str(Path(__file__).parents[2] / "inventories" / "ct200.yml"))
    (host,) = inventory.hosts
    assert (host.name, host.tp_size, host.gpu_arch, host.serving_kind) == ("ct200", 8, "sm_120", "sglang")
    assert not host.is_local and host.manages_plugin
    assert inventory.select("serving") == [host]


@pytest.mark.parametrize("override,field,problem", [
    ({"tp_size": 0}, "tp_size", "must be a positive integer (ranks on the host), found 0"),
    ({"serving_kind": "vllm"}, "serving_kind", "must be one of sglang, sandbox, found 'vllm'"),
    ({"gpu_arch": "hopper"}, "gpu_arch", "must look like sm_120 or be 'none' (no GPU), found 'hopper'"),
    ({"cutover_root": None}, "cutover_root", "is missing"),
    ({"serving_restart_command": None}, "serving_restart_command", "is missing"),
    ({"cutover_state_dir": "{{ x }}"}, "cutover_state_dir", "uses Jinja templating"),
    ({"gpu_check": "yes"}, "gpu_check", "must be true or false, found 'yes'"),
    ({"gpu_check_device": -1}, "gpu_check_device", "must be a GPU index (0, 1, ...), found -1"),
    ({"gpu_check_timeout_s": 0}, "gpu_check_timeout_s", "must be a positive number of seconds, found 0"),
    ({"serving_start_timeout_s": "10m"}, "serving_start_timeout_s",
     "must be a positive number of seconds, found '10m'"),
    ({"cutover_serial": 0}, "cutover_serial",
     "must be a batch size, a percentage or a list of them (Ansible serial), found 0"),
    ({"cutover_serial": "150%"}, "cutover_serial",
     "must be a batch size, a percentage or a list of them (Ansible serial), found '150%'"),
    ({"cutover_serial": []}, "cutover_serial",
     "must be a batch size, a percentage or a list of them (Ansible serial), found []"),
    ({"cutover_serial": [1, "all"]}, "cutover_serial",
     "must be a batch size, a percentage or a list of them (Ansible serial), found [1, 'all']"),
])
def test_bad_host_fields_name_file_host_and_field(tmp_path, override, field, problem):
    inventory = write_inventory(tmp_path / "inv.yml", tmp_path, **override)
    with pytest.raises(ConfigError) as caught:
        config.load_inventory(str(inventory))
    assert caught.value.message.startswith(f"{inventory}: host 'local': field '{field}' {problem}")


def test_gpu_less_sglang_host_is_refused(tmp_path):
    inventory = write_inventory(tmp_path / "inv.yml", tmp_path, serving_kind="sglang", serving_service="x")
    with pytest.raises(ConfigError, match="field 'gpu_arch' is 'none', which only a sandbox host may declare"):
        config.load_inventory(str(inventory))


def test_invalid_yaml_names_the_line(tmp_path):
    bad = tmp_path / "inv.yml"
    bad.write_text("all:\n  hosts:\n    local: [\n")
    with pytest.raises(ConfigError, match=rf"^inventory {bad}: not valid YAML at line \d+"):
        config.load_inventory(str(bad))


def test_unknown_group_field_is_named(tmp_path):
    bad = tmp_path / "inv.yml"
    bad.write_text(yaml.safe_dump({"all": {"host": {"a": {}}}}))
    with pytest.raises(ConfigError, match=r"group 'all': unknown field 'host'"):
        config.load_inventory(str(bad))


def test_canary_goes_first_and_limit_selects(tmp_path):
    base = {"ansible_connection": "local", "cutover_root": "/r", "cutover_state_dir": "/s",
            "serving_kind": "sandbox", "tp_size": 1, "gpu_arch": "none", "serving_restart_command": "true"}
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump({"all": {"vars": base, "children": {
        "serving": {"hosts": {"a": None, "b": {"cutover_canary": True}, "c": None}}}}}))
    inventory = config.load_inventory(str(path))
    assert [h.name for h in inventory.hosts] == ["b", "a", "c"]
    assert [h.name for h in inventory.select("c,a")] == ["a", "c"]
    with pytest.raises(ConfigError, match="--limit 'zz': 'zz' is neither a host nor a group"):
        inventory.select("zz")


def test_settings_file_errors_name_the_field(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text("lock_ttl_s: -5\n")
    with pytest.raises(ConfigError, match=rf"^{path}: field 'lock_ttl_s' must be a positive number"):
        config.load_settings(str(path))
    path.write_text("operatr: me\n")
    with pytest.raises(ConfigError, match="unknown field 'operatr'"):
        config.load_settings(str(path))
    path.write_text("operator: carol@ops\nack_timeout_s: 5\n")
    assert config.load_settings(str(path)).operator == "carol@ops"
    with pytest.raises(ConfigError, match="does not exist"):
        config.load_settings(str(tmp_path / "missing.yml"))


def without(inventory: Path, field: str) -> Path:
    """The one-host inventory of write_inventory with `field` removed from the host's variables."""
    data = yaml.safe_load(inventory.read_text())
    del data["all"]["hosts"]["local"][field]
    inventory.write_text(yaml.safe_dump(data))
    return inventory


def three_hosts(path, **per_host) -> Path:
    """A three-host local inventory (a, b, c); per_host maps a host name to its own variables."""
    base = {"ansible_connection": "local", "cutover_root": "/r", "cutover_state_dir": "/s",
            "serving_kind": "sandbox", "tp_size": 1, "gpu_arch": "none", "serving_restart_command": "true"}
    path.write_text(yaml.safe_dump({"all": {"vars": base, "hosts": {name: per_host.get(name) for name in "abc"}}}))
    return path


@pytest.mark.parametrize("serial", [3, "50%", [1, 2], [1, "100%"]])
def test_rollout_serial_is_the_inventory_value(tmp_path, serial):
    inventory = config.load_inventory(str(three_hosts(tmp_path / "inv.yml", **{n: {"cutover_serial": serial}
                                                                              for n in "abc"})))
    assert inventory.serial == serial


def test_rollout_serial_defaults_to_canary_then_the_rest(tmp_path):
    assert config.load_inventory(str(three_hosts(tmp_path / "inv.yml"))).serial == [1, "100%"]


def test_hosts_that_disagree_on_the_rollout_serial_are_refused(tmp_path):
    path = three_hosts(tmp_path / "inv.yml", b={"cutover_serial": 2})
    with pytest.raises(ConfigError) as caught:
        config.load_inventory(str(path))
    assert caught.value.message == f"{path}: field 'cutover_serial' differs between hosts (a: [1, '100%'], b: 2)"
    assert caught.value.hint == ("set it once for every host, in the vars of the `all` group (a rollout runs in one "
                                 "play)")


@pytest.mark.parametrize("kind,extra,expected", [
    ("sglang", {"serving_service": "sglang", "gpu_arch": "sm_120"}, 900),
    ("sandbox", {}, 120),
    ("sglang", {"serving_service": "sglang", "gpu_arch": "sm_120", "serving_start_timeout_s": 1800}, 1800),
])
def test_serving_start_timeout_is_resolved_once_for_cli_and_playbooks(tmp_path, kind, extra, expected):
    path = write_inventory(tmp_path / "inv.yml", tmp_path, serving_kind=kind, **extra)
    inventory = config.load_inventory(str(path if "serving_start_timeout_s" in extra
                                          else without(path, "serving_start_timeout_s")))
    (host,) = inventory.hosts
    assert host.start_timeout_s == expected
    assert inventory.ansible_inventory([host])["all"]["hosts"]["local"]["serving_start_timeout_s"] == expected


def test_missing_serving_port_is_named_when_it_is_needed(tmp_path):
    inventory = without(write_inventory(tmp_path / "inv.yml", tmp_path), "serving_port")
    (host,) = config.load_inventory(str(inventory)).hosts
    with pytest.raises(ConfigError) as caught:
        host.serving_port
    assert str(caught.value) == (f"{inventory}: host 'local': field 'serving_port' is missing\n"
                                 "  fix: set the HTTP port of the serving process (SGLang or the sandbox) in the "
                                 "host's or a group's vars, e.g. serving_port: 30001")


# -- variable precedence: what Ansible itself resolves -------------------------------------------------------

SGLANG_BASE = {"cutover_root": "/opt/cutover", "cutover_state_dir": "/var/lib/cutover", "serving_kind": "sglang",
               "serving_service": "sglang.service", "serving_python": "/usr/bin/python3", "serving_port": 30000,
               "tp_size": 8, "gpu_arch": "sm_120", "gpu_check_device": 0, "tag": "all"}


def multi_group_inventory(path: Path) -> Path:
    """Hosts in several groups at once: listed under `all.hosts` and again in a child group, nested children,
    same-depth conflicts, a group deepened by a second parent, a top-level group outside `all`, a group priority,
    the implicit `ungrouped` group and a host listed twice with its own variables."""
    path.write_text(yaml.safe_dump({
        "all": {
            "vars": SGLANG_BASE,
            "hosts": {"h1": None, "h2": {"serving_port": 31002}, "h5": None},
            "children": {
                "prod": {
                    "vars": {"cutover_root": "/srv/prod-cutover", "gpu_check_device": 3, "tag": "prod"},
                    "hosts": {"h1": None, "h2": None},
                    "children": {
                        "prod_eu": {"vars": {"cutover_state_dir": "/var/lib/eu", "tag": "prod_eu"},
                                    "hosts": {"h3": None},
                                    "children": {"aa_deep": None}},
                    },
                },
                "zeta": {"vars": {"serving_port": 32000, "tp_size": 4, "tag": "zeta"},
                         "hosts": {"h2": None, "h3": None}},
                "alpha": {"vars": {"gpu_check_device": 7, "tp_size": 2, "tag": "alpha"},
                          "hosts": {"h1": None, "h2": None}},
                "aa_deep": {"vars": {"cutover_root": "/srv/deep", "tag": "aa_deep"}, "hosts": {"h4": None}},
                "beta": {"vars": {"ansible_group_priority": 5, "gpu_check_device": 5, "tag": "beta"},
                         "hosts": {"h3": None}},
            },
        },
        # a top-level group nobody lists as a child: a child of `all`, at depth 1
        "edge": {"vars": {"tag": "edge", "tp_size": 1}, "hosts": {"h4": {"serving_port": 34000}, "h3": None}},
        # listed again at the top: the later host variables win, the group's vars merge with its first listing
        "prod": {"vars": {"serving_python": "/opt/prod/python"}, "hosts": {"h1": {"serving_port": 31001}}},
        "ungrouped": {"vars": {"tag": "ungrouped", "tp_size": 6}},
    }))
    return path


def test_host_in_several_groups_gets_ansibles_precedence(tmp_path):
    """The reviewed case (a host under `all.hosts` and under a child group) and the rest of Ansible's order:
    all < groups by depth, then ansible_group_priority, then name < the host's own vars."""
    inventory = config.load_inventory(str(multi_group_inventory(tmp_path / "inv.yml")))
    by_name = {h.name: h.vars for h in inventory.hosts}
    pick = ("cutover_root", "cutover_state_dir", "gpu_check_device", "serving_port", "tp_size", "serving_python",
            "tag")
    got = {name: tuple(by_name[name][key] for key in pick) for name in sorted(by_name)}
    assert got == {
        # prod (depth 1) beats all; alpha sorts before prod at depth 1, so prod wins; host vars win last
        "h1": ("/srv/prod-cutover", "/var/lib/cutover", 3, 31001, 2, "/opt/prod/python", "prod"),
        # zeta sorts after prod and alpha: its vars win among the three; the host's own serving_port wins
        "h2": ("/srv/prod-cutover", "/var/lib/cutover", 3, 31002, 4, "/opt/prod/python", "zeta"),
        # prod_eu (depth 2) beats zeta and edge (depth 1); beta's priority 5 puts it after prod at depth 1
        "h3": ("/srv/prod-cutover", "/var/lib/eu", 5, 32000, 4, "/opt/prod/python", "prod_eu"),
        # aa_deep is also prod_eu's child, so depth 3: it beats edge (depth 1) and the inherited prod vars
        "h4": ("/srv/deep", "/var/lib/eu", 3, 34000, 1, "/opt/prod/python", "aa_deep"),
        # only in `all`: Ansible puts it in `ungrouped`
        "h5": ("/opt/cutover", "/var/lib/cutover", 0, 30000, 6, "/usr/bin/python3", "ungrouped"),
    }
    assert "ansible_group_priority" not in by_name["h3"]
    assert inventory.groups["prod"] == ["h1", "h2", "h3", "h4"] and inventory.groups["aa_deep"] == ["h4"]
    assert [h.name for h in inventory.select("edge")] == ["h4", "h3"]  # rollout order
    # the copy handed to the playbooks carries the same values as the CLI uses
    handed = inventory.ansible_inventory(inventory.hosts)["all"]["hosts"]
    assert handed["h1"]["cutover_root"] == "/srv/prod-cutover" and handed["h1"]["gpu_check_device"] == 3


def ansible_inventory_cli() -> str | None:
    beside = Path(sys.executable).parent / "ansible-inventory"
    return str(beside) if beside.exists() else shutil.which("ansible-inventory")


def ansible_host_vars(source: Path, host: str, tmp_path: Path) -> dict:
    """What `ansible-inventory --host` resolves for `host` from `source` (no ansible.cfg, default plugins)."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"), "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1"}
    done = subprocess.run([ansible_inventory_cli(), "-i", str(source), "--host", host], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def assert_resolves_like_ansible(source: Path, tmp_path: Path) -> config.Inventory:
    """Every variable `ansible-inventory --host` resolves for each host, cutover resolves to the same value."""
    inventory = config.load_inventory(str(source))
    for host in inventory.hosts:
        expected = ansible_host_vars(source, host.name, tmp_path)
        assert {key: host.vars.get(key) for key in expected} == expected, host.name
    return inventory


needs_ansible_inventory = pytest.mark.skipif(ansible_inventory_cli() is None,
                                             reason="ansible-inventory (ansible-core) is not installed")


@needs_ansible_inventory
def test_resolution_matches_ansible_inventory_host(tmp_path):
    inventory = assert_resolves_like_ansible(multi_group_inventory(tmp_path / "inv.yml"), tmp_path)
    assert all(host.vars["tag"] != "all" for host in inventory.hosts)  # group precedence decides for every host


def write_yaml(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


@needs_ansible_inventory
def test_group_vars_and_host_vars_directories_resolve_like_ansible(tmp_path):
    """`group_vars/all.yml` setting cutover_root (the field cutover reported missing before), a group's file,
    a host's file and a host_vars directory of several files."""
    source = tmp_path / "inventory"
    write_yaml(source / "hosts.yml", {"all": {"children": {"prod": {"hosts": {"h1": None, "h2": None}},
                                                            "canary": {"hosts": {"h2": {"serving_port": 31002}}}}}})
    write_yaml(source / "group_vars" / "all.yml", {k: v for k, v in SGLANG_BASE.items() if k != "tp_size"})
    write_yaml(source / "group_vars" / "prod.yml", {"tp_size": 4, "tag": "prod"})
    write_yaml(source / "group_vars" / "canary" / "main.yml", {"cutover_canary": True, "tag": "canary"})
    write_yaml(source / "host_vars" / "h1.yml", {"gpu_check_device": 2})
    write_yaml(source / "host_vars" / "h2" / "a.yml", {"serving_python": "/opt/h2/python"})
    write_yaml(source / "host_vars" / "h2" / "b.yml", {"gpu_check_device": 5})
    inventory = assert_resolves_like_ansible(source, tmp_path)
    by_name = {h.name: h for h in inventory.hosts}
    assert [h.name for h in inventory.hosts] == ["h2", "h1"]  # the canary (from group_vars/canary/) first
    assert by_name["h1"].paths.cutover_root == "/opt/cutover" and by_name["h1"].tp_size == 4
    assert (by_name["h2"].vars["serving_python"], by_name["h2"].vars["gpu_check_device"]) == ("/opt/h2/python", 5)
    # canary and prod are both at depth 1: the name sorting last (prod) wins, as in Ansible
    assert by_name["h2"].vars["tag"] == "prod" and by_name["h2"].serving_port == 31002


@needs_ansible_inventory
def test_ini_inventory_resolves_like_ansible(tmp_path):
    source = tmp_path / "hosts.ini"
    source.write_text(
        "[serving:children]\nprod\nlab\n\n"
        "[prod]\nct1 ansible_host=10.0.0.1 serving_port=31001\nct2 ansible_host=10.0.0.2 cutover_canary=true\n\n"
        "[lab]\nlab1 tp_size=2\n\n"
        "[prod:vars]\ntag=prod\ngpu_check_device=3\n\n"
        "[all:vars]\n" + "".join(f"{k}={v}\n" for k, v in SGLANG_BASE.items()))
    inventory = assert_resolves_like_ansible(source, tmp_path)
    assert [h.name for h in inventory.hosts] == ["ct2", "ct1", "lab1"]
    ct1 = inventory.hosts[1]
    assert (ct1.address, ct1.serving_port, ct1.tp_size, ct1.vars["gpu_check_device"]) == ("10.0.0.1", 31001, 8, 3)
    assert [h.name for h in inventory.select("serving")] == ["ct2", "ct1", "lab1"]
    assert inventory.select("lab")[0].tp_size == 2


@needs_ansible_inventory
def test_constructed_plugin_extends_a_yaml_inventory_like_ansible(tmp_path):
    """A directory holding a YAML inventory and a `constructed` config that composes a variable and builds
    groups from variables; the constructed group's group_vars apply as in a playbook."""
    source = tmp_path / "inventory"
    write_yaml(source / "01-hosts.yml", {"all": {"vars": SGLANG_BASE, "hosts": {
        "big1": {"gpu_count": 8}, "small1": {"gpu_count": 2}}}})
    write_yaml(source / "02-constructed.yml", {
        "plugin": "ansible.builtin.constructed", "strict": True,
        "compose": {"tp_size": "gpu_count", "serving_port": "30000 + gpu_count"},
        "groups": {"big_gpus": "gpu_count >= 8"},
        "keyed_groups": [{"key": "gpu_arch", "prefix": "arch"}]})
    write_yaml(source / "group_vars" / "big_gpus.yml", {"cutover_canary": True, "tag": "big"})
    inventory = assert_resolves_like_ansible(source, tmp_path)
    assert [(h.name, h.tp_size, h.serving_port) for h in inventory.hosts] == [("big1", 8, 30008), ("small1", 2, 30002)]
    assert inventory.hosts[0].vars["tag"] == "big"
    assert [h.name for h in inventory.select("big_gpus")] == ["big1"]
    assert [h.name for h in inventory.select("arch_sm_120")] == ["big1", "small1"]


def test_a_source_ansible_cannot_parse_is_refused(tmp_path):
    source = tmp_path / "plugin.yml"
    write_yaml(source, {"plugin": "ansible.builtin.constructed", "strict": True, "groups": {"x": "undefined_var"}})
    with pytest.raises(ConfigError, match=rf"^{source}: (Ansible cannot parse this inventory|field 'hosts')"):
        config.load_inventory(str(source))


def test_group_loops_and_bad_priorities_are_refused_with_ansibles_reason(tmp_path, capfd):
    """Ansible's yaml plugin refuses these; cutover refuses the inventory and Ansible's warnings say why."""
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump({"all": {"vars": SGLANG_BASE, "children": {
        "a": {"hosts": {"h": None}, "children": {"b": {"children": {"a": None}}}}}}}))
    with pytest.raises(ConfigError, match=rf"^{path}: Ansible cannot parse this inventory"):
        config.load_inventory(str(path))
    assert "Adding group 'b' as child to 'a' creates a recursive dependency loop" in capfd.readouterr().err
    path.write_text(yaml.safe_dump({"all": {"vars": SGLANG_BASE, "children": {
        "a": {"hosts": {"h": None}, "vars": {"ansible_group_priority": "high"}}}}}))
    with pytest.raises(ConfigError, match=rf"^{path}: Ansible cannot parse this inventory"):
        config.load_inventory(str(path))
    assert "invalid literal for int() with base 10: 'high'" in capfd.readouterr().err


@pytest.mark.parametrize("known_hosts,expected", [
    ("/home/ops/.ssh/known_hosts", "UserKnownHostsFile=/home/ops/.ssh/known_hosts"),
    # ssh reads whitespace there as a list of files: the path goes in double quotes, the option in shell quotes
    ("/home/ops/My Keys/known_hosts", 'UserKnownHostsFile="/home/ops/My Keys/known_hosts"'),
])
def test_known_hosts_path_reaches_ansibles_ssh_as_one_argument(tmp_path, known_hosts, expected):
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump({"all": {"vars": SGLANG_BASE,
                                            "hosts": {"h": {"cutover_known_hosts": known_hosts}}}}))
    (host,) = config.load_inventory(str(path)).hosts
    # Ansible's ssh connection splits ansible_ssh_common_args with shlex.split
    assert shlex.split(host.vars["ansible_ssh_common_args"]) == ["-o", expected, "-o", "StrictHostKeyChecking=yes"]
    assert host.known_hosts == known_hosts  # paramiko's side reads the plain path
