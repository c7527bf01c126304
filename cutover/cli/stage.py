"""`cutover stage`: push a built release to the hosts (preflight, copy, verify, switch, state, restart)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from cutover import release
from cutover.stage import PLUGIN_CHANGED, RELEASE_NOT_LOADED, describe_restarts, stage_release
from cutover.cli import common
from cutover.errors import HostError, LockHeldError


@common.takes_globals("inventory", "limit", "config_file", "json_out", "verbose", "yes")
def stage(
    ctx: typer.Context,
    release_ref: Annotated[Optional[str], typer.Option(
        "--release", help="Release directory or id (default: the last `cutover build`).")] = None,
    releases: Annotated[Optional[Path], typer.Option(
        "--releases-dir", envvar=release.RELEASES_DIR_ENV, show_default=False,
        help="Where release ids are looked up (default: the config's releases_dir, else dist/releases).")] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Ansible check mode: report what would change, change nothing.")] = False,
    *,
    global_options: common.Globals,
) -> None:
    """Push a built release to the hosts (canary first), in mode triton.

    Per host: lock, preflight (GPU arch, driver, serving env, disk), copy and verify sha256 on the host,
    run the release's GPU parity subset on the host's GPU (inventory: gpu_check, gpu_check_device,
    gpu_check_timeout_s), switch current/previous atomically, install the plugin, control.json in mode
    triton, and restart serving only where it does not run this release yet (or its plugin wheel changed) and
    you agree (--yes or a prompt).
    Staging the same release again changes nothing. --check reports without changing anything.
    """
    c = common.context(global_options)
    rel = release.find_release(release_ref, releases or release.releases_dir(c.settings.releases_dir))
    c.say(f"staging release {rel.release_id} on {', '.join(h.name for h in c.hosts)}"
          + (" (check mode: nothing will change)" if check else ""))
    report = stage_release(
        c.inventory, c.hosts, c.settings, rel, check=check, say=c.say, verbose=c.ansible_output,
        confirm_restart=lambda reasons: c.confirm(
            f"Restart serving on {describe_restarts(reasons)} so it loads release {rel.release_id}?"))
    if c.options.json:
        common.print_json({"release_id": report.release_id, "check": check,
                           "restart_declined": report.restart_declined, "restart_reasons": report.restart_reasons,
                           "locks_lost": report.locks_lost,
                           "hosts": [vars(h) for h in report.hosts]})
    else:
        table = Table("host", "result", "changed", "restarted", "detail", title=f"stage {report.release_id}")
        for line in report.hosts:
            table.add_row(line.name, line.outcome, str(line.changed), "yes" if line.restarted else "no",
                          line.message)
        common.console.print(table)
        declined = {name: report.restart_reasons[name] for name in report.restart_declined}
        not_loaded = [name for name, why in declined.items() if RELEASE_NOT_LOADED in why]
        old_plugin = [name for name, why in declined.items() if PLUGIN_CHANGED in why]
        if not_loaded:
            common.console.print(
                f"not restarted (no --yes): serving on {', '.join(not_loaded)} does not run "
                f"release {report.release_id} yet; it stays in mode triton. `cutover stage --yes` restarts it")
        if old_plugin:
            common.console.print(
                f"not restarted (no --yes): serving on {', '.join(old_plugin)} keeps the old plugin until "
                f"restarted. `cutover stage --yes` restarts it")
        if all(h.outcome == "already staged" for h in report.hosts):
            common.console.print(f"release {report.release_id} is already staged on every host: nothing changed")
    if report.locks_lost:  # another operator may act on these hosts now: that comes before any host's failure
        raise LockHeldError("the stage ran, but its lock was lost: " + "; ".join(report.locks_lost),
                            hint="run `cutover status` to see who acts on these hosts before going on")
    if report.failed:
        raise HostError("stage did not complete on " + ", ".join(
            f"{h.name} ({h.outcome}: {h.message})" for h in report.failed),
            hint="hosts not named here are staged; fix the cause and run `cutover stage` again (it is safe)")


def register(app: typer.Typer) -> None:
    app.command()(stage)
