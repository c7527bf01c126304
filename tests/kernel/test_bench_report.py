"""The benchmark report (kernel_ext.bench_report) on small synthetic runs: what benchmarks/<gpu>/ is made of."""
from __future__ import annotations

import json
import statistics

import pytest

from kernel_ext import bench_report


def _row(H, T, batch, prefix, ours, triton, floor, mask="tree", shared=None, **extra):
    row = dict(H=H, T=T, batch=batch, prefix=prefix, mask=mask, ours_us=ours, triton_us=triton, shared_us=shared,
               floor_mem_us=floor, floor_flop_us=floor / 2, bound="memory", roofline_fraction=floor / ours,
               speedup_vs_triton=triton / ours, **extra)
    if shared:
        row["speedup_vs_shared"] = shared / ours
    return row


def _run(rows, **fields):
    return dict(label="release", gpu="NVIDIA H200", torch="2.13.0", triton="3.6.0", copy_gbs=4240.3,
                matmul_tflops=799.7, early_start=True, rows=rows, **fields)


FULL = [_row(8, 8, 1, 1024, 12.0, 180.0, 0.3),
        _row(8, 8, 4, 16384, 31.0, 2600.0, 18.0, mask="chain", shared=70.0),
        _row(16, 64, 64, 65536, 17000.0, 170000.0, 12000.0),
        _row(16, 16, 16, 4096, 80.0, 1300.0, 48.0)]
MIXED = [_row(8, 8, 64, "mix:1x65536+63x1024", 70.0, 10000.0, 36.0, keys=130048, longest_prefix=65536,
              mix_cost=1.4),
         _row(8, 8, 64, "even:1x65536+63x1024", 50.0, 1400.0, 36.0, keys=130048, longest_prefix=2032)]


@pytest.fixture
def runs(tmp_path):
    full, mixed = tmp_path / "full.json", tmp_path / "mixed.json"
    full.write_text(json.dumps(_run(FULL, grid="full", sglang="0.5.23")))
    mixed.write_text(json.dumps(_run(MIXED)))  # a run that recorded neither its grid nor the SGLang version
    return full, mixed


def test_report_folder_holds_json_table_and_plot_from_the_runs(runs, tmp_path):
    out = tmp_path / "benchmarks" / "h200"
    assert bench_report.main([*map(str, runs), "--out", str(out), "--set", "sglang=0.5.9", "--set",
                              "driver=580.159.04"]) == 0
    document = json.loads((out / "bench.json").read_text())
    full, mixed = document["runs"]
    assert document["gpu"] == "NVIDIA H200"
    assert (full["grid"], mixed["grid"]) == ("full", "mixed")
    assert [r["roofline_fraction"] for r in full["rows"]] == [r["roofline_fraction"] for r in FULL]
    assert full["summary"]["median_speedup"] == statistics.median(r["speedup_vs_triton"] for r in FULL)
    assert full["summary"]["median_speedup_by_batch"]["64"] == round(170000.0 / 17000.0, 3)
    assert full["summary"]["median_roof_memory"] == round(statistics.median([0.3 / 12.0, 18.0 / 31.0]), 3)
    assert (full["copy_gbs"], full["matmul_tflops"]) == (4240.3, 799.7)
    assert full["sglang"] == "0.5.23" and mixed["sglang"] == "0.5.9"  # --set fills, never overwrites
    assert full["driver"] == mixed["driver"] == "580.159.04"
    table = (out / "bench.md").read_text()
    assert "| 16 | 64 | 64 | 65536 | tree | 17000.0 | 170000.0 | - | 10.0 | 12000.0 | memory | 71 |" in table
    assert f"| x SGLang `extend_attention_fwd` | {full['summary']['median_speedup']:.1f}x |" in table
    assert "| 8 | 8 | 64 | 1x65536+63x1024 | 130048 | 65536 | 70.0 | 1.40 |" in table
    assert "sglang 0.5.23" in table and "device copy 4240 GB/s" in table
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_report_regenerates_itself(runs, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    assert bench_report.main([*map(str, runs), "--out", str(first)]) == 0
    assert bench_report.main([str(first / "bench.json"), "--out", str(second)]) == 0
    assert (second / "bench.json").read_text() == (first / "bench.json").read_text()
    assert (second / "bench.md").read_text() == (first / "bench.md").read_text()


def test_a_file_that_is_not_a_run_is_refused_and_nothing_is_written(runs, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"label": "x", "rows": [{"H": 8}]}))
    out = tmp_path / "out"
    assert bench_report.main([str(runs[0]), str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "not a benchmark run" in err and "python -m kernel_ext.bench" in err
    assert not out.exists()


def test_runs_of_two_gpus_are_refused(runs, tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text(json.dumps(dict(_run(FULL), gpu="NVIDIA RTX PRO 6000")))
    assert bench_report.main([str(runs[0]), str(other), "--out", str(tmp_path / "out")]) == 2
    assert "a report holds one GPU's benchmark" in capsys.readouterr().err


def test_bad_set_is_refused(runs, tmp_path, capsys):
    assert bench_report.main([str(runs[0]), "--out", str(tmp_path / "out"), "--set", "sglang"]) == 2
    assert "is not KEY=VALUE" in capsys.readouterr().err


def test_shape_class_follows_h_times_t_not_the_ceilings():
    # The H x T = 128, P 1024 shape sits on the ridge: a run's ceilings may make its memory floor the larger.
    rows = [_row(8, 8, 1, 65536, 33.0, 1.0, 18.0), _row(8, 16, 1, 1024, 14.0, 1.0, 0.7)]
    assert [bench_report.shape_class(r) for r in rows] == ["memory", "compute"]
    summary = bench_report.summarise(rows)
    assert summary["median_roof_memory"] == round(18.0 / 33.0, 3)
    assert summary["median_roof_compute"] == round(0.7 / 14.0, 3)
