"""`cutover replay CAPTURE`: rerun a captured verify call through both kernels and the float64 reference."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from cutover import replay as replay_lib
from cutover.cli import common


def replay(
    ctx: typer.Context,
    capture: Annotated[str, typer.Argument(help="A capture file from <state_dir>/captures/ (rank-R-layer-L-*.pt).")],
    device: Annotated[str, typer.Option(
        "--device", envvar="CUTOVER_REPLAY_DEVICE",
        help="cpu (torch references, labelled) or cuda (SGLang's Triton kernel and the CUDA kernel).")] = "cpu",
    json_out: common.JsonOpt = False,
) -> None:
    """Rerun one captured shadow call offline: the outputs recorded live and fresh runs of the stock and the
    custom kernel, each compared with a float64 reference of the same inputs (relative L2, max abs, non-finite)."""
    result = replay_lib.replay_capture(capture, device)
    if common.merged(ctx, json_out=json_out).json:
        common.print_json(result.to_dict())
        return
    table = Table("kernel", "source", "implementation", "rel L2 vs float64", "max abs vs float64", "non-finite",
                  title=f"replay of rank {result.rank} layer {result.layer} (release {result.release_id}, "
                        f"live custom path: {result.kernel_live})")
    for row in result.rows:
        table.add_row(row.kernel, row.source, row.implementation, f"{row.rel_l2:.3e}", f"{row.max_abs:.3e}",
                      str(row.nonfinite))
    common.console.print(table)
    common.console.print(f"custom vs stock as recorded live: relative L2 {result.custom_vs_stock_live:.3e}")


def register(app: typer.Typer) -> None:
    app.command()(replay)
