"""`cutover status`: phase, modes, ranks, release, lease, lock, journal, verdict and divergence per host."""

from __future__ import annotations

import json
import time

import typer
from rich.table import Table

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


def _verdict(verdict) -> str:
    """The run's outcome (passed, failed, aborted), its run id and release."""
    if not verdict:
        return "-"
    return " ".join(str(verdict[k]) for k in ("outcome", "run_id", "release_id") if verdict.get(k))


def _hosts_table(statuses: list[dict]) -> Table:
    table = Table("host", "phase", "requested", "ranks active", "current release", "lease", "lock",
                  "last journal", "verdict", title="cutover status")
    for s in statuses:
        if not s["reachable"]:
            table.add_row(s["host"], "[red]unreachable[/red]", "-", s["error"].splitlines()[0], "", "", "", "", "")
            continue
        modes = sorted({r["mode_active"] for r in s["ranks"] if r["live"]})
        live = sum(r["live"] for r in s["ranks"])
        active = f"{live}/{len(s['ranks'])} {', '.join(modes)}" if live else "no serving process"
        requested = (f"{s['requested_mode']} (gen {s['generation']})" if s["requested_mode"]
                     else s["control_error"] or "no control file")
        if s["effective_mode"] and s["effective_mode"] != s["requested_mode"]:
            requested += f" -> {s['effective_mode']} (lease expired)"
        table.add_row(s["host"], s["phase"]["phase"], requested, active, s["current_release"] or "-", _lease(s),
                      s["lock"]["description"] if s["lock"] else "free", _journal(s["last_journal"]),
                      _verdict(s["verdict"]))
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


def _phase_notes(statuses: list[dict]) -> list[str]:
    """Why a host's phase shows as unknown (its phase.json could not be read)."""
    return [s["phase_error"] for s in statuses if s.get("phase_error")]


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


def _print_notes(notes: list[str]) -> None:
    for note in notes:
        common.console.print(note, markup=False, highlight=False, soft_wrap=True)  # one line each, for grep


def status(
    ctx: typer.Context,
    inventory: common.InventoryOpt = None,
    limit: common.LimitOpt = None,
    config_file: common.ConfigOpt = None,
    json_out: common.JsonOpt = False,
    verbose: common.VerboseOpt = False,
) -> None:
    """Show what every host and every rank is doing now.

    Per host: phase, requested mode, release, lease remaining, lock (owner, pid and machine), last journal
    entry, latest verdict (passed, failed or aborted). Per rank (from heartbeats): active mode (or stopped),
    generation seen, release, heartbeat age, recent divergence. Lines under the tables say why a phase is
    unknown, why a rank runs another mode than the one asked, and what the live ranks serve with (SGLang,
    torch, plugin digest, GPU).
    Read-only. Exits 4 if a host cannot be reached (the others are still shown).
    """
    c = common.context(ctx, inventory, limit, config_file, json_out, verbose)
    statuses = [host_status(host, c.settings) for host in c.hosts]
    if c.options.json:
        common.print_json({"hosts": statuses})
    else:
        common.console.print(_hosts_table(statuses))
        _print_notes(_phase_notes(statuses))
        common.console.print(_ranks_table(statuses))
        _print_notes(_rank_notes(statuses) + _stack_notes(statuses) + _clock_notes(statuses))
    unreachable = [s for s in statuses if not s["reachable"]]
    if unreachable:
        raise HostError("; ".join(s["error"].splitlines()[0] for s in unreachable))


def register(app: typer.Typer) -> None:
    app.command()(status)
