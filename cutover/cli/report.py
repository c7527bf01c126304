"""`cutover report`: Markdown + JSON + PNG plots of a shadow run."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from cutover.cli import common
from cutover.cli.shadow import ReportsOpt
from cutover.workflow.report import write_report
from cutover.workflow.runstore import RunStore, latest_run_id


@common.takes_globals("json_out")
def report(
    ctx: typer.Context,
    run: Annotated[Optional[str], typer.Argument(help="Shadow run id (default: the newest run).")] = None,
    reports_dir: ReportsOpt = None,
    *,
    global_options: common.Globals,
) -> None:
    """Write the report of a shadow run (divergence over time per layer, truth-anchor errors, calls
    compared, the verdict and its reasons) into <reports-dir>/<run>/ and print its path."""
    run_id = run or latest_run_id(reports_dir)
    files = write_report(RunStore(reports_dir, run_id))
    if global_options.json:
        common.print_json(
            {
                "run_id": run_id,
                "markdown": str(files.markdown),
                "json": str(files.json),
                "plots": [str(p) for p in files.plots],
                "plot_note": files.plot_note,
            }
        )
        return
    if files.plot_note:
        common.console.print(files.plot_note, highlight=False)
    common.console.print(f"report: {files.markdown}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(report)
