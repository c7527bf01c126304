"""The plugin's Prometheus series: node_exporter textfile, prometheus_client multiprocess directory, and a serving
environment without prometheus_client."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from cutover.hostprotocol.hostlayout import REL_L2_BIN_EDGES
from cutover.plugin import metrics
from cutover.plugin.devicestate import CALLS, COMPARED, COUNTER_WIDTH, HIST, SAMPLE_BAD_O, SAMPLE_BAD_SCRATCH


def samples(text: str) -> dict[tuple, float]:
    """(sample name, sorted labels) -> value of a Prometheus text exposition."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: dict, name: str, **labels) -> float:
    return found[(name, tuple(sorted({k: str(v) for k, v in labels.items()}.items())))]


def shadow_delta(layers: int = 3) -> torch.Tensor:
    """Counters of one drain: layer 1 made 10 calls, 8 compared (5 in bin 2, 3 in the overflow bin), one with a
    non-finite custom output and two with a non-finite stock one; layer 2 made 4 calls, none compared."""
    delta = torch.zeros(layers, COUNTER_WIDTH, dtype=torch.float64)
    delta[1, CALLS], delta[1, COMPARED] = 10, 8
    delta[1, HIST + 2], delta[1, HIST + len(REL_L2_BIN_EDGES)] = 5, 3
    delta[1, SAMPLE_BAD_SCRATCH], delta[1, SAMPLE_BAD_O] = 1, 2
    delta[2, CALLS] = 4
    return delta


def test_textfile_carries_every_series_named_the_prometheus_way(tmp_path):
    exporter = metrics.RankMetrics("gpu7", 3, str(tmp_path / "textfile"))
    exporter.update("shadow", 4, lease_expires_at=1000.0, lease_expiries=0, delta=shadow_delta())
    exporter.update("shadow", 4, lease_expires_at=1000.0, lease_expiries=0, delta=shadow_delta())
    exporter.update("triton", 4, lease_expires_at=1000.0, lease_expiries=1, delta=None)
    path = tmp_path / "textfile" / "cutover_rank3.prom"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # atomic: no temporary file left beside it
    found = samples(path.read_text())
    rank = {"host": "gpu7", "rank": 3}
    assert [value(found, "cutover_plugin_mode", **rank, mode=m) for m in ("triton", "shadow", "custom")] == [1, 0, 0]
    assert value(found, "cutover_plugin_generation", **rank) == 4
    assert value(found, "cutover_plugin_lease_age_seconds", **rank) >= 0
    assert value(found, "cutover_plugin_mode_switches_total", **rank) == 1
    assert value(found, "cutover_plugin_lease_expiries_total", **rank) == 1
    layer1, layer2 = {**rank, "layer": 1}, {**rank, "layer": 2}
    assert value(found, "cutover_plugin_verify_calls_total", **layer1) == 20
    assert value(found, "cutover_plugin_verify_calls_total", **layer2) == 8
    assert value(found, "cutover_plugin_compared_calls_total", **layer1) == 16
    assert ("cutover_plugin_compared_calls_total", tuple(sorted({k: str(v) for k, v in layer2.items()}.items()))) \
        not in found
    assert value(found, "cutover_plugin_nonfinite_outputs_total", **layer1, kernel="custom") == 2
    assert value(found, "cutover_plugin_nonfinite_outputs_total", **layer1, kernel="stock") == 4
    # cumulative buckets: bin 2 holds [edge 1, edge 2), so it is counted from le=edge 2 on; the overflow at +Inf
    edges = [float(e) for e in REL_L2_BIN_EDGES]
    bucket = "cutover_plugin_divergence_rel_l2_ratio_bucket"
    assert value(found, bucket, **layer1, le=floatToGoString(edges[1])) == 0
    assert value(found, bucket, **layer1, le=floatToGoString(edges[2])) == 10
    assert value(found, bucket, **layer1, le=floatToGoString(edges[-1])) == 10
    assert value(found, bucket, **layer1, le="+Inf") == 16
    assert value(found, "cutover_plugin_divergence_rel_l2_ratio_count", **layer1) == 16
    # the device keeps bin counts: the sum counts each comparison at its bin's lower edge
    assert value(found, "cutover_plugin_divergence_rel_l2_ratio_sum", **layer1) == pytest.approx(
        2 * (5 * edges[1] + 3 * edges[-1]))


def test_multiprocess_directory_is_read_like_sglangs_metrics(tmp_path):
    """Two rank processes write into one PROMETHEUS_MULTIPROC_DIR; a collector over it (what SGLang's /metrics
    runs) sees both ranks' series."""
    directory = tmp_path / "prometheus"
    directory.mkdir()
    for rank in (0, 1):
        script = textwrap.dedent(f"""
            import torch
            from cutover.plugin import metrics
            from tests.plugin.test_metrics import shadow_delta
            exporter = metrics.rank_metrics({str(tmp_path / "state")!r}, "gpu7", {rank})
            assert exporter.textfile is None
            exporter.update("custom", 9, lease_expires_at=None, lease_expiries=0, delta=shadow_delta())
        """)
        done = subprocess.run([sys.executable, "-c", script], env={**os.environ, metrics.MULTIPROC_ENV: str(directory)},
                              capture_output=True, text=True, timeout=120, cwd=os.getcwd())
        assert done.returncode == 0, done.stderr
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    found = samples(generate_latest(registry).decode())
    for rank in (0, 1):
        assert value(found, "cutover_plugin_mode", host="gpu7", rank=rank, mode="custom") == 1
        assert value(found, "cutover_plugin_generation", host="gpu7", rank=rank) == 9
        assert value(found, "cutover_plugin_verify_calls_total", host="gpu7", rank=rank, layer=1) == 10
    assert not (tmp_path / "state" / "metrics").exists()  # no textfile in multiprocess mode


def test_without_prometheus_client_the_rank_logs_once_and_serves_on(tmp_path):
    script = textwrap.dedent(f"""
        import logging, sys, time, torch
        sys.modules["prometheus_client"] = None  # the serving environment lacks it
        logging.basicConfig(level=logging.WARNING)
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from armed import armed_record, stage_test_release
        from cutover.hostprotocol.hostlayout import HostPaths, atomic_write_text
        from cutover.plugin.runtime import PluginRuntime
        paths = HostPaths(cutover_root={str(tmp_path / "root")!r}, state_dir={str(tmp_path / "state")!r})
        stage_test_release(paths)
        atomic_write_text(paths.control, armed_record("shadow", 1).to_json())
        runtime = PluginRuntime(paths, 0, torch.device("cpu"))
        assert runtime.metrics is None
        print(runtime.control.poll_once().mode)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != metrics.MULTIPROC_ENV})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "shadow"
    assert done.stderr.count("prometheus_client is not installed in this serving environment") == 1
