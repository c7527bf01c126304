"""The `cutover` typer app: global options, the error boundary, and the verb registry.

Adding a verb: write `cutover/cli/<verb>.py` with a function `register(app: typer.Typer) -> None` that does
`app.command()(<verb function>)` (the function's docstring is its help; `@common.takes_globals(...)` gives it the
global options it names, and it calls one library function), then add ONE line to the registry below:

    from cutover.cli import <verb>; <verb>.register(app)

Library code raises `cutover.errors.CutoverError` subclasses; this module's error boundary prints
`error: <message>` (and `  fix: <hint>`) on stderr and exits with the error's exit code. With `--json` the
same error is one JSON object on stdout, `{"error": ..., "fix": ..., "exit_code": ...}` (on stderr as text when
the verb wrote its JSON document already: stdout stays one document). Any other exception
(a bug, or an input no check names) becomes one line naming it and how to see the traceback (`-v`, which
re-raises it), with exit code UNEXPECTED_EXIT_CODE: never a bare traceback.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from cutover import __version__, jsonout
from cutover.cli import common
from cutover.errors import CutoverError

UNEXPECTED_EXIT_CODE = 9


class CutoverGroup(TyperGroup):
    """The error boundary: CutoverError and any unexpected exception become a message and an exit code (the only
    place that does); usage errors keep click's own message, as a JSON object with --json."""

    def invoke(self, ctx):
        words = [*ctx._protected_args, *ctx.args]  # the verb's own words, read before the verb consumes them
        common.json_document_written(reset=True)
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except CutoverError as err:
            _fail(ctx, words, err.message, err.hint, err.exit_code)
        except TyperException as err:  # a usage error (click shows it with the usage line)
            if not _flag(ctx, words, "json"):
                raise
            _fail(ctx, words, err.format_message(), "see --help", getattr(err, "exit_code", 2))
        except Exception as err:  # noqa: BLE001 - the boundary: nothing reaches the operator as a traceback
            if _flag(ctx, words, "verbose"):
                raise
            _fail(ctx, words, f"unexpected {type(err).__name__}: {_first_line(err)}",
                  "run the same command with -v to see the traceback, and report it", UNEXPECTED_EXIT_CODE)


def _flag(ctx: typer.Context, words: list[str], name: str) -> bool:
    """Whether --json / --verbose was given, before the verb (ctx.obj) or after it (its words)."""
    spelled = {"json": ("--json",), "verbose": ("--verbose", "-v")}[name]
    return bool(getattr(ctx.obj, name, False)) or any(word in spelled for word in words)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else "(no message)"


def _fail(ctx: typer.Context, words: list[str], message: str, hint: str | None, exit_code: int):
    """Report the error and exit: a JSON object on stdout with --json, unless the verb wrote its JSON document
    there already (stdout stays one document, which names the problem itself); else two lines on stderr."""
    if _flag(ctx, words, "json") and not common.json_document_written():
        sys.stdout.write(jsonout.dumps({"error": message, "fix": hint, "exit_code": exit_code}, sort_keys=True) + "\n")
    else:
        typer.echo(f"error: {message}" + (f"\n  fix: {hint}" if hint else ""), err=True)
    raise typer.Exit(exit_code)


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
