"""`cutover shadow`: run Triton and the custom kernel side by side under a lease, with live gates."""

from __future__ import annotations

import math
from typing import Annotated, Optional

import typer
from rich.console import Group
from rich.table import Table

from checks.policy import Policy, load_policy, refuse_out_of_scope
from cutover.cli import common
from cutover.config import Host
from cutover.errors import ConfigError
from cutover.hostprotocol.hostlayout import MAX_LEASE_AHEAD_S
from cutover.workflow.load import load_spec
from cutover.workflow.runstore import REPORTS_DIR_ENV
from cutover.workflow.shadow import DEFAULT_LEASE_TTL_S, Progress, ShadowOptions, ShadowOutcome, run_shadow

PLAIN_PROGRESS_EVERY_S = 10.0

PolicyOpt = Annotated[
    Optional[str],
    typer.Option(
        "--policy",
        envvar="CUTOVER_POLICY",
        show_default=False,
        help="Gate policy: a YAML file, or a packaged policy's name (default, sandbox); the fields it sets "
        "override the packaged default policy.",
    ),
]
ReportsOpt = Annotated[
    Optional[str],
    typer.Option(
        "--reports-dir",
        envvar=REPORTS_DIR_ENV,
        show_default=False,
        help="Where runs and reports are kept locally (default: ./reports).",
    ),
]


def finite(value: float | None) -> float | None:
    """Option callback: refuse nan and infinities (a range check lets nan through)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


LeaseOpt = Annotated[
    float,
    typer.Option(
        "--lease-ttl",
        envvar="CUTOVER_LEASE_TTL_S",
        min=2.0,
        max=MAX_LEASE_AHEAD_S,
        callback=finite,
        help="Seconds the armed mode outlives this command if it stops renewing (killed, network lost); at most "
             f"{MAX_LEASE_AHEAD_S:.0f} (the plugin clamps any longer lease).",
    ),
]


def refuse_policy_out_of_scope(ctx: typer.Context, policy: Policy, hosts: list[Host]) -> None:
    """Refuse a sandbox-only policy, or one looser than the default that declares no scope, for targets that are
    not sandbox hosts, before any host is touched."""
    # By name: newer typer vendors its own click, whose ParameterSource is not click's.
    from_environment = ctx.get_parameter_source("policy").name == "ENVIRONMENT"
    refuse_out_of_scope(policy, {host.name: host.serving_kind for host in hosts}, from_environment=from_environment)


def _duration_s(hours: float | None, minutes: float | None) -> float:
    if (hours is None) == (minutes is None):
        raise ConfigError("give exactly one of --hours or --minutes", hint="e.g. `cutover shadow --hours 2`")
    value = hours * 3600 if hours is not None else minutes * 60
    if value <= 0:
        raise ConfigError(f"the shadow duration must be positive, got {value:g} s", hint="e.g. --minutes 2")
    return value


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600:d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _headline(p: Progress) -> str:
    t = p.totals
    worst = "-" if t["worst_rel_l2"] is None else f"{t['worst_rel_l2']:.3g} (layer {t['worst_layer']})"
    return (
        f"shadow {p.run_id}: {_clock(p.elapsed_s)} elapsed, {_clock(p.duration_s - p.elapsed_s)} left | "
        f"compared {t['compared']} | worst rel-L2 {worst} | non-finite custom/Triton "
        f"{t['nonfinite_custom']}/{t['nonfinite_stock']} | truth samples {t['truth_samples']}"
    )


def _observed(value) -> str:
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.3g}"


def _gates_line(p: Progress) -> str:
    """Each gate's observed value against its threshold; each host's slowest rank and layer against the compared
    calls it must reach; each host's lease."""
    gates = " | ".join(f"{name} {_observed(seen)} (gate {limit:g})" for name, seen, limit in p.gauges)
    compared = ", ".join(f"{host} {count}/{share} ({min(100, 100 * count // share)}%)"
                         for host, (count, share) in p.compared.items())
    leases = ", ".join(f"{host} {left:.0f} s" for host, left in p.leases_left_s.items())
    return (f"gates: {gates} | compared per rank, slowest layer, against the minimum: {compared} | "
            f"lease left: {leases}")


def _plain(p: Progress) -> str:
    """The progress on one line, for logs."""
    return f"{_headline(p)} | {_gates_line(p)}"


def _render(p: Progress) -> Group:
    table = Table("host", "rank", "mode", "heartbeat age", "restarts", "note")
    for rank in p.ranks:
        age = "none" if rank.heartbeat_age_s is None else f"{rank.heartbeat_age_s:.1f} s"
        table.add_row(
            rank.host,
            str(rank.rank),
            rank.mode_active or "-",
            age,
            str(rank.restarts),
            p.host_errors.get(rank.host) or rank.reason,
        )
    parts = [_headline(p), _gates_line(p), table]
    if p.load:
        parts.append(
            "load: "
            + "; ".join(
                f"{h}: sent {c['sent']} ok {c['ok']} failed {c['failed']} skipped " f"{c['skipped']}"
                for h, c in p.load.items()
            )
        )
    return Group(*parts)


