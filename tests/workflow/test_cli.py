"""The workflow verbs through the real console script: bad input exits non-zero with a message naming the
problem and the fix, before any host is touched."""

import json

import pytest
from rich.console import Console

from checks.gates import RankObservation
from checks.policy import load_policy
from cutover.cli.shadow import _plain, _render
from cutover.workflow.shadow import Progress
from cutover.workflow.runstore import RunStore, run_meta

from .stats_records import layer, record

EXIT_CONFIG = 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["shadow"], "give exactly one of --hours or --minutes"),
        (["shadow", "--hours", "1", "--minutes", "5"], "give exactly one of --hours or --minutes"),
        (["shadow", "--minutes", "0"], "the shadow duration must be positive"),
        (["shadow", "--minutes", "1", "--policy", "absent.yml"], "policy absent.yml: file not found"),
        (["shadow", "--minutes", "1", "--load", "absent.yml"], "load file absent.yml: cannot read it"),
        (["shadow", "--minutes", "2"], "a 120 s shadow can never pass: policy"),
        (["promote", "--policy", "absent.yml"], "policy absent.yml: file not found"),
        (["report", "--reports-dir", "empty"], "no shadow run found under empty"),
    ],
)
def test_bad_input_is_refused_with_the_problem_and_the_fix(cli, args, message):
    result = cli(*args)
    assert result.returncode == EXIT_CONFIG, result.stdout + result.stderr
    assert result.stderr.startswith(f"error: {message}"), result.stderr
    assert "fix:" in result.stderr


def test_bad_policy_field_is_named_by_the_cli(cli, tmp_path):
    policy = tmp_path / "gates.yml"
    policy.write_text("shadow:\n  rel_l2_p99: -1\n")
    result = cli("shadow", "--minutes", "1", "--policy", policy)
    assert result.returncode == EXIT_CONFIG
    assert f"policy {policy}: field 'shadow.rel_l2_p99' must be > 0" in result.stderr


@pytest.mark.slow  # renders every plot
def test_report_of_a_stored_run_prints_its_path(cli, tmp_path):
    store = RunStore(tmp_path / "reports", "20261129T100000Z-cafe01")
    store.save_run(run_meta(store.run_id, "rel-a", {"h1": 2}, 1000.0, load_policy(), 1, ["cuda"]))
    store.append_stats("h1", record({"0": layer([1e-3] * 4)}, ts=1001.0, generation=2))
    result = cli("--json", "report", "--reports-dir", tmp_path / "reports")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["run_id"] == store.run_id and document["markdown"].endswith("report.md")
    plain = cli("report", store.run_id, "--reports-dir", tmp_path / "reports")
    assert plain.stdout.strip().endswith(f"report: {tmp_path / 'reports' / store.run_id / 'report.md'}")


def test_live_progress_renders_every_rank_and_the_load():
    progress = Progress(
        run_id="r1",
        elapsed_s=65,
        duration_s=7200,
        totals={
            "compared": 12,
            "worst_rel_l2": 2.1e-3,
            "worst_layer": "7",
            "nonfinite_custom": 0,
            "nonfinite_stock": 0,
            "truth_samples": 3,
        },
        ranks=[RankObservation("h1", 0, 0.4, "shadow"), RankObservation("h1", 1, None, None, reason="no beat")],
        host_errors={},
        load={"h1": {"sent": 5, "ok": 4, "failed": 1, "skipped": 0, "last_error": "HTTP 500"}},
        gauges=[("rel-L2 p99", 1.8e-3, 1e-2), ("rel-L2 max", 2.1e-3, 3e-2), ("non-finite", 0, 0),
                ("truth error/allowed", None, 1.0)],
        compared={"h1": (1200, 5000)},
        leases_left_s={"h1": 24.6},
    )
    console = Console(record=True, width=300)
    console.print(_render(progress))
    text = console.export_text()
    assert "0:01:05 elapsed, 1:58:55 left" in text and "worst rel-L2 0.0021 (layer 7)" in text
    assert "no beat" in text and "sent 5 ok 4 failed 1" in text
    assert ("gates: rel-L2 p99 0.0018 (gate 0.01) | rel-L2 max 0.0021 (gate 0.03) | non-finite 0 (gate 0) | "
            "truth error/allowed - (gate 1) | compared per rank, slowest layer, against the minimum: h1 1200/5000 "
            "(24%) | lease left: h1 25 s") in text
    assert _plain(progress).endswith(" | truth samples 3 | gates: rel-L2 p99 0.0018 (gate 0.01) | rel-L2 max 0.0021 "
                                     "(gate 0.03) | non-finite 0 (gate 0) | truth error/allowed - (gate 1) | compared "
                                     "per rank, slowest layer, against the minimum: h1 1200/5000 (24%) | lease left: "
                                     "h1 25 s")
