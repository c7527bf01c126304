"""`cutover status`: phase, modes, ranks, release, lease, lock, journal, verdict and divergence per host."""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from cutover import jsonout
from cutover.status import host_status
from cutover.cli import common
from cutover.errors import HostError
from cutover.servingstack import describe, stack_key


def _age(seconds) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


def _lease(status: dict) -> str:
    left = status["lease_remaining_s"]
    if left is None:
        return "none"
    return f"{left:.0f}s left" if left > 0 else f"expired {-left:.0f}s ago"


def _journal(entry) -> str:
    if not entry:
        return "-"
    when = time.strftime("%m-%d %H:%M:%S", time.localtime(entry.get("ts", 0)))
    return f"{when} {entry.get('action')} by {entry.get('actor')}"


def _verdict(status: dict) -> str:
    """The run's outcome (passed, failed, aborted), its run id and release; "(spent)" when a passed run no longer
    lets promote go ahead (a note under the table says why)."""
    verdict = status["verdict"]
    if not verdict:
        return "-"
    text = " ".join(str(verdict[k]) for k in ("outcome", "run_id", "release_id") if verdict.get(k))
    return text + (" (spent)" if status.get("verdict_spent") else "")


def _host(status: dict) -> str:
    return status["host"] + (" (SANDBOX)" if status.get("sandbox") else "")


def _hosts_table(statuses: list[dict]) -> Table:
    table = Table("host", "phase", "requested", "ranks active", "current release", "lease", "lock",
                  "last journal", "verdict", title="cutover status")
    for s in statuses:
        if not s["reachable"]:
            table.add_row(_host(s), "[red]unreachable[/red]", "-", s["error"].splitlines()[0], "", "", "", "", "")
            continue
        modes = sorted({r["mode_active"] for r in s["ranks"] if r["live"]})
        live = sum(r["live"] for r in s["ranks"])
        active = f"{live}/{len(s['ranks'])} {', '.join(modes)}" if live else "no serving process"
        requested = (f"{s['requested_mode']} (gen {s['generation']})" if s["requested_mode"]
                     else s["control_error"] or "no control file")
        if s["effective_mode"] and s["effective_mode"] != s["requested_mode"]:
            requested += f" -> {s['effective_mode']} (lease expired)"
        table.add_row(_host(s), s["phase"]["phase"], requested, active, s["current_release"] or "-", _lease(s),
                      s["lock"]["description"] if s["lock"] else "free", _journal(s["last_journal"]), _verdict(s))
    return table


def _ranks_table(statuses: list[dict]) -> Table:
    table = Table("host", "rank", "active", "gen seen", "release", "heartbeat", "kernel", "rel L2 max",
                  "max abs", "non-finite", title="ranks")
    for s in statuses:
        if not s["reachable"]:
            continue
        for r in s["ranks"]:
            div = s["divergence"].get(str(r["rank"])) or {}
            beat = ("none" if r["heartbeat_age_s"] is None
                    else _age(r["heartbeat_age_s"]) + ("" if r["live"] or r["stopped"] else " (stale)"))
            active = "stopped" if r["stopped"] else r["mode_active"] or "-"
            table.add_row(s["host"], str(r["rank"]), active, str(r["generation_seen"] or "-"),
                          r["release_id"] or "-", beat, r["kernel"] or "-",
                          f"{div['rel_l2_max']:.2e}" if div.get("rel_l2_max") is not None else "-",
                          f"{div['max_abs']:.2e}" if div.get("max_abs") is not None else "-",
                          str(div.get("nonfinite", "-")))
    return table


def _host_notes(statuses: list[dict]) -> list[str]:
    """Why a host's phase shows as unknown (its phase.json could not be read), why a passed verdict is spent, and
    a lock whose holder died, with what to do."""
    notes = []
    for s in statuses:
        if s.get("phase_error"):
            notes.append(s["phase_error"])
        if s.get("verdict_spent"):
            notes.append(f"host {s['host']}: shadow run {s['verdict']['run_id']} passed, but {s['verdict_spent']}")
        lock = s.get("lock")
        if lock and lock["holder_gone"] and lock["remaining_s"] > 0:
            notes.append(f"host {s['host']}: the lock's holder (pid {lock['pid']} on {lock['client']}) is no longer "
                         f"running: that cutover ended without releasing the lock. Fix: {lock['owner']}'s next "
                         f"cutover command takes it over; anyone else waits until it expires in "
                         f"{lock['remaining_s']:.0f} s (`cutover rollback` is never blocked)")
    return notes


def _rank_notes(statuses: list[dict]) -> list[str]:
    """Why a rank's active mode differs from what control.json asks, as its heartbeat says; one line per host
    and reason (an expired lease gives every rank the same one)."""
    notes = []
    for s in statuses:
        ranks_by_reason: dict[str, list[str]] = {}
        for r in s.get("ranks", []):
            if r["reason"]:
                ranks_by_reason.setdefault(r["reason"], []).append(str(r["rank"]))
        notes += [f"host {s['host']} rank{'s' if len(ranks) > 1 else ''} {', '.join(ranks)}: {reason}"
                  for reason, ranks in ranks_by_reason.items()]
    return notes


def _stack_notes(statuses: list[dict]) -> list[str]:
    """What each host's live ranks serve with (cutover.servingstack), one line per host and stack: the stack a
    shadow verdict must have recorded for promote to accept it."""
    notes = []
    for s in statuses:
        ranks_by_stack: dict[str, list[str]] = {}
        for r in s.get("ranks", []):
            if r["live"]:
                ranks_by_stack.setdefault(stack_key(r["stack"] or {}), []).append(str(r["rank"]))
        for key, ranks in sorted(ranks_by_stack.items()):
            which = "" if len(ranks_by_stack) == 1 else f" rank{'s' if len(ranks) > 1 else ''} {', '.join(ranks)}"
            notes.append(f"host {s['host']}{which} serves with {describe(json.loads(key))}")
    return notes


