"""`cutover promote`: custom kernel live, host by host, canary first, each under a guarded watch."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.table import Table
from rich.text import Text

from checks.policy import load_policy
from cutover.cli import common
from cutover.cli.shadow import LeaseOpt, PolicyOpt, ReportsOpt, finite, refuse_policy_out_of_scope
from cutover.workflow.promote import PromoteOptions, run_promote
from cutover.workflow.shadow import DEFAULT_LEASE_TTL_S


@common.takes_globals("inventory", "limit", "config_file", "json_out", "verbose")
def promote(
    ctx: typer.Context,
    watch_minutes: Annotated[
        Optional[float],
        typer.Option(
            "--watch-minutes",
            min=0.05,
            callback=finite,
            show_default=False,
            help="Watch window per host before it goes leaseless (default: the policy's, 10 minutes).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Promote even without a passed shadow of the staged release (journaled).")
    ] = False,
    policy: PolicyOpt = None,
    lease_ttl: LeaseOpt = DEFAULT_LEASE_TTL_S,
    reports_dir: ReportsOpt = None,
    *,
    global_options: common.Globals,
) -> None:
    """Promote the staged release to serve live traffic: refused unless it passed shadow on every target.
    Hosts go one at a time, canary first: flip to custom with ack under a lease, watch health, verify-step
    rate and error counters against the shadow baseline; a regression rolls that host back and stops.
    After a clean window the host runs custom without a lease. Already promoted hosts are left alone.
    The watch shows its countdown, each probe's health, verify rate against the rollback floor, new error
    counts and the lease: redrawn on a terminal, one line per probe in a log. Where the shadow run is kept here
    (--reports-dir), the watch is recorded beside it and `cutover report` covers it."""
    options = PromoteOptions(
        policy=load_policy(policy), watch_minutes=watch_minutes, force=force, lease_ttl_s=lease_ttl,
        reports_dir=reports_dir,
    )
    c = common.context(global_options)
    refuse_policy_out_of_scope(ctx, options.policy, c.hosts)
    with common.live_view(c, options.policy.promote.probe_interval_s) as show:
        results = run_promote(c.inventory, c.hosts, c.settings, options, on_event=c.say,
                              on_watch=lambda tick: show(Text(tick.line()), tick.line()))
    if c.options.json:
        common.print_json({"hosts": [vars(r) for r in results]})
        return
    table = Table("host", "result", "detail", title="promote")
    for result in results:
        table.add_row(result.host, result.outcome, result.detail)
    common.console.print(table)
    if all(r.outcome == "already promoted" for r in results):
        common.console.print("already promoted on every host: nothing changed")


def register(app: typer.Typer) -> None:
    app.command()(promote)
