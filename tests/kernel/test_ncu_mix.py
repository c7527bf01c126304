"""CPU check of kernel_ext/device/ncu_mix.py's reading of ncu's CSV (the layout of
results/ab_v76_h200/call1/ncu_*.csv)."""
from __future__ import annotations

import pytest

from .conftest import load_device_tool

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


@pytest.fixture(scope="module")
def ncu_mix():
    return load_device_tool("ncu_mix")


def _row(i: int, kernel: str, unit: str, value: str) -> str:
    return (f'"{i}","1586","python3.12","127.0.0.1","{kernel}","1","7","(256, 1, 1)","(1, 196, 1)","0","9.0",'
            f'"Command line profiler metrics","gpu__time_duration.sum","{unit}","{value}"')


def test_the_last_call_of_each_kernel_in_microseconds(ncu_mix, tmp_path):
    csv = tmp_path / "ncu.csv"
    csv.write_text("\n".join([
        "==PROF== Connected to process 1586 (/usr/bin/python3.12)",
        HEADER,
        _row(0, "void verify_wgmma_kernel<long long, 1, 0>(KernelArgs)", "ns", "68,192"),
        _row(1, "void verify_combine_kernel<CombineLayout<1, 2, 2, 2>, 1>(KernelArgs, int)", "ns", "9,536"),
        _row(2, "void verify_main_kernel<TileConfig<32, 16, 3, 2, 2, 1, 2, 2>, int, 0>(KernelArgs)", "us", "1,067.52"),
        _row(3, "void verify_combine_kernel<CombineLayout<1, 2, 2, 2>, 1>(KernelArgs, int)", "nsecond", "9,250"),
        "==PROF== Disconnected from process 1586",
    ]))
    assert ncu_mix.kernel_durations(csv) == pytest.approx({"main": 1067.52, "combine": 9.25})


def test_a_run_that_profiled_nothing_has_no_durations(ncu_mix, tmp_path):
    csv = tmp_path / "ncu.csv"
    csv.write_text("==PROF== Connected to process 7\n==ERROR== the profiled process failed\n")
    assert ncu_mix.kernel_durations(csv) == {}
