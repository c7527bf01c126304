"""Report generation from a stored run: Markdown, JSON and plots name the divergent layer."""

import builtins
import json
from dataclasses import asdict

import pytest

from checks.policy import load_policy
from cutover.errors import ConfigError
from cutover.workflow.promote import WatchTick
from cutover.workflow.report import write_report
from cutover.workflow.runstore import RunStore, latest_run_id, run_meta
from cutover.workflow.verdict import VerdictRecord

from .stats_records import layer, record

START = 1_764_400_000.0


def stored_run(tmp_path, *, with_verdict=True):
    store = RunStore(tmp_path, "20261129T000000Z-abc123")
    store.save_run(run_meta(store.run_id, "rel-a", {"h1": 3, "h2": 8}, START, load_policy(), 4, ["reference (no GPU)"]))
    for second in range(5):
        rel = 0.4 if second == 3 else 1e-3
        store.append_stats(
            "h1",
            record(
                {"0": layer([1e-3] * 3), "17": layer([1e-3, rel])},
                ts=START + second,
                truth=[{"layer": 17, "err_custom": 2e-3, "err_stock": 2e-3}],
            ),
        )
        store.append_stats("h2", record({"0": layer([1e-3] * 3)}, ts=START + second, rank=1, generation=8))
    store.append_stats("h2", record({"0": layer([0.9])}, ts=START + 6, rank=1, generation=7))  # older run
    if with_verdict:
        store.save_verdict(
            VerdictRecord(
                run_id=store.run_id,
                release_id="rel-a",
                hosts=["h1", "h2"],
                outcome="failed",
                reasons=["rel_l2_max: layer 17: worst relative L2 0.4 > 0.03 (at h1 rank 0)"],
                started_at=START,
                ended_at=START + 5,
                policy_source="default",
                actor="tester",
                generations={"h1": 3, "h2": 8},
                baseline={"h1": {"verify_rate": 12.5}},
            )
        )
    return store


def test_report_names_the_layer_and_writes_plots(tmp_path):
    store = stored_run(tmp_path)
    files = write_report(store)
    text = files.markdown.read_text()
    assert text.startswith(f"# Shadow run {store.run_id}: FAILED")
    assert "layer 17" in text and "| 17 | 10 |" in text
    document = json.loads(files.json.read_text())
    rows = {row["layer"]: row for row in document["layers"]}
    assert rows["17"]["rel_l2_max"] == 0.4 and rows["17"]["worst_at"] == "h1 rank 0"
    assert rows["0"]["compared"] == 30  # the older run's record (generation 7) is not counted
    assert document["totals"]["truth_samples"] == 5
    assert sorted(p.name for p in files.plots) == ["compared.png", "divergence.png", "truth_anchor.png"]
    for path in files.plots:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"plots/{path.name}" in text


