"""Inventory and operator-config loading; every message names the file and the field.

An inventory is any Ansible inventory source: a YAML or INI file, a directory of them, or an inventory plugin's
config (e.g. `constructed`), with its `group_vars/` and `host_vars/`. ansible-core itself resolves each host's
variables (`inventorysource`: what `ansible-inventory --host` shows); cutover validates the variables it needs
(architecture.md lists them) and hands Ansible a resolved copy, so the CLI and the playbooks always agree on every
path. Variables cutover reads may use `~` and `$VAR` (expanded on this machine, for `ansible_connection: local`
hosts only) but no Jinja templating; other variables pass through to Ansible untouched.

The operator config (`--config`, default `~/.config/cutover/config.yml` when it exists) holds settings of
the operator's side: who they are, lock and ack timings, where releases are built, where events are announced.
"""

from __future__ import annotations

import getpass
import math
import os
import re
import shlex
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cutover import inventorysource, resources
from cutover.errors import ConfigError
from cutover.hostprotocol.hostlayout import HostPaths
from cutover.inventoryvalues import check_connection_values
from cutover.safeyaml import load_yaml
from cutover.notify import NotifyConfig, parse_config as parse_notify_config

SERVING_KINDS = ("sglang", "sandbox")
NO_GPU = "none"
ARCH_PATTERN = re.compile(r"^sm_\d{2,3}a?$")
DEFAULT_INVENTORY = "inventories/local.yml"
DEFAULT_CONFIG = "~/.config/cutover/config.yml"
# Variables whose values cutover reads itself: they must be literal (no Jinja).
PATH_VARS = ("cutover_root", "cutover_state_dir", "serving_python")
OPERATOR_PATH_VARS = ("cutover_known_hosts", "ansible_ssh_private_key_file", "cutover_plugin_wheel")
DEFAULT_SERIAL = [1, "100%"]  # Ansible `serial` of a rollout: the canary alone, then every other host
SERIAL_PERCENT = re.compile(r"^([1-9]\d?|100)%$")
# How long a (re)started serving process may take to heartbeat with the new release, by serving_kind.
DEFAULT_START_TIMEOUT_S = {"sglang": 900, "sandbox": 120}
DEFAULT_GPU_CHECK_TIMEOUT_S = 900  # the kernel acceptance at stage is killed and refused after this long


@dataclass(frozen=True)
class Host:
    """One target host with its variables as Ansible resolves them, validated."""

    name: str
    vars: dict
    inventory_file: str

    @property
    def is_local(self) -> bool:
        return self.vars.get("ansible_connection") == "local"

    @property
    def paths(self) -> HostPaths:
        return HostPaths(cutover_root=self.vars["cutover_root"], state_dir=self.vars["cutover_state_dir"])

    @property
    def tp_size(self) -> int:
        return self.vars["tp_size"]

    @property
    def serving_kind(self) -> str:
        return self.vars["serving_kind"]

    @property
    def gpu_arch(self) -> str:
        return self.vars["gpu_arch"]

    @property
    def address(self) -> str:
        return str(self.vars.get("ansible_host", self.name))

    @property
    def serving_address(self) -> str:
        """Where the serving process's HTTP endpoints listen (default: 127.0.0.1 for a local host, else the
        SSH address)."""
        default = "127.0.0.1" if self.is_local else self.address
        return str(self.vars.get("serving_address", default))

    @property
    def port(self) -> int:
        return int(self.vars.get("ansible_port", 22))

    @property
    def user(self) -> str | None:
        return self.vars.get("ansible_user")

    @property
    def key_file(self) -> str | None:
        return self.vars.get("ansible_ssh_private_key_file")

    @property
    def known_hosts(self) -> str:
        return self.vars.get("cutover_known_hosts") or os.path.expanduser("~/.ssh/known_hosts")

    @property
    def connect_timeout_s(self) -> float:
        return float(self.vars.get("cutover_connect_timeout_s", 10))

    @property
    def start_timeout_s(self) -> float:
        """How long a (re)started serving process may take to heartbeat with the new release (the playbooks
        read the same resolved `serving_start_timeout_s`)."""
        return float(self.vars["serving_start_timeout_s"])

    @property
    def serving_port(self) -> int:
        """The HTTP port of the serving process (ConfigError naming the field when the inventory has none)."""
        if "serving_port" not in self.vars:
            raise ConfigError(f"{self.inventory_file}: host {self.name!r}: field 'serving_port' is missing",
                              hint="set the HTTP port of the serving process (SGLang or the sandbox) in the host's "
                                   "or a group's vars, e.g. serving_port: 30001")
        return self.vars["serving_port"]

    @property
    def manages_plugin(self) -> bool:
        """Whether stage installs (and rollback --uninstall removes) the plugin wheel on this host."""
        return bool(self.vars.get("cutover_install_plugin", False))