CLOCK_NOTE_S = 1.0  # a host clock this far from ours is worth a line under the table


def _clock_notes(statuses: list[dict]) -> list[str]:
    notes = []
    for s in statuses:
        offset = s.get("clock_offset_s") or 0.0
        if abs(offset) >= CLOCK_NOTE_S:
            notes.append(f"host {s['host']}: its clock is {abs(offset):.1f} s {'ahead of' if offset > 0 else 'behind'} "
                         "this machine's; leases, locks and heartbeat ages above are on the host's clock")
    return notes


def _divergence(status: dict) -> str:
    """Calls compared and the worst relative L2 over the host's ranks' latest stats ("-" when none compared)."""
    summaries = status.get("divergence", {}).values()
    compared = sum(d.get("compared") or 0 for d in summaries)
    worst = max((d["rel_l2_max"] for d in summaries if d.get("rel_l2_max") is not None), default=None)
    return f"compared {compared}, rel L2 max {'-' if worst is None else f'{worst:.2e}'}"


def plain_line(status: dict) -> str:
    """One host on one unwrapped line, for logs (`status --watch` off a terminal)."""
    stamp = time.strftime("%H:%M:%S")
    if not status["reachable"]:
        return f"{stamp} {_host(status)}: unreachable: {status['error'].splitlines()[0]}"
    live = [r for r in status["ranks"] if r["live"]]
    modes = ", ".join(sorted({r["mode_active"] for r in live})) or "no serving process"
    lock = status["lock"]["description"] if status["lock"] else "free"
    return (f"{stamp} {_host(status)}: phase {status['phase']['phase']} | requested "
            f"{status['requested_mode'] or '-'} | ranks {len(live)}/{len(status['ranks'])} {modes} | release "
            f"{status['current_release'] or '-'} | lease {_lease(status)} | lock {lock} | {_divergence(status)} | "
            f"verdict {_verdict(status)}")


def _watch(c: common.Context, interval_s: float) -> None:
    """Read every host each `interval_s` until Ctrl-C: redrawn tables on a terminal, one plain line per host per
    interval off one, one JSON document per line under --json. Changes nothing on the hosts."""
    def read() -> list[dict]:
        return [host_status(host, c.settings) for host in c.hosts]

    try:
        if not c.options.json and sys.stdout.isatty():
            with Live(console=common.console, auto_refresh=False) as live:
                while True:
                    statuses = read()
                    heading = f"every {interval_s:g} s, read at {time.strftime('%H:%M:%S')} - Ctrl-C stops watching"
                    live.update(Group(Text(heading), *_view(statuses)), refresh=True)
                    time.sleep(interval_s)
        while True:
            statuses = read()
            if c.options.json:
                sys.stdout.write(jsonout.dumps({"at": time.time(), "hosts": statuses}, sort_keys=True) + "\n")
            else:
                for line in map(plain_line, statuses):
                    common.console.print(line, markup=False, highlight=False, soft_wrap=True)
            sys.stdout.flush()
            time.sleep(interval_s)
    except KeyboardInterrupt:
        common.err_console.print("stopped watching (Ctrl-C); nothing on the hosts was changed", highlight=False)


def _view(statuses: list[dict]) -> list:
    """The tables and their notes, as one status prints them."""
    return [_hosts_table(statuses), *map(Text, _host_notes(statuses)), _ranks_table(statuses),
            *map(Text, _rank_notes(statuses) + _stack_notes(statuses) + _clock_notes(statuses))]


@common.takes_globals("inventory", "limit", "config_file", "json_out", "verbose")
def status(
    ctx: typer.Context,
    watch: Annotated[bool, typer.Option(
        "--watch", "-w", help="Read the hosts again every --interval seconds until Ctrl-C (which exits 0): redrawn "
        "tables on a terminal, one plain line per host per interval in a log, one JSON document per line with "
        "--json. Follows a shadow or promote run from anywhere.")] = False,
    interval: Annotated[float, typer.Option("--interval", min=0.5, help="Seconds between reads with --watch.")] = 5.0,
    *,
    global_options: common.Globals,
) -> None:
    """Show what every host and every rank is doing now.

    Per host: phase, requested mode, release, lease remaining, lock (owner, pid and machine), last journal
    entry, latest verdict (passed, failed or aborted). Per rank (from heartbeats): active mode (or stopped),
    generation seen, release, heartbeat age, recent divergence. Lines under the tables say why a phase is
    unknown, why a passed verdict no longer promotes, that a lock's holder died, why a rank runs another mode
    than the one asked, and what the live ranks serve with (SGLang, torch, plugin digest, GPU). Sandbox hosts are
    labelled SANDBOX (JSON: "sandbox": true).
    Read-only. Exits 4 if a host cannot be reached (the others are still shown); --watch shows it and goes on.
    """
    c = common.context(global_options)
    if watch:
        _watch(c, interval)
        return
    statuses = [host_status(host, c.settings) for host in c.hosts]
    if c.options.json:
        common.print_json({"hosts": statuses})
    else:
        for part in _view(statuses):
            common.console.print(part, highlight=False, soft_wrap=True)
    unreachable = [s for s in statuses if not s["reachable"]]
    if unreachable:
        raise HostError("; ".join(s["error"].splitlines()[0] for s in unreachable))


def register(app: typer.Typer) -> None:
    app.command()(status)
