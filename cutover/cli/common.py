"""What every verb shares: the global options, their merge, inventory/config loading, output helpers.

Global options are accepted before the verb (`cutover -i inv.yml stage`) and after it
(`cutover stage -i inv.yml`); a verb names the ones it takes with `@common.takes_globals(...)`, gets them
merged as its `global_options` parameter, and calls `common.context(global_options)` for hosts and settings.
What was typed, in either position, wins over $CUTOVER_INVENTORY, $CUTOVER_LIMIT and $CUTOVER_CONFIG; typed
after the verb wins over typed before it.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Optional

import typer
from rich.console import Console, ConsoleDimensions
from rich.live import Live

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
GLOBAL_OPTIONS = {  # a verb's parameter name: its option and default
    "inventory": (InventoryOpt, None),
    "limit": (LimitOpt, None),
    "config_file": (ConfigOpt, None),
    "json_out": (JsonOpt, False),
    "verbose": (VerboseOpt, False),
    "yes": (YesOpt, False),
}

LOG_WIDTH = 1000  # off a terminal: wide enough that no table cell is cut and no line is wrapped


class LogWideConsole(Console):
    """A rich Console that, off a terminal (a log, a pipe, CI) and without $COLUMNS, lays tables out at their full
    width and leaves lines unwrapped, instead of squeezing them into 80 columns."""

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self.is_terminal or "COLUMNS" in os.environ:
            return size
        return ConsoleDimensions(LOG_WIDTH, size.height)


console = LogWideConsole()
err_console = LogWideConsole(stderr=True)


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


def _merged(ctx: typer.Context, inventory=None, limit=None, config_file=None, json_out=False, verbose=False,
            yes=False) -> Globals:
    """The verb's options: what was typed wins over the environment ($CUTOVER_INVENTORY, $CUTOVER_LIMIT,
    $CUTOVER_CONFIG) in either position, and typed after the verb wins over typed before it."""
    root = ctx.find_root()
    base: Globals = root.obj if isinstance(root.obj, Globals) else Globals()
    return Globals(
        inventory=_typed_first(ctx, root, "inventory", inventory, base.inventory),
        limit=_typed_first(ctx, root, "limit", limit, base.limit),
        config=_typed_first(ctx, root, "config_file", config_file, base.config),
        json=json_out or base.json,
        verbose=verbose or base.verbose,
        yes=yes or base.yes,
    )


def _typed(ctx: typer.Context, name: str) -> bool:
    """Whether option `name` was typed on the command line of `ctx` (not taken from the environment)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"  # by name: typer may vendor its own click


def _typed_first(ctx: typer.Context, root: typer.Context, name: str, verb_value, root_value):
    """Typed after the verb, else typed before it, else the environment's (the same variable feeds both)."""
    if _typed(ctx, name):
        return verb_value
    if ctx is not root and _typed(root, name):
        return root_value
    return verb_value or root_value


def takes_globals(*names: str):
    """Decorator: the verb also takes the named global options (from GLOBAL_OPTIONS, after its own options) and
    receives them merged with those typed before it as its `global_options: Globals` parameter."""

    def decorate(verb):
        own = [p for p in inspect.signature(verb, eval_str=True).parameters.values() if p.name != "global_options"]
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=GLOBAL_OPTIONS[name][0],
                                   default=GLOBAL_OPTIONS[name][1]) for name in names]

        @functools.wraps(verb)
        def run(ctx: typer.Context, **values):
            typed = {name: values.pop(name) for name in names}
            return verb(ctx, **values, global_options=_merged(ctx, **typed))

        run.__signature__ = inspect.Signature(own + added)
        run.__annotations__ = {p.name: p.annotation for p in own + added}
        return run

    return decorate


def context(options: Globals) -> Context:
    """Load settings and inventory for the merged options and select the --limit hosts."""
    settings = config.load_settings(options.config)
    inv = config.load_inventory(options.inventory)
    return Context(options, settings, inv, inv.select(options.limit))


class _Stdout:
    """Whether the running verb has written its JSON document (the error boundary then keeps stdout to that one
    document and reports the error on stderr)."""

    json_written = False


@contextmanager
def live_view(c: Context, plain_every_s: float):
    """Yields show(renderable, line) for a long verb's progress: `renderable` redrawn in place on a terminal; off
    one (a log, CI; on stderr under --json) `line`, unwrapped, at most once every `plain_every_s`."""
    if not c.options.json and sys.stdout.isatty():
        with Live(console=console, refresh_per_second=2, transient=False) as live:
            yield lambda renderable, line: live.update(renderable)
        return
    out = err_console if c.options.json else console
    last = [-math.inf]

    def show(renderable, line: str) -> None:
        if time.monotonic() - last[0] >= plain_every_s:
            last[0] = time.monotonic()
            out.print(line, markup=False, highlight=False, soft_wrap=True)

    yield show


def print_json(document) -> None:
    sys.stdout.write(jsonout.dumps(document, indent=2, sort_keys=True) + "\n")
    _Stdout.json_written = True


def json_document_written(reset: bool = False) -> bool:
    """Whether print_json ran since the last reset; `reset` starts a new invocation."""
    written = _Stdout.json_written
    if reset:
        _Stdout.json_written = False
    return written
