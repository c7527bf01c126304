"""The `cutover` typer app: global options, the error boundary, and the verb registry.

Adding a verb: write `cutover/cli/<verb>.py` with a function `register(app: typer.Typer) -> None` that does
`app.command()(<verb function>)` (the function's docstring is its help; it takes the shared options from
`cutover.cli.common` and calls one library function), then add ONE line to the registry below:

    from cutover.cli import <verb>; <verb>.register(app)

Library code raises `cutover.errors.CutoverError` subclasses; this module's error boundary prints
`error: <message>` (and `  fix: <hint>`) on stderr and exits with the error's exit code.
"""

from __future__ import annotations

from typing import Annotated

import typer
from typer.core import TyperGroup

from cutover import __version__
from cutover.cli import common
from cutover.errors import CutoverError


class CutoverGroup(TyperGroup):
    """Turns CutoverError into a message on stderr and the error's exit code (the only place that does)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except CutoverError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(err.exit_code) from err


app = typer.Typer(
    cls=CutoverGroup,
    name="cutover",
    help="Take a custom CUDA attention kernel from benchmark to live SGLang traffic, safely.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cutover {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    inventory: common.InventoryOpt = None,
    limit: common.LimitOpt = None,
    config_file: common.ConfigOpt = None,
    json_out: common.JsonOpt = False,
    verbose: common.VerboseOpt = False,
    yes: common.YesOpt = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """cutover: build, stage, shadow, promote and roll back a custom verify-attention kernel in SGLang."""
    ctx.obj = common.Globals(inventory, limit, config_file, json_out, verbose, yes)


# Verb registry: one line per verb module.
from cutover.cli import build; build.register(app)  # noqa: E402,E702
from cutover.cli import stage; stage.register(app)  # noqa: E402,E702
from cutover.cli import status; status.register(app)  # noqa: E402,E702
from cutover.cli import rollback; rollback.register(app)  # noqa: E402,E702
from cutover.cli import shadow; shadow.register(app)  # noqa: E402,E702
from cutover.cli import promote; promote.register(app)  # noqa: E402,E702
from cutover.cli import report; report.register(app)  # noqa: E402,E702
from cutover.cli import sandbox; sandbox.register(app)  # noqa: E402,E702
from cutover.cli import replay; replay.register(app)  # noqa: E402,E702
