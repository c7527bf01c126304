"""Stats lines (docs/architecture.md format), truth anchor, bounded captures, and replay of a capture."""

from __future__ import annotations

import json
import os

import pytest
import torch

from cutover.hostlayout import REL_L2_BIN_EDGES
from cutover.plugin.captures import CAPTURE_FORMAT, CaptureStore, load_capture
from cutover.plugin.dispatch import verify_site
from cutover.replay import ReplayError, replay_capture
from kernel_ext.reference import reference_extend_attention_fwd
from kernel_ext.testing import make_verify_batch

LAYER_KEYS = {"calls", "compared", "rel_l2_max", "rel_l2_hist", "max_abs", "nonfinite_custom", "nonfinite_stock"}


def shadow_calls(runtime, write_control, layers=(1, 4), steps=3, seed=0):
    write_control("shadow", 1)
    runtime.control.poll_once()
    dispatcher = runtime.wrap(reference_extend_attention_fwd)
    for step in range(steps):
        batch = make_verify_batch(8, 8, 2, [30, 55], seed=seed + step)
        for layer in layers:
            with verify_site(layer):
                dispatcher(*batch.args())
    runtime.audit.drain()


def stats_lines(paths):
    with open(paths.stats_file(0)) as handle:
        return [json.loads(line) for line in handle]


def test_stats_line_has_the_documented_format_and_interval_deltas(runtime, paths, write_control):
    shadow_calls(runtime, write_control)
    runtime.drain(write=True)
    shadow_calls(runtime, write_control, steps=2, seed=10)
    runtime.drain(write=True)
    first, second = stats_lines(paths)[-2:]
    assert set(first) == {"ts", "rank", "generation", "mode", "release_id", "interval_s", "kernel", "layers", "truth"}
    assert (first["mode"], first["generation"], first["kernel"]) == ("shadow", 1, "reference (no GPU)")
    assert set(first["layers"]) == {"1", "4"} and set(first["layers"]["1"]) == LAYER_KEYS
    layer = first["layers"]["4"]
    assert len(layer["rel_l2_hist"]) == len(REL_L2_BIN_EDGES) + 1 and sum(layer["rel_l2_hist"]) == layer["compared"]
    assert (layer["calls"], second["layers"]["4"]["calls"]) == (3, 2)  # deltas, not running totals
    assert 0 < layer["rel_l2_max"] < 1e-2 and layer["nonfinite_custom"] == 0
    truth = first["truth"] + second["truth"]
    assert truth and set(truth[0]) == {"layer", "err_custom", "err_stock"}
    assert 0 < truth[0]["err_custom"] < 1e-2 and 0 < truth[0]["err_stock"] < 1e-2


def test_captures_are_bounded_and_keep_the_worst(tmp_path):
    store = CaptureStore(str(tmp_path), rank=0, max_count=3)
    for i, rel in enumerate([0.1, 0.5, 0.2, 0.05, 0.9, 0.3]):
        store.save({"format": CAPTURE_FORMAT, "rel_l2": rel, "layer": i})
    kept = sorted(load_capture(str(tmp_path / name))["rel_l2"] for name in os.listdir(tmp_path))
    assert kept == [0.3, 0.5, 0.9]


def test_capture_file_format_and_replay(runtime, paths, write_control, capsys):
    shadow_calls(runtime, write_control, layers=(2,), steps=2)
    names = sorted(os.listdir(paths.captures))
    assert names and names[0].startswith("rank-0-layer-2-")
    capture = load_capture(os.path.join(paths.captures, names[0]))
    assert capture["format"] == CAPTURE_FORMAT and capture["kernel"] == "reference (no GPU)"
    assert capture["stock_kernel"] == "kernel_ext.reference.reference_extend_attention_fwd"
    assert capture["args"]["k_buffer"].shape[0] == int(capture["args"]["kv_indptr"][-1])  # only the rows read
    result = replay_capture(os.path.join(paths.captures, names[0]))
    by_source = {(r.source, r.kernel): r for r in result.rows}
    assert set(by_source) == {("recorded live", "stock"), ("recorded live", "custom"), ("rerun", "stock"),
                              ("rerun", "custom")}
    for row in result.rows:
        assert 0 < row.rel_l2 < 1e-2 and row.nonfinite == 0
    # a rerun reproduces what was recorded live (same reference kernels, same inputs)
    assert by_source[("rerun", "custom")].rel_l2 == pytest.approx(by_source[("recorded live", "custom")].rel_l2)
    assert result.custom_vs_stock_live == pytest.approx(capture["rel_l2"])


def test_replay_of_a_file_that_is_not_a_capture_says_so(tmp_path):
    bogus = tmp_path / "bogus.pt"
    torch.save({"hello": 1}, bogus)
    with pytest.raises(ReplayError, match="not a cutover capture"):
        replay_capture(str(bogus))


def test_replay_cli_prints_each_error(runtime, paths, write_control):
    import typer
    from typer.testing import CliRunner

    from cutover.cli import replay

    app = typer.Typer()
    app.callback()(lambda: None)
    replay.register(app)
    shadow_calls(runtime, write_control, layers=(0,), steps=1)
    capture = os.path.join(paths.captures, os.listdir(paths.captures)[0])
    result = CliRunner().invoke(app, ["replay", capture, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert len(document["rows"]) == 4 and all(r["rel_l2"] < 1e-2 for r in document["rows"])