def passed_lines(outcome: ShadowOutcome, again: str) -> list[str]:
    """What a passed run prints: the verdict, its reasons, a WARNING block for hosts that cannot be promoted from
    it (returned to Triton only through the rollback path, or whose phase someone else moved before the end:
    promote refuses them), and the report path last. `again` is the `cutover shadow` command line to repeat,
    without --limit."""
    record = outcome.record
    lines = [f"shadow run {record.run_id} PASSED for release {record.release_id} on {', '.join(record.hosts)}"]
    lines += [f"  {reason}" for reason in record.reasons if reason not in outcome.warnings]
    if outcome.unpromotable:
        names = outcome.unpromotable
        others = [name for name in record.hosts if name not in names]
        why = ["returned to Triton only through the rollback path (phase rolled_back)"] if outcome.rolled_back else []
        why += ["their phase was moved before the run ended"] if outcome.moved else []
        lines.append(
            f"WARNING: the gates passed, but {', '.join(names)} cannot be promoted from this run: {'; '.join(why)}"
        )
        lines += [f"  {warning}" for warning in outcome.warnings]
        lines.append(f"  run: {again} --limit {','.join(names)}")
        if others:
            lines.append(f"  or promote the hosts that passed alone: cutover promote --limit {','.join(others)}")
    lines.append(f"report: {outcome.report.markdown}")
    return lines


def _again(hours: float | None, minutes: float | None, policy: str | None, inventory: str | None) -> str:
    """This run's `cutover shadow` command line (duration, policy, inventory), for the advice."""
    words = ["cutover shadow", f"--hours {hours:g}" if hours is not None else f"--minutes {minutes:g}"]
    words += [f"--policy {policy}"] if policy else []
    words += [f"-i {inventory}"] if inventory else []
    return " ".join(words)


@common.takes_globals("inventory", "limit", "config_file", "json_out", "verbose")
def shadow(
    ctx: typer.Context,
    hours: Annotated[Optional[float], typer.Option("--hours", callback=finite,
                                                   help="Shadow for this many hours.")] = None,
    minutes: Annotated[Optional[float], typer.Option("--minutes", callback=finite,
                                                     help="Shadow for this many minutes.")] = None,
    sample_rate: Annotated[int, typer.Option("--sample-rate", min=1, help="Compare every Nth verify call.")] = 1,
    policy: PolicyOpt = None,
    load: Annotated[
        Optional[str],
        typer.Option("--load", help="Drive prompts from this YAML file at the servers' /generate during the run."),
    ] = None,
    lease_ttl: LeaseOpt = DEFAULT_LEASE_TTL_S,
    reports_dir: ReportsOpt = None,
    *,
    global_options: common.Globals,
) -> None:
    """Shadow the staged release: every verify step runs Triton AND the custom kernel, divergence is gated
    live. A breach rolls every target back to Triton at once and exits non-zero; Ctrl-C returns them to
    Triton cleanly. The verdict is stored on the hosts and locally, and the report path is printed."""
    options = ShadowOptions(
        duration_s=_duration_s(hours, minutes),
        policy=load_policy(policy),
        sample_rate=sample_rate,
        lease_ttl_s=lease_ttl,
        load=load_spec(load) if load else None,
        reports_dir=reports_dir,
    )
    c = common.context(global_options)
    refuse_policy_out_of_scope(ctx, options.policy, c.hosts)
    c.say(
        f"shadowing {', '.join(h.name for h in c.hosts)} for {_clock(options.duration_s)} under policy "
        f"{options.policy.source} (lease {lease_ttl:g} s)"
    )
    with common.live_view(c, PLAIN_PROGRESS_EVERY_S) as show:
        outcome = run_shadow(c.inventory, c.hosts, c.settings, options,
                             on_progress=lambda p: show(_render(p), _plain(p)))
    record = outcome.record
    if c.options.json:
        common.print_json(
            {
                "run_id": record.run_id,
                "outcome": record.outcome,
                "reasons": record.reasons,
                "release_id": record.release_id,
                "report": str(outcome.report.markdown),
                "rolled_back_hosts": outcome.rolled_back,  # host -> why its ordinary return to Triton failed
                "moved_hosts": outcome.moved,  # host -> the phase someone else gave it before the run ended
                "warnings": outcome.warnings,
            }
        )
        return
    for line in passed_lines(outcome, _again(hours, minutes, policy, c.options.inventory)):
        c.say(line)


def register(app: typer.Typer) -> None:
    app.command()(shadow)
