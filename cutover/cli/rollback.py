"""`cutover rollback`: every rank back to Triton now, with acknowledgement."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.table import Table

from cutover import rollback as rollback_lib
from cutover.cli import common
from cutover.errors import AckTimeoutError, HostError


@common.takes_globals("inventory", "limit", "config_file", "json_out", "verbose", "yes")
def rollback(
    ctx: typer.Context,
    to: Annotated[Optional[str], typer.Option(
        "--to", help="`previous`: also switch the current release back to the previous one.")] = None,
    uninstall: Annotated[bool, typer.Option(
        "--uninstall", help="Also remove the plugin from the serving environment.")] = False,
    reason: Annotated[str, typer.Option(
        "--reason", help="Why (recorded in each host's journal).")] = "operator rollback",
    *,
    global_options: common.Globals,
) -> None:
    """Flip every rank back to SGLang's Triton kernel now, with acknowledgement.

    Direct over SSH (or local files), through Ansible if that fails; needs no local state. A host already on
    Triton is a success. Never blocked by another operator's lock (the override is journaled);
    --to previous and --uninstall respect it and need a restart to take effect (--yes or a prompt; hosts whose
    serving already runs the release that --to previous makes current are not asked about).
    --to previous switches once: a re-run says "already on <release>" and switches nothing.
    """
    if to not in (None, "previous"):
        raise typer.BadParameter("the only supported target is `previous`", param_hint="--to")
    c = common.context(global_options)
    results = rollback_lib.rollback_hosts(
        c.inventory, c.hosts, c.settings, reason=reason, to_previous=to == "previous", uninstall=uninstall,
        say=c.say, verbose=c.ansible_output,
        confirm_restart=lambda names: c.confirm(f"Restart serving on {', '.join(names)} to load the change?"))
    if c.options.json:
        common.print_json({"hosts": [vars(r) for r in results]})
    else:
        table = Table("host", "result", "path", "generation", "detail", title="rollback to triton")
        for r in results:
            result = ("[green]ok[/green]" if r.ok else "[red]failed[/red]")
            table.add_row(r.name, result, r.path, str(r.generation if r.generation is not None else "-"),
                          "; ".join(r.messages))
        common.console.print(table)
        if all(r.ok and r.already_triton for r in results):
            common.console.print("every host was already on triton: nothing changed (acknowledgements confirmed)")
    failed = [r for r in results if not r.ok]
    if failed:
        error = AckTimeoutError if all(r.acknowledged is False for r in failed) else HostError
        raise error("rollback incomplete on " + ", ".join(f"{r.name} ({'; '.join(r.messages)})" for r in failed),
                    hint="re-run `cutover rollback` with the same options (it is idempotent: a release already "
                    "switched back stays switched); a leased mode also expires to triton by itself")


def register(app: typer.Typer) -> None:
    app.command()(rollback)
