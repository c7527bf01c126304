"""Build stats records in the plugin's format (`StatsRecord`) from plain per-call numbers."""

import bisect

from cutover.hostprotocol.hostlayout import REL_L2_BIN_EDGES
from cutover.hostprotocol.statsrecord import StatsRecord


def histogram(values):
    counts = [0] * (len(REL_L2_BIN_EDGES) + 1)
    for value in values:
        counts[bisect.bisect_right(REL_L2_BIN_EDGES, value)] += 1
    return counts


def layer(rel_l2_values, *, max_abs=1e-3, nonfinite_custom=0, nonfinite_stock=0, calls=None):
    return {
        "calls": calls if calls is not None else len(rel_l2_values),
        "compared": len(rel_l2_values),
        "rel_l2_max": max(rel_l2_values, default=0.0),
        "rel_l2_hist": histogram(rel_l2_values),
        "max_abs": max_abs,
        "nonfinite_custom": nonfinite_custom,
        "nonfinite_stock": nonfinite_stock,
    }


def record(layers, *, ts=1000.0, rank=0, generation=3, mode="shadow", truth=()):
    """The StatsRecord of these layers (each a `layer(...)` dict), read the way every reader reads a line."""
    parsed = StatsRecord.parse({
        "ts": ts,
        "rank": rank,
        "generation": generation,
        "mode": mode,
        "release_id": "rel-a",
        "interval_s": 1.0,
        "kernel": "reference (no GPU)",
        "layers": layers,
        "truth": list(truth),
    })
    assert parsed is not None, "not a valid stats record"
    return parsed