@dataclass
class Inventory:
    """Hosts in rollout order (a host with `cutover_canary: true` first, then inventory order) and the
    rollout's Ansible `serial` (`cutover_serial`, one value for the whole inventory)."""

    path: Path
    hosts: list[Host]
    groups: dict[str, list[str]] = field(default_factory=dict)
    serial: int | str | list = field(default_factory=lambda: list(DEFAULT_SERIAL))

    def select(self, limit: str | None) -> list[Host]:
        """Hosts matching `--limit` (comma- or colon-separated host or group names), in rollout order."""
        if not limit:
            return list(self.hosts)
        wanted: set[str] = set()
        for token in filter(None, re.split(r"[,:]", limit)):
            token = token.strip()
            if token in self.groups:
                wanted.update(self.groups[token])
            elif any(h.name == token for h in self.hosts):
                wanted.add(token)
            else:
                known = ", ".join(h.name for h in self.hosts)
                raise ConfigError(
                    f"--limit {limit!r}: {token!r} is neither a host nor a group of {self.path}",
                    hint=f"use one of the hosts ({known}) or groups ({', '.join(sorted(self.groups))})",
                )
        return [h for h in self.hosts if h.name in wanted]

    def ansible_inventory(self, hosts: list[Host]) -> dict:
        """The resolved inventory handed to Ansible: one flat group, hosts in rollout order."""
        return {"all": {"hosts": {h.name: dict(h.vars) for h in hosts}}}


@dataclass(frozen=True)
class Settings:
    """Operator-side settings (the --config file)."""

    operator: str
    lock_ttl_s: float = 1800.0
    ack_timeout_s: float = 30.0
    heartbeat_stale_s: float = 10.0
    releases_dir: str = "dist/releases"
    source: str | None = None
    notify: NotifyConfig | None = None  # where workflow events are announced (cutover/notify.py)


def default_operator() -> str:
    """`$CUTOVER_OPERATOR`, else user@machine: the name other operators see on the lock."""
    return os.environ.get("CUTOVER_OPERATOR") or f"{getpass.getuser()}@{socket.gethostname()}"


