"""What every verb shares: the global options, their merge, inventory/config loading, output helpers.

Global options are accepted before the verb (`cutover -i inv.yml stage`) and after it
(`cutover stage -i inv.yml`); a verb declares them by taking the `*Opt` parameters below and calling
`common.context(ctx, ...)`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Annotated, Optional

import typer
from rich.console import Console

from cutover import config, jsonout
from cutover.config import Host, Inventory, Settings

InventoryOpt = Annotated[Optional[str], typer.Option(
    "--inventory", "-i", envvar="CUTOVER_INVENTORY", show_default=False,
    help="Ansible inventory of the target hosts: a YAML or INI file, a directory, a plugin config "
         "(default: inventories/local.yml, the sandbox here).")]
LimitOpt = Annotated[Optional[str], typer.Option(
    "--limit", envvar="CUTOVER_LIMIT", help="Only these hosts or groups (comma-separated).")]
ConfigOpt = Annotated[Optional[str], typer.Option(
    "--config", envvar="CUTOVER_CONFIG", show_default=False,
    help="Operator config file (default: ~/.config/cutover/config.yml if it exists).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document for machines instead of tables.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show Ansible's output and more detail.")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", envvar="CUTOVER_YES",
                                      help="Agree to restarts of the serving process without a prompt.")]

console = Console()
err_console = Console(stderr=True)


@dataclass
class Globals:
    inventory: str | None = None
    limit: str | None = None
    config: str | None = None
    json: bool = False
    verbose: bool = False
    yes: bool = False


@dataclass
class Context:
    """A verb's resolved world: its options, the operator settings, the inventory and the selected hosts."""

    options: Globals
    settings: Settings
    inventory: Inventory
    hosts: list[Host]

    @property
    def ansible_output(self) -> bool:
        """Show Ansible's own output (--verbose), never into a --json stdout."""
        return self.options.verbose and not self.options.json

    def say(self, message: str) -> None:
        """Progress for people (on stderr when --json, so stdout stays one JSON document)."""
        (err_console if self.options.json else console).print(message, highlight=False)

    def confirm(self, question: str) -> bool:
        """--yes agrees; otherwise ask on a terminal; a non-interactive run without --yes declines."""
        if self.options.yes:
            return True
        if self.options.json or not sys.stdin.isatty():
            return False
        return typer.confirm(question, default=False)


def merged(ctx: typer.Context, inventory=None, limit=None, config_file=None, json_out=False, verbose=False,
           yes=False) -> Globals:
    """Options given after the verb win over the same options given before it."""
    base: Globals = (ctx.find_root().obj if isinstance(ctx.find_root().obj, Globals) else Globals())
    return Globals(
        inventory=inventory or base.inventory,
        limit=limit or base.limit,
        config=config_file or base.config,
        json=json_out or base.json,
        verbose=verbose or base.verbose,
        yes=yes or base.yes,
    )


def context(ctx: typer.Context, inventory=None, limit=None, config_file=None, json_out=False, verbose=False,
            yes=False) -> Context:
    """Merge the options, then load settings and inventory and select the --limit hosts."""
    options = merged(ctx, inventory, limit, config_file, json_out, verbose, yes)
    settings = config.load_settings(options.config)
    inv = config.load_inventory(options.inventory)
    return Context(options, settings, inv, inv.select(options.limit))


class _Stdout:
    """Whether the running verb has written its JSON document (the error boundary then keeps stdout to that one
    document and reports the error on stderr)."""

    json_written = False


def print_json(document) -> None:
    sys.stdout.write(jsonout.dumps(document, indent=2, sort_keys=True) + "\n")
    _Stdout.json_written = True


def json_document_written(reset: bool = False) -> bool:
    """Whether print_json ran since the last reset; `reset` starts a new invocation."""
    written = _Stdout.json_written
    if reset:
        _Stdout.json_written = False
    return written
