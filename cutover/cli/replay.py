"""`cutover replay CAPTURE`: rerun a captured verify call through both kernels and the float64 reference."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from cutover import replay as replay_lib
from cutover.cli import common


@common.takes_globals("json_out")
def replay(
    ctx: typer.Context,
    capture: Annotated[str, typer.Argument(help="A capture file from <state_dir>/captures/ (rank-R-layer-L-*.pt).")],
    device: Annotated[str, typer.Option(
        "--device", envvar="CUTOVER_REPLAY_DEVICE",
        help="cpu (torch references, labelled) or cuda (SGLang's Triton kernel and the CUDA kernel).")] = "cpu",
    allow_release_mismatch: Annotated[bool, typer.Option(
        "--allow-release-mismatch",
        help="With --device cuda: rerun even when the kernel library loaded here (CUTOVER_KERNEL_LIB, else "
             "$CUTOVER_ROOT/current, else kernel_ext/build/) is not the capture's release; the result then "
             "carries a WARNING naming both.")] = False,
    *,
    global_options: common.Globals,
) -> None:
    """Rerun one captured shadow call offline: the outputs recorded live and fresh runs of the stock and the
    custom kernel, each compared with a float64 reference of the same inputs (relative L2, max abs, non-finite).
    The reruns use the kernel library and SGLang installed here; the output names both, and a library that is
    not the capture's release is refused unless --allow-release-mismatch."""
    result = replay_lib.replay_capture(capture, device, allow_release_mismatch=allow_release_mismatch)
    as_json = global_options.json
    if as_json:
        common.print_json(result.to_dict())
    else:
        _print_tables(result)
    for warning in result.warnings:  # last; on stderr beside --json, so stdout stays one JSON document
        (common.err_console if as_json else common.console).print(
            f"WARNING: {warning}", style="bold yellow", markup=False, highlight=False, soft_wrap=True)


def _print_tables(result) -> None:
    captured = result.release_id or "not recorded"
    table = Table("kernel", "source", "implementation", "rel L2 vs float64", "max abs vs float64", "non-finite",
                  title=f"replay of rank {result.rank} layer {result.layer} (captured under release {captured}, "
                        f"live custom path: {result.kernel_live})")
    for row in result.rows:
        table.add_row(row.kernel, row.source, row.implementation, f"{row.rel_l2:.3e}", f"{row.max_abs:.3e}",
                      str(row.nonfinite))
    common.console.print(table)
    common.console.print(f"custom vs stock as recorded live: relative L2 {result.custom_vs_stock_live:.3e}")
    custom = (f"kernel library {result.kernel_library} ({result.kernel_library_identity})" if result.kernel_library
              else "split-K torch reference (no kernel library)")
    stock = (f"SGLang {result.sglang_version}" if result.sglang_version
             else "torch reference of SGLang's kernel (no SGLang)")
    common.console.print(f"custom rerun: {custom}\nstock rerun: {stock}", markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command()(replay)
