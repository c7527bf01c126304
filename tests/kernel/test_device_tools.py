"""The GPU machine's tools compile from the tree: docs/perf.md's data-movement floor is reproduced by
kernel_ext/device/stream_floor.cu with the command its header and docs/perf.md give."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STREAM_FLOOR = ROOT / "kernel_ext" / "device" / "stream_floor.cu"


def _documented_command() -> list[str]:
    """The nvcc line of stream_floor.cu's header, which docs/perf.md repeats."""
    line = next(re.sub(r"^//\s*", "", text) for text in STREAM_FLOOR.read_text().splitlines() if "nvcc -O3" in text)
    perf = (ROOT / "docs" / "perf.md").read_text()
    assert line in perf.replace(" -o /tmp/stream_floor", ""), "docs/perf.md does not give stream_floor.cu's command"
    return line.split()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit) on PATH to compile")
def test_stream_floor_compiles_with_its_documented_command(tmp_path):
    result = subprocess.run([*_documented_command(), "-o", str(tmp_path / "stream_floor")], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "stream_floor").stat().st_size > 0
