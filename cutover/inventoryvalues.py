"""The connection values of one inventory host, checked on its resolved variables (whatever merged them).

cutover reads a few Ansible variables itself (ports, the SSH user and key, timeouts); a value of the wrong type
must be refused when the inventory is loaded, naming the host and the field, not fail later as a traceback.
"""

from __future__ import annotations

import math
from pathlib import Path

from cutover.errors import ConfigError
from cutover.hostprotocol.hostlayout import short_repr

PORT_VARS = ("ansible_port", "serving_port")
TEXT_VARS = ("ansible_host", "ansible_user", "serving_address")
SECONDS_VARS = ("cutover_connect_timeout_s",)
MAX_SECONDS = 7 * 86400.0


def check_connection_values(file: Path | str, host: str, values: dict) -> None:
    """ConfigError for the first connection variable of `host` (its resolved `values`) that cutover cannot use."""
    def bad(name: str, problem: str, hint: str) -> ConfigError:
        return ConfigError(f"{file}: host {host!r}: field {name!r} {problem}, found {short_repr(values[name])}",
                           hint=hint)

    for name in PORT_VARS:
        value = values.get(name)
        if name in values and not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535):
            raise bad(name, "must be a TCP port (an integer 1-65535)", f"e.g. {name}: 22" if name == "ansible_port"
                      else f"e.g. {name}: 30000")
    for name in TEXT_VARS:
        if name in values and not (isinstance(values[name], str) and values[name].strip()):
            raise bad(name, "must be a non-empty string", "write the value as text")
    for name in SECONDS_VARS:
        value = values.get(name)
        if name in values and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                   and math.isfinite(value) and 0 < value <= MAX_SECONDS):
            raise bad(name, f"must be a number of seconds in (0, {MAX_SECONDS:.0f}]", f"e.g. {name}: 10")
