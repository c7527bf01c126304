"""`cutover build`: compile the kernel into a release directory with its manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from cutover import release
from cutover.cli import common


@common.takes_globals("config_file", "json_out")
def build(
    ctx: typer.Context,
    arch: Annotated[Optional[list[str]], typer.Option(
        "--arch", help="Target arch, repeatable (e.g. --arch sm_120) (default: sm_90a and sm_120).")] = None,
    out: Annotated[Optional[Path], typer.Option(
        "--out", envvar=release.RELEASES_DIR_ENV, show_default=False,
        help="Releases directory (default: the config's releases_dir, else dist/releases).")] = None,
    nvcc: Annotated[Optional[str], typer.Option("--nvcc", envvar="CUTOVER_NVCC",
                                                help="nvcc to use (default: nvcc on PATH).")] = None,
    *,
    global_options: common.Globals,
) -> None:
    """Compile the kernel into a release directory with its manifest.

    The release lands in <out>/<release_id>/ with manifest.json (sha256 of every file, archs, nvcc version,
    minimum driver, ABI version, source-tree hash). Same sources, archs and nvcc give the same release id:
    building it again changes nothing. A failed build leaves nothing behind.
    """
    settings = common.config.load_settings(global_options.config)
    out_dir = out or release.releases_dir(settings.releases_dir)
    if not global_options.json:
        common.console.print(f"building the kernel for {', '.join(arch or ['the default archs'])} ...")
    result = release.build_release(out_dir, arch, nvcc, operator=settings.operator)
    rel = result.release
    if global_options.json:
        common.print_json({"release_id": rel.release_id, "path": str(rel.path), "built": result.built,
                           "manifest": rel.manifest})
    elif result.built:
        common.console.print(f"built release {rel.release_id} at {rel.path} "
                             f"(archs {', '.join(rel.manifest['archs'])}, nvcc {rel.manifest['nvcc_version']})")
    else:
        common.console.print(f"release {rel.release_id} is already built at {rel.path} "
                             f"(same sources, archs and nvcc): nothing to do")


def register(app: typer.Typer) -> None:
    app.command()(build)
