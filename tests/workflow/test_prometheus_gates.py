"""PromQL gates against a real Prometheus server (Debian's `prometheus`, on loopback) scraping a real sandbox:
a gate passes and fails as its threshold says, a failing gate stops a shadow run, the promote watch rolls back on
a failing gate, and the alert rules and dashboard queries of docs/monitoring evaluate."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from checks.policy import load_policy
from checks.prometheus import GateWatch
from cutover.config import Inventory, Settings
from cutover.errors import ConfigError, GateFailedError
from armed import armed_record, stage_test_release
from cutover.hostprotocol.hostlayout import HostPaths, atomic_write_text
from cutover.workflow.promote import PromoteOptions, run_promote
from cutover.workflow.shadow import ShadowOptions, run_shadow

from .hostfiles import local_host, write_control, write_phase
from .serving import LocalServer

from .test_promote_run import host  # noqa: F401 (a fixture: h1 after a passed shadow, its ranks running)

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "docs" / "monitoring"
STARTUP_S = 90

pytestmark = [pytest.mark.slow,  # a real Prometheus server per test
              pytest.mark.skipif(shutil.which("prometheus") is None,
                                 reason="the prometheus server is not installed (scripts/setup.sh installs it)")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, what: str, timeout_s: float = STARTUP_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = condition()
        except requests.RequestException:
            value = None
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what} not within {timeout_s}s")


def instant(url: str, query: str) -> dict:
    return requests.get(f"{url}/api/v1/query", params={"query": query}, timeout=10).json()


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory):
    """A sandbox (2 ranks in shadow) and a Prometheus scraping its /metrics every second, with the alert rules
    of docs/monitoring loaded; yields Prometheus's URL once the plugin's series have arrived there."""
    root = tmp_path_factory.mktemp("promql")
    paths = HostPaths(cutover_root=str(root / "root"), state_dir=str(root / "state"))
    sandbox_port, prometheus_port = free_port(), free_port()
    sandbox = [sys.executable, "-m", "cutover.sandbox"]
    stage_test_release(paths)
    atomic_write_text(paths.control, armed_record("shadow", 1, lease_s=900.0).to_json())  # the longest lease obeyed
    up = subprocess.run(sandbox + ["up", "--state-dir", paths.state_dir, "--cutover-root", paths.cutover_root,
                                   "--port", str(sandbox_port), "--ranks", "2", "--layers", "3",
                                   "--step-interval", "0.2"], capture_output=True, text=True, timeout=240)
    assert up.returncode == 0, up.stdout + up.stderr
    config = root / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(MONITORING / "alerts.yml")],
        "scrape_configs": [{"job_name": "sandbox", "static_configs": [{"targets": [f"127.0.0.1:{sandbox_port}"]}]}],
    }))
    with open(root / "prometheus.log", "wb") as log:
        server = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={root / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{prometheus_port}"], stdout=log,
                                  stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{prometheus_port}"
    try:
        wait_until(lambda: requests.get(f"{url}/-/ready", timeout=2).ok, "Prometheus ready")
        wait_until(lambda: instant(url, "sum(cutover_plugin_compared_calls_total) > 0")["data"]["result"],
                   "the sandbox's compared calls in Prometheus")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        subprocess.run(sandbox + ["down", "--state-dir", paths.state_dir], capture_output=True, timeout=120)


def policy_with(tmp_path, url: str, stage: str, gates: list[dict], **extra) -> Path:
    path = tmp_path / "policy.yml"
    path.write_text(yaml.safe_dump({"promote": {"probe_interval_s": 0.2, "max_failed_probes": 1000},
                                    "prometheus": {"url": url, "timeout_s": 5, stage: gates, **extra}}))
    return path


CALLS = "sum(cutover_plugin_verify_calls_total)"
RANKS_IN_SHADOW = 'sum(cutover_plugin_mode{mode="shadow"})'


@pytest.mark.parametrize(("gate", "passes"), [
    ({"query": CALLS, "must_be": ">", "threshold": 0}, True),
    ({"query": CALLS, "must_be": "<", "threshold": 1}, False),
    ({"query": RANKS_IN_SHADOW, "must_be": ">=", "threshold": 2}, True),
    ({"query": RANKS_IN_SHADOW, "must_be": ">=", "threshold": 3}, False),
    # relative to the value before the flip: unchanged (2 ranks) is a ratio of 1
    ({"query": RANKS_IN_SHADOW, "must_be": "<=", "threshold": 1.05, "relative": True}, True),
    ({"query": RANKS_IN_SHADOW, "must_be": "<", "threshold": 0.95, "relative": True}, False),
])
def test_a_promql_gate_passes_and_fails_as_its_threshold_says(prometheus_url, tmp_path, gate, passes):
    policy = load_policy(policy_with(tmp_path, prometheus_url, "shadow", [{"name": "g", **gate}]))
    watch = GateWatch(policy.prometheus, "shadow")
    watch.record_before()
    [result] = watch.check(final=True)
    assert (result.gate, result.passed) == ("prometheus g", passes)
    assert f"must be {gate['must_be']} {gate['threshold']:g}" in result.detail
    if gate.get("relative"):
        assert result.detail.startswith("2 / 2 before the flip = 1,")


def test_an_unanswered_query_fails_its_gate_after_max_failed_queries(tmp_path, prometheus_url):
    dead = f"http://127.0.0.1:{free_port()}"
    policy = load_policy(policy_with(tmp_path, dead, "promote", [{"name": "g", "query": CALLS, "must_be": ">",
                                                                 "threshold": 0}], max_failed_queries=2))
    watch = GateWatch(policy.prometheus, "promote")
    started = time.monotonic()
    assert [r.passed for r in watch.check()] == [True]  # one miss is tolerated
    assert [r.passed for r in watch.check()] == [False]
    assert time.monotonic() - started < 2 * 5 + 2  # bounded by the timeout
    assert "query not answered (3 in a row)" in watch.check()[0].detail
    bad = load_policy(policy_with(tmp_path, prometheus_url, "promote", [{"name": "g", "query": "sum(", "must_be": ">",
                                                                        "threshold": 0}]))
    [result] = GateWatch(bad.prometheus, "promote").check(final=True)
    assert not result.passed and "Prometheus refused the query" in result.detail
    relative = load_policy(policy_with(tmp_path, dead, "promote", [{"name": "g", "query": CALLS, "must_be": "<",
                                                                   "threshold": 2, "relative": True}]))
    with pytest.raises(GateFailedError, match="its value before the flip cannot be read"):
        GateWatch(relative.prometheus, "promote").record_before()


@pytest.mark.parametrize(("section", "field"), [
    ({"url": "prom:9090"}, "prometheus.url"),
    ({"url": "http://p", "promote": [{"name": "g", "query": "up", "must_be": "=<", "threshold": 1}]},
     "prometheus.promote[0].must_be"),
    ({"url": "http://p", "shadow": [{"name": "g", "query": "up", "must_be": "<", "threshold": "5%"}]},
     "prometheus.shadow[0].threshold"),
    ({"url": "http://p", "shadow": [{"name": "g", "query": "up", "must_be": "<", "threshold": 1, "relativ": 1}]},
     "prometheus.shadow[0].relativ"),
])
def test_bad_prometheus_sections_name_the_field(tmp_path, section, field):
    path = tmp_path / "policy.yml"
    path.write_text(yaml.safe_dump({"prometheus": section}))
    with pytest.raises(ConfigError, match=rf"^policy {path}: field '{re.escape(field)}' "):
        load_policy(path)


def test_the_alert_rules_and_dashboard_queries_evaluate(prometheus_url):
    rules = wait_until(lambda: [r for g in requests.get(f"{prometheus_url}/api/v1/rules", timeout=5).json()["data"]
                                ["groups"] for r in g["rules"] if r.get("lastEvaluation", "").startswith("2")],
                       "the alert rules evaluated")
    assert len(rules) == 5 and all(rule["health"] == "ok" for rule in rules), rules
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    queries = [target["expr"].replace("$host", ".*") for panel in dashboard["panels"] for target in panel["targets"]]
    for query in queries:
        answer = instant(prometheus_url, query)
        assert answer["status"] == "success", (query, answer)
    assert instant(prometheus_url, queries[0])["data"]["result"]  # the mode panel shows the sandbox's ranks


@pytest.mark.parametrize("passes", [True, False])
def test_the_promote_watch_rolls_back_on_a_failing_promql_gate(prometheus_url, host, tmp_path, passes):
    gate = {"name": "sandbox_calls", "query": CALLS, "must_be": ">" if passes else "<", "threshold": 0}
    options = PromoteOptions(policy=load_policy(policy_with(tmp_path, prometheus_url, "promote", [gate])),
                             watch_minutes=0.03, lease_ttl_s=5.0)
    promote = lambda: run_promote(Inventory(tmp_path / "inventory.yml", [host]), [host],  # noqa: E731
                                  Settings(operator="tester@here", ack_timeout_s=5.0), options)
    control = lambda: json.loads(open(host.paths.control).read())  # noqa: E731
    if passes:
        [result] = promote()
        assert result.outcome == "promoted" and control()["mode"] == "custom"
        return
    with pytest.raises(GateFailedError) as caught:
        promote()
    assert "prometheus sandbox_calls:" in str(caught.value) and "must be < 0" in str(caught.value)
    assert "rolled back to Triton" in str(caught.value)
    assert control()["mode"] == "triton"
    last = [json.loads(line) for line in open(host.paths.journal)][-1]
    assert last["action"] == "promote_rolled_back" and "prometheus sandbox_calls" in last["reason"]


def test_a_failing_promql_gate_stops_the_shadow_run_and_rolls_back(prometheus_url, tmp_path):
    staged = local_host(tmp_path)
    write_phase(staged, "staged")
    write_control(staged)
    server = LocalServer(staged, traffic=True)
    try:
        policy = policy_with(tmp_path, prometheus_url, "shadow", [{"name": "calls", "query": CALLS, "must_be": "<",
                                                                   "threshold": 1}])
        policy.write_text(policy.read_text() + "shadow:\n  min_duration_s: 1\n  min_compared_calls: 4\n"
                          "  truth_anchor_min_samples: 0\n")
        options = ShadowOptions(policy=load_policy(policy), duration_s=30.0, lease_ttl_s=5.0, poll_s=0.2,
                                reports_dir=str(tmp_path / "reports"))
        with pytest.raises(GateFailedError, match=r"failed: prometheus calls: \S+, must be < 1"):
            run_shadow(Inventory(tmp_path / "inventory.yml", [staged]), [staged], Settings(operator="tester@here"),
                       options)
        assert json.loads(open(staged.paths.control).read())["mode"] == "triton"
    finally:
        server.stop()