def load_settings(path: str | None) -> Settings:
    """Read the operator config; a missing default file means defaults, a missing explicit one is an error."""
    explicit = path is not None
    file = Path(os.path.expanduser(path or DEFAULT_CONFIG))
    if not file.exists():
        if explicit:
            raise ConfigError(f"config file {file} does not exist", hint="pass an existing file to --config")
        return Settings(operator=default_operator())
    data = load_yaml(file, "config")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: the config must be a mapping of settings, found {type(data).__name__}")
    known = {"operator", "lock_ttl_s", "ack_timeout_s", "heartbeat_stale_s", "releases_dir", "notify"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{file}: unknown field {unknown[0]!r}", hint=f"known fields: {', '.join(sorted(known))}")
    for name in ("lock_ttl_s", "ack_timeout_s", "heartbeat_stale_s"):
        if name in data and not _seconds_ok(data[name]):
            raise ConfigError(f"{file}: field {name!r} must be a positive number of seconds, found {data[name]!r}")
    for name in ("operator", "releases_dir"):
        if name in data and (not isinstance(data[name], str) or not data[name]):
            raise ConfigError(f"{file}: field {name!r} must be a non-empty string, found {data[name]!r}")
    data.setdefault("operator", default_operator())
    if "notify" in data:
        data["notify"] = parse_notify_config(file, data["notify"])
    return Settings(**data, source=str(file))


def resolve_inventory_path(path: str | None) -> Path:
    """The inventory file: as given, else the packaged copy of the same name (so the default always works)."""
    given = Path(os.path.expanduser(path or DEFAULT_INVENTORY))
    if given.exists():
        return given
    if not given.is_absolute():
        packaged = resources.inventories_dir() / given.name
        if given.parent.name in ("inventories", "") and packaged.exists():
            return packaged
    raise ConfigError(
        f"inventory file {given} does not exist",
        hint="pass an existing inventory with --inventory/-i (packaged: "
        + ", ".join(p.name for p in sorted(resources.inventories_dir().glob("*.yml")))
        + ")",
    )


def load_inventory(path: str | None) -> Inventory:
    """Resolve an Ansible inventory (a YAML or INI file, a directory, a plugin config) with ansible-core, with
    its `group_vars/` and `host_vars/`, and validate every host's variables."""
    file = resolve_inventory_path(path)
    if file.is_file() and file.suffix in (".yml", ".yaml"):
        data = load_yaml(file, "inventory")
        if not (isinstance(data, dict) and "plugin" in data):  # a plugin config is the plugin's to check
            _check_yaml_groups(file, data)
    resolved = inventorysource.resolve(file)
    if not resolved.host_vars:
        raise ConfigError(f"{file}: field 'hosts': the inventory declares no host")
    hosts = [_validated_host(file, name, values) for name, values in resolved.host_vars.items()]
    hosts.sort(key=lambda h: not h.vars.get("cutover_canary", False))
    return Inventory(path=file, hosts=hosts, groups=resolved.groups, serial=_rollout_serial(file, hosts))


def _rollout_serial(file: Path, hosts: list[Host]) -> int | str | list:
    """The one `cutover_serial` of the inventory: a rollout is one play, and Ansible reads `serial` per play."""
    values = {h.name: h.vars.get("cutover_serial", DEFAULT_SERIAL) for h in hosts}
    first = hosts[0].name
    for name, value in values.items():
        if value != values[first]:
            raise ConfigError(
                f"{file}: field 'cutover_serial' differs between hosts ({first}: {values[first]!r}, "
                f"{name}: {value!r})",
                hint="set it once for every host, in the vars of the `all` group (a rollout runs in one play)")
    return values[first]


def _seconds_ok(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _serial_ok(value) -> bool:
    """An Ansible `serial` cutover accepts: a batch size >= 1, a percentage 1%..100%, or a non-empty list of them."""
    if isinstance(value, list):
        return bool(value) and all(_serial_ok(item) for item in value)
    if isinstance(value, str):
        return bool(SERIAL_PERCENT.match(value))
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_yaml_groups(file: Path, data) -> None:
    """cutover's checks on a YAML inventory file (Ansible's `yaml` plugin only warns and skips these)."""
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{file}: an inventory must be a mapping of groups (e.g. `all:`), found {data!r}")
    for name, group in data.items():
        _check_group(file, str(name), group)


def _check_group(file: Path, name: str, group) -> None:
    if group is None:
        return
    if not isinstance(group, dict):
        raise ConfigError(f"{file}: group {name!r} must be a mapping with hosts/vars/children")
    unknown = sorted(set(group) - {"hosts", "vars", "children"})
    if unknown:
        raise ConfigError(f"{file}: group {name!r}: unknown field {unknown[0]!r}",
                          hint="a group holds only `hosts`, `vars` and `children`; put variables under `vars`")
    if not isinstance(group.get("vars") or {}, dict):
        raise ConfigError(f"{file}: group {name!r}: field 'vars' must be a mapping")
    if not isinstance(group.get("hosts") or {}, dict):
        raise ConfigError(f"{file}: group {name!r}: field 'hosts' must be a mapping of host names to variables")
    if not isinstance(group.get("children") or {}, dict):
        raise ConfigError(f"{file}: group {name!r}: field 'children' must be a mapping of groups")
    for host_name, host_vars in (group.get("hosts") or {}).items():
        if host_vars is not None and not isinstance(host_vars, dict):
            raise ConfigError(f"{file}: host {str(host_name)!r}: its variables must be a mapping")
    for child_name, child in (group.get("children") or {}).items():
        _check_group(file, str(child_name), child)


def _validated_host(file: Path, name: str, values: dict) -> Host:
    def bad(field_name: str, problem: str, hint: str | None = None) -> ConfigError:
        return ConfigError(f"{file}: host {name!r}: field {field_name!r} {problem}", hint=hint)

    values = dict(values)
    check_connection_values(file, name, values)
    local = values.get("ansible_connection") == "local"
    for key in PATH_VARS + OPERATOR_PATH_VARS + ("serving_kind", "gpu_arch", "tp_size"):
        if isinstance(values.get(key), str) and "{{" in values[key]:
            raise bad(key, "uses Jinja templating, which cutover does not evaluate",
                      "write a literal value (~ and $VAR are expanded for local hosts)")
    for key in ("cutover_root", "cutover_state_dir"):
        if not isinstance(values.get(key), str) or not values[key]:
            raise bad(key, "is missing", "set it in the host's or a group's vars (see docs/architecture.md)")
    if local:
        values.setdefault("serving_python", sys.executable)
        for key in PATH_VARS:
            values[key] = os.path.abspath(os.path.expandvars(os.path.expanduser(values[key])))
    for key in OPERATOR_PATH_VARS:
        if isinstance(values.get(key), str):
            values[key] = os.path.abspath(os.path.expandvars(os.path.expanduser(values[key])))
    for key in PATH_VARS:
        if key in values and not str(values[key]).startswith("/"):
            raise bad(key, f"must be an absolute path on the host, found {values[key]!r}")
    if values.get("serving_kind") not in SERVING_KINDS:
        raise bad("serving_kind", f"must be one of {', '.join(SERVING_KINDS)}, found {values.get('serving_kind')!r}")
    tp = values.get("tp_size")
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise bad("tp_size", f"must be a positive integer (ranks on the host), found {tp!r}")
    arch = values.get("gpu_arch")
    if arch != NO_GPU and not (isinstance(arch, str) and ARCH_PATTERN.match(arch)):
        raise bad("gpu_arch", f"must look like sm_120 or be {NO_GPU!r} (no GPU), found {arch!r}")
    if arch == NO_GPU and values["serving_kind"] != "sandbox":
        raise bad("gpu_arch", "is 'none', which only a sandbox host may declare",
                  "set the host's real arch (e.g. sm_120)")
    # Resolved here, once: the playbooks read these values as cutover hands them over, without defaults.
    values.setdefault("gpu_check", True)
    values.setdefault("gpu_check_device", 0)
    values.setdefault("gpu_check_timeout_s", DEFAULT_GPU_CHECK_TIMEOUT_S)
    values.setdefault("serving_start_timeout_s", DEFAULT_START_TIMEOUT_S[values["serving_kind"]])
    if not isinstance(values["gpu_check"], bool):
        raise bad("gpu_check", f"must be true or false, found {values['gpu_check']!r}")
    device = values["gpu_check_device"]
    if not isinstance(device, int) or isinstance(device, bool) or device < 0:
        raise bad("gpu_check_device", f"must be a GPU index (0, 1, ...), found {device!r}")
    for key in ("gpu_check_timeout_s", "serving_start_timeout_s"):
        if not _seconds_ok(values[key]):
            raise bad(key, f"must be a positive number of seconds, found {values[key]!r}")
    if "cutover_serial" in values and not _serial_ok(values["cutover_serial"]):
        raise bad("cutover_serial", "must be a batch size, a percentage or a list of them (Ansible serial), "
                  f"found {values['cutover_serial']!r}", 'e.g. [1, "100%"] (the canary, then the rest) or 3')
    restart = values.get("serving_restart_command")
    if values["serving_kind"] == "sglang" and not (values.get("serving_service") or restart):
        raise bad("serving_service", "is missing", "name the systemd unit of SGLang, or set serving_restart_command")
    if values["serving_kind"] == "sandbox" and not restart:
        raise bad("serving_restart_command", "is missing",
                  "a sandbox host needs the command that (re)starts the sandbox")
    if values.get("cutover_install_plugin") and not values.get("cutover_plugin_wheel"):
        raise bad("cutover_plugin_wheel", "is missing", "cutover_install_plugin is true: name the plugin wheel "
                  "(build it with `pip wheel --no-deps -w dist/wheels .`)")
    if not local and not values.get("serving_python"):
        raise bad("serving_python", "is missing", "set the python of the serving environment on the host")
    if not local and values.get("cutover_known_hosts"):
        # Ansible's ssh verifies against the same known_hosts as paramiko, strictly.
        common = str(values.get("ansible_ssh_common_args", ""))
        if "UserKnownHostsFile" not in common:
            # ssh reads whitespace in the option as a list of files, so a path with spaces goes in double quotes;
            # Ansible splits these args with shlex, so the whole option is shell-quoted on top.
            path = str(values["cutover_known_hosts"])
            if '"' in path:
                raise bad("cutover_known_hosts", f"contains a double quote, which ssh options cannot carry: {path!r}")
            option = f'UserKnownHostsFile="{path}"' if re.search(r"\s", path) else f"UserKnownHostsFile={path}"
            known_hosts = shlex.quote(option)
            values["ansible_ssh_common_args"] = (common + f" -o {known_hosts} -o StrictHostKeyChecking=yes").strip()
    # A local host runs modules with cutover's own Python (interpreter discovery can pick a broken shim).
    values.setdefault("ansible_python_interpreter", sys.executable if local else "auto_silent")
    return Host(name=name, vars=values, inventory_file=str(file))
