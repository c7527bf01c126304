"""CPU checks of the benchmark's shapes: the L2 rotation and the mixed grid's even twins."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from kernel_ext import bench  # noqa: E402


def test_every_rotation_touches_512_mb_and_4x_the_l2_so_no_call_finds_its_rows_in_l2():
    row_bytes, mb = 576 * 2, 1 << 20
    smallest = 1 * 1024 * row_bytes  # batch 1, prefix 1024: 1.2 MB of rows
    assert bench.rotation_sets(smallest, 50 * mb) == 456  # H200: 512 MB
    assert bench.rotation_sets(smallest, 128 * mb) == 456  # RTX PRO 6000 Blackwell: 4 x 128 MB = 512 MB
    assert bench.rotation_sets(smallest, 256 * mb) == 911  # a larger L2 sets the target
    assert bench.rotation_sets(64 * 65536 * row_bytes, 50 * mb) == 1  # one call already streams 4.8 GB
    for kv_bytes in (smallest, 4 * 4096 * row_bytes, 16 * 16384 * row_bytes):
        sets = bench.rotation_sets(kv_bytes, 128 * mb)
        assert sets * kv_bytes >= 512 * mb and (sets - 1) * kv_bytes < 512 * mb


def test_mixed_grid_pairs_each_mix_with_an_even_twin_of_the_same_keys():
    shapes = bench.grid_shapes(bench.GRIDS["mixed"])
    mixes = {(s[0], s[1], s[3][4:]): s for s in shapes if s[3].startswith("mix:")}
    twins = {(s[0], s[1], s[3][5:]): s for s in shapes if s[3].startswith("even:")}
    assert mixes and mixes.keys() == twins.keys()
    for key, mix in mixes.items():
        twin = twins[key]
        assert mix[2] == twin[2] == len(mix[5]) == len(twin[5])
        assert len(set(twin[5])) == 1 and len(set(mix[5])) > 1
        assert abs(sum(mix[5]) - sum(twin[5])) <= mix[2] // 2


def test_mix_cost_is_the_mix_time_over_its_twin():
    rows = [dict(H=8, T=8, mask="tree", prefix="mix:a", ours_us=30.0),
            dict(H=8, T=8, mask="tree", prefix="even:a", ours_us=20.0),
            dict(H=16, T=16, mask="tree", prefix="mix:a", ours_us=9.0),
            dict(H=8, T=8, mask="tree", prefix=4096, ours_us=5.0)]
    bench.add_mix_costs(rows)
    assert rows[0]["mix_cost"] == 1.5
    assert "mix_cost" not in rows[2]  # its twin did not run
    assert "mix_cost" not in rows[1] and "mix_cost" not in rows[3]
