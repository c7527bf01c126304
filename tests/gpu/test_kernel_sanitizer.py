"""compute-sanitizer over the kernel's tiny parity subset, in the configuration the device picks and in the small
mma.sync tiles that sm_120 runs.

synccheck fails on a barrier misuse it can see: an aligned `__syncthreads` that warps reach from different
branches (as configuration 2's roles and the wgmma kernel's parts would, without `sync_block`). memcheck
fails on any out-of-bounds or misaligned access. racecheck is not run here: it mis-runs barriers that threads
reach along different paths, which configuration 2's roles and the wgmma kernel's parts have (docs/kernel.md).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_ext.testing import TILE_CONFIGS

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]


def _sanitizer() -> str:
    for candidate in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer"):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.skip("needs compute-sanitizer (CUDA toolkit): put the toolkit's bin/ on PATH")


@pytest.mark.parametrize("tool", ["synccheck", "memcheck"])
@pytest.mark.parametrize("tiles", sorted(TILE_CONFIGS))
def test_tiny_parity_is_clean_under_compute_sanitizer(tool, tiles):
    env = dict(os.environ, CUTOVER_KERNEL_TILES=str(TILE_CONFIGS[tiles]),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [_sanitizer(), "--tool", tool, "--error-exitcode", "9",
         sys.executable, "-m", "kernel_ext.gpu_parity", "--subset", "tiny", "--no-triton"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    output = proc.stdout.splitlines()
    reports = [line for line in output if line.startswith("=========")]
    detail = "\n".join(reports[:12] + reports[-2:] + output[-3:])
    assert proc.returncode == 0, f"{tool} in {tiles}: exit {proc.returncode}\n{detail}"
    assert reports and reports[-1].rstrip().endswith(" 0 errors"), f"{tool} in {tiles}: no clean summary\n{detail}"
