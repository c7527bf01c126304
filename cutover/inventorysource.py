"""An inventory source resolved by ansible-core itself: hosts, groups and each host's variables.

ansible-core's `InventoryManager` parses the source with the inventory plugins the operator's Ansible enables
(a YAML or INI file, a directory of them, a plugin config such as `constructed`), and its `VariableManager`
merges every host's variables with `group_vars/` and `host_vars/` the way a playbook sees them. The variables
are those `ansible-inventory --host` prints (Ansible's internal variables left out), as plain Python values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cutover.errors import ConfigError


@dataclass(frozen=True)
class ResolvedInventory:
    """Hosts in the order Ansible met them, with their variables; group name -> its hosts (descendants' too)."""

    host_vars: dict[str, dict]
    groups: dict[str, list[str]]


def resolve(source: Path) -> ResolvedInventory:
    """Parse `source` with ansible-core; a source no inventory plugin accepts is a ConfigError."""
    from ansible import constants
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig
    from ansible.vars.manager import VariableManager

    if AnsibleCollectionConfig.collection_finder is None:  # as Ansible's CLIs do once: plugins by FQCN resolve
        init_plugin_loader()
    loader = DataLoader()
    strict = constants.INVENTORY_ANY_UNPARSED_IS_FAILED
    constants.INVENTORY_ANY_UNPARSED_IS_FAILED = True  # a source that does not parse is an error, never skipped
    try:
        manager = InventoryManager(loader=loader, sources=[str(source)])
    except AnsibleError as exc:
        raise ConfigError(
            f"{source}: Ansible cannot parse this inventory: {exc.message}",
            hint="the warnings above give each inventory plugin's reason; `ansible-inventory -i "
                 f"{source} --graph` shows the same",
        ) from None
    finally:
        constants.INVENTORY_ANY_UNPARSED_IS_FAILED = strict
    variables = VariableManager(loader=loader, inventory=manager)
    host_vars = {}
    for name, host in manager.hosts.items():
        resolved = variables.get_vars(host=host, include_hostvars=False, stage="all")
        host_vars[name] = _plain({k: v for k, v in resolved.items() if k not in constants.INTERNAL_STATIC_VARS})
    groups = {name: sorted(h.name for h in group.get_hosts()) for name, group in manager.groups.items()}
    return ResolvedInventory(host_vars=host_vars, groups=groups)


def _plain(values: dict) -> dict:
    """Ansible's tagged values (origin-carrying str/int/dict subclasses) as plain JSON-like Python values."""
    return json.loads(json.dumps(values, default=str))
