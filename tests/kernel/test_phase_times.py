"""CPU check of kernel_ext/device/phase_times.py's reading of the phase marks (csrc/phase_clock.cuh layout)."""
from __future__ import annotations

import pytest

from .conftest import load_device_tool

np = pytest.importorskip("numpy")
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def phase_times():
    return load_device_tool("phase_times")


def _mark(marks, cta, slot, ns, mhz=2000):
    marks[0, cta, slot] = (ns, ns * mhz // 1000)


def test_phases_of_the_critical_cta_and_the_combine(phase_times):
    marks = np.zeros((2, phase_times.CTAS, phase_times.SLOTS, 2), dtype=np.uint64)
    t0 = 10**9
    # CTA 0: no draft tail (mark 4 unset); CTA 1: the tail, ends last; CTA 2 returned early (no mark 6).
    for slot, us in enumerate([0, 3, 4, 6, None, 14, 16]):
        if us is not None:
            _mark(marks, 0, slot, t0 + us * 1000)
    for slot, us in enumerate([1, 4, 6, 7, 15, 17, 20]):
        _mark(marks, 1, slot, t0 + us * 1000)
    _mark(marks, 2, 0, t0 + 500)
    marks[0, 1, 7] = (5, 5 * 200)  # its iteration count, 0.1 us of copy wait per tile at 2000 MHz
    marks[0, 1, 8] = (5 * 400, 5 * 600)  # 0.2 us of P V wait and 0.3 us at the barrier per tile
    marks[0, 0, 7] = (2, 2 * 1000)  # CTA 0: 2 tiles, 0.5 us of copy wait per tile
    marks[1, 0, :3, 0] = (t0 + 2000, t0 + 20500, t0 + 23000)
    row = phase_times.one_call(marks)
    assert row["ctas"] == 2 and row["sm_mhz"] == pytest.approx(2000)
    assert row["crit_entry_us"] == pytest.approx(1.0) and row["crit_iterations"] == 5
    assert row["crit_phase_us"] == pytest.approx(
        {"plan+decode": 3, "row ids": 2, "Q+tile0": 1, "prefix tiles": 8, "tail tile": 2, "epilogue": 3})
    # CTA 0 has no tail phase: its loop ends at mark 5
    assert row["phase_median_us"]["tail tile"] == pytest.approx(1.0)
    assert row["main_end_us"] == pytest.approx(20.0)
    assert row["crit_tile_wait_us"] == pytest.approx({"copy wait": 0.1, "P V wait": 0.2, "barrier": 0.3})
    assert row["tile_wait_median_us"]["copy wait"] == pytest.approx(0.3)
    assert row["combine_wait_done_us"] == pytest.approx(20.5) and row["combine_end_us"] == pytest.approx(23.0)