def test_report_without_matplotlib_says_how_to_get_plots(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    files = write_report(stored_run(tmp_path))
    assert files.plots == []
    assert "pip install 'cutover[report]'" in files.markdown.read_text()
    assert json.loads(files.json.read_text())["plot_note"].startswith("plots skipped")


def test_report_of_unfinished_run_and_latest_lookup(tmp_path):
    store = stored_run(tmp_path, with_verdict=False)
    assert latest_run_id(tmp_path) == store.run_id
    assert "NO VERDICT" in write_report(store).markdown.read_text()


def test_unknown_run_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no shadow run found"):
        latest_run_id(tmp_path)
    with pytest.raises(ConfigError, match="not found"):
        write_report(RunStore(tmp_path, "nope"))


def _strict_constant(name):
    raise ValueError(f"{name} is not JSON")


def test_a_cut_short_stats_line_is_skipped_and_counted_and_non_finite_values_stay_strict_json(tmp_path):
    store = stored_run(tmp_path)
    store.append_stats("h1", record({"5": layer([float("nan")])}, ts=START + 5))
    with open(store.stats_file("h1", 0), "a") as handle:
        handle.write('{"ts": 1764400006.0, "layers": {"0": {"calls')  # a write cut short by a full disk
    files = write_report(store)
    assert "* 1 stored stats line(s) could not be parsed (cut short?) and were left out here" in (
        files.markdown.read_text())
    document = json.loads(files.json.read_text(), parse_constant=_strict_constant)  # no NaN / Infinity tokens
    assert document["unreadable_stats_lines"] == 1
    assert {row["layer"]: row for row in document["layers"]}["5"]["rel_l2_max"] == "NaN"


def test_stats_times_go_onto_the_operator_clock_by_each_hosts_offset(tmp_path):
    """h2's clock is 100 s ahead: its records at host time START + 100 + s are second s of the run, beside h1's."""
    store = RunStore(tmp_path, "20261129T000000Z-def456")
    store.save_run(run_meta(store.run_id, "rel-a", {"h1": 3, "h2": 8}, START, load_policy(), 4, ["reference (no GPU)"],
                            {"h1": 0.0, "h2": 100.0}))
    for second in range(3):
        store.append_stats("h1", record({"0": layer([1e-3] * 2)}, ts=START + second))
        store.append_stats("h2", record({"0": layer([1e-3] * 5)}, ts=START + 100 + second, rank=1, generation=8))

    files = write_report(store)
    report = json.loads(files.json.read_text())
    assert report["series"]["compared"] == [[0, 7], [1, 7], [2, 7]]
    assert "host clocks ahead of it by h1 +0.000 s, h2 +100.000 s" in files.markdown.read_text()


def test_a_run_without_recorded_offsets_says_its_times_are_the_hosts(tmp_path):
    store = stored_run(tmp_path)
    meta = json.loads(store.run_file.read_text())
    del meta["clock_offsets_s"]  # as an older cutover wrote run.json
    store.run_file.write_text(json.dumps(meta))
    files = write_report(store)
    assert "times: each host's own clock (this run recorded no clock offsets)" in files.markdown.read_text()
    assert json.loads(files.json.read_text())["series"]["compared"][0][0] == 0


def test_the_verdict_gives_each_gate_its_observed_value_beside_its_threshold(tmp_path):
    text = write_report(stored_run(tmp_path)).markdown.read_text()
    assert "| gate | observed | threshold | |" in text
    assert "| rel-L2 max | 0.4 | <= 0.03 | **over** |" in text
    assert "| non-finite | 0 | <= 0 | ok |" in text
    short = ">= 10000 per rank (10000 per host) | **short** |"
    assert f"| compared calls, h1 (slowest rank and layer) | 10 | {short}" in text
    assert f"| compared calls, h2 (slowest rank and layer) | 0 | {short}" in text  # layer 17 never ran there
    assert "| duration | 5 s | >= 3600 s | **short** |" in text


def test_the_baseline_is_a_table_not_json(tmp_path):
    text = write_report(stored_run(tmp_path)).markdown.read_text()
    assert "| host | verify steps/s | errors/s | accept length | tokens/s | probes | note |" in text
    assert "| h1 | 12.5 | - | - | - | - |  |" in text  # a verdict of a cutover without tokens/s reads "-"
    assert '{"verify_rate"' not in text


def test_p99_is_the_bucket_that_holds_it_not_simply_the_max(tmp_path):
    """4 buckets a decade: calls between 2.2e-3 and 2.4e-3 share the bucket [1.78e-3, 3.16e-3), so the p99's upper
    bound is the max; a layer whose top 1 % sits apart shows a p99 below its max."""
    store = RunStore(tmp_path, "20261129T000000Z-p99p99")
    store.save_run(run_meta(store.run_id, "rel-a", {"h1": 3}, START, load_policy(), 1, ["reference (no GPU)"]))
    narrow = [2.2e-3 + i * 2e-6 for i in range(100)]
    spread = [1e-4] * 99 + [2.4e-3]
    store.append_stats("h1", record({"0": layer(narrow), "1": layer(spread)}, ts=START))
    files = write_report(store)
    rows = {row["layer"]: row for row in json.loads(files.json.read_text())["layers"]}
    assert rows["0"]["rel_l2_p99"] == rows["0"]["rel_l2_max"] == max(narrow)
    assert rows["0"]["rel_l2_p99_low"] == pytest.approx(10 ** -2.75)
    assert rows["1"]["rel_l2_p99"] == pytest.approx(10 ** -3.75) and rows["1"]["rel_l2_max"] == 2.4e-3
    text = files.markdown.read_text()
    assert "| 0 | 100 | 0.00178 - 0.0024 | 0.0024 |" in text
    assert "| 1 | 100 | 0.0001 - 0.000178 | 0.0024 |" in text


def test_a_sandbox_run_is_labelled_and_compared_calls_are_per_rank_in_the_slowest_layer(tmp_path):
    store = RunStore(tmp_path, "20261129T000000Z-sandbx")
    store.save_run(run_meta(store.run_id, "rel-a", {"local": 3}, START, load_policy(), 1, ["reference (no GPU)"],
                            sandbox_hosts=["local"]))
    for second in range(3):
        store.append_stats("local", record({"0": layer([1e-3] * 4), "1": layer([1e-3] * 2)}, ts=START + second))
        store.append_stats("local", record({"0": layer([1e-3] * 3), "1": layer([1e-3] * 3)}, ts=START + second,
                                              rank=1))
    files = write_report(store)
    text = files.markdown.read_text()
    assert text.startswith(f"# Shadow run {store.run_id}: NO VERDICT (run still going or interrupted) (SANDBOX)\n\n"
                           "**SANDBOX: a stand-in for SGLang, not a model.**\n")
    series = json.loads(files.json.read_text())["series"]
    assert series["slowest_compared"] == {"local": [[0, 2], [1, 4], [2, 6]]}  # rank 0, layer 1


SHADOW = {"verify_rate": 9.0, "accept_length": 2.5, "tokens_per_s": 2410.0}


def tick(host, elapsed, verify=None, accept=None, tokens=None, base=SHADOW):
    """One probe of a promote watch, as `cutover promote` records it beside the run."""
    watched = WatchTick(host=host, elapsed_s=elapsed, watch_s=30.0, lease_left_s=20.0, healthy=True, failed_probes=0,
                        max_failed_probes=3, error="", verify_rate=verify, base_verify_rate=base.get("verify_rate"),
                        min_verify_rate_ratio=0.5, new_errors=0, new_nonfinite=0, max_new_errors=0,
                        accept_length=accept, base_accept_length=base.get("accept_length"), tokens_per_s=tokens,
                        base_tokens_per_s=base.get("tokens_per_s"))
    return {"at": START + 10 + elapsed, **asdict(watched)}


def record_watch(store, host, before_flip, ticks):
    store.append_promote({"at": START + 9, "host": host, **before_flip})
    for probe in ticks:
        store.append_promote(probe)
    store.append_promote({"at": START + 40, "host": host, "outcome": "promoted", "reason": "watch passed"})


def bought(text: str) -> list[str]:
    """The rows of the report's "What the cutover bought" table."""
    table = text.split("### What the cutover bought")[1]
    return [line for line in table.splitlines() if line.startswith(("| h1 ", "| h2 "))]


def test_the_promote_watch_shows_what_the_cutover_bought_on_triton_in_shadow_and_after_the_flip(tmp_path):
    store = stored_run(tmp_path)
    record_watch(store, "h1", {"triton_verify_rate": 8.0, "triton_accept_length": 2.5, "triton_tokens_per_s": 1903.4},
                 [tick("h1", 0), tick("h1", 10, 9.5, 2.6, 2400.0), tick("h1", 20, 10.0, 2.7, 2488.0)])
    record_watch(store, "h2", {"triton_verify_rate": 8.0, "triton_accept_length": None, "triton_tokens_per_s": None},
                 [tick("h2", 0, base={"verify_rate": 9.0}), tick("h2", 20, 12.0, base={"verify_rate": 9.0})])
    files = write_report(store)
    text = files.markdown.read_text()
    assert "| h1 | promoted: watch passed | 20 of 30 s | 4.5 | 0 | 0 |" in text
    assert ("| host | figure | on Triton (before the flip) | in shadow | after the flip (last) | after vs Triton |"
            in text)
    assert bought(text) == [
        "| h1 | verify steps/s | 8 | 9 | 10 | +25 % |",
        "| h1 | accept length | 2.5 | 2.5 | 2.7 | +8 % |",
        "| h1 | tokens/s | 1903 | 2410 | 2488 | +31 % |",  # whole tokens, not 1.9e+03
        "| h2 | verify steps/s | 8 | 9 | 12 | +50 % |",
        "| h2 | accept length | - | - | - | - |",  # a server without the figures: "-", never 0
        "| h2 | tokens/s | - | - | - | - |",
    ]
    watch = json.loads(files.json.read_text())["promote_watch"]["h1"]
    assert (watch["triton_tokens_per_s"], watch["ticks"][-1]["tokens_per_s"]) == (1903.4, 2488.0)
    assert "promote_watch.png" in {path.name for path in files.plots}


def test_a_watch_recorded_before_tokens_per_s_was_kept_still_reads(tmp_path):
    store = stored_run(tmp_path)
    old = [{key: value for key, value in tick("h1", elapsed, 10.0, 2.6, 500.0).items() if "tokens" not in key}
           for elapsed in (0, 10, 20)]
    record_watch(store, "h1", {"triton_verify_rate": 8.0}, old)
    rows = bought(write_report(store).markdown.read_text())
    assert rows == ["| h1 | verify steps/s | 8 | 9 | 10 | +25 % |", "| h1 | accept length | - | 2.5 | 2.6 | - |",
                    "| h1 | tokens/s | - | - | - | - |"]
