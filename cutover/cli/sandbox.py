"""`cutover sandbox up|down|status`: the local stand-in for SGLang, for every `serving_kind: sandbox` host."""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.table import Table

from cutover.cli import common
from cutover.errors import ConfigError
from cutover.sandbox import daemon
from cutover.sandbox.server import ServerConfig

sandbox_app = typer.Typer(help="Run the sandbox: a labelled stand-in for SGLang that loads the real plugin "
                               "runtime and drives synthetic DDTree verify traffic (not a model).",
                          no_args_is_help=True)

DeviceOpt = Annotated[str, typer.Option("--device", envvar="CUTOVER_SANDBOX_DEVICE",
                                        help="cpu (torch reference kernels) or cuda (real kernels, CUDA graphs).")]


def _sandbox_hosts(c: common.Context):
    hosts = [h for h in c.hosts if h.serving_kind == "sandbox" and h.is_local]
    if not hosts:
        raise ConfigError(f"no local host with serving_kind: sandbox among the selected hosts of {c.inventory.path}",
                          hint="use the embedded default (-i inventories/local.yml) or add such a host")
    return hosts


def _config(host, device: str) -> ServerConfig:
    if device not in ("cpu", "cuda"):
        raise typer.BadParameter("must be cpu or cuda", param_hint="--device")
    return ServerConfig(state_dir=os.path.abspath(host.paths.state_dir),
                        cutover_root=os.path.abspath(host.paths.cutover_root),
                        port=host.serving_port, ranks=host.tp_size, device=device,
                        host=host.serving_address)


@sandbox_app.command()
@common.takes_globals("inventory", "limit", "json_out")
def up(
    ctx: typer.Context,
    device: DeviceOpt = "cpu",
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for /health.")] = daemon.START_TIMEOUT_S,
    *,
    global_options: common.Globals,
) -> None:
    """Start the sandbox on every local sandbox host (a healthy one is left alone); returns once /health
    answers."""
    c = common.context(global_options)
    configs = {h.name: _config(h, device) for h in _sandbox_hosts(c)}  # every host's config is checked first
    results = {name: daemon.up(server, timeout) for name, server in configs.items()}
    _print(c, results)


@sandbox_app.command()
@common.takes_globals("inventory", "limit", "json_out")
def down(ctx: typer.Context, global_options: common.Globals) -> None:
    """Stop the sandbox on every local sandbox host (a stopped one is left alone)."""
    c = common.context(global_options)
    _print(c, {h.name: daemon.down(os.path.abspath(h.paths.state_dir)) for h in _sandbox_hosts(c)})


@sandbox_app.command()
@common.takes_globals("inventory", "limit", "json_out")
def status(ctx: typer.Context, global_options: common.Globals) -> None:
    """Show whether each local sandbox runs, its health, and every rank's mode and kernel."""
    c = common.context(global_options)
    states = {h.name: daemon.status(os.path.abspath(h.paths.state_dir)) for h in _sandbox_hosts(c)}
    if c.options.json:
        common.print_json(states)
        return
    table = Table("host", "running", "health", "rank", "mode", "generation", "kernel", "reason",
                  title="sandbox (a stand-in for SGLang, not a model)")
    for name, state in states.items():
        ranks = state["ranks"] or {"-": None}
        for rank, beat in ranks.items():
            table.add_row(name, str(state["running"]), state["health"], rank,
                          *(str(beat[k]) for k in ("mode_active", "generation_seen", "kernel", "reason"))
                          if beat else ("-", "-", "-", "-"))
    common.console.print(table)


def _print(c: common.Context, results: dict) -> None:
    if c.options.json:
        common.print_json(results)
    else:
        for name, message in results.items():
            c.say(f"{name}: {message}")


def register(app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")
