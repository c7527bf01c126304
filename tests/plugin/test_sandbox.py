"""The sandbox end to end on this CPU machine: real rank processes running the plugin, real HTTP, real files.

One sandbox (2 ranks) serves the module's tests in order: endpoints, an acknowledged mode switch, fault
injection, a killed controller's lease expiry, an unclean rank death and restart, and shutdown.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cutover.hostprotocol.hostlayout import Heartbeat, HostPaths, atomic_write_text
from armed import TEST_RELEASE, armed_record, stage_test_release

pytestmark = pytest.mark.slow  # real sandbox server and rank processes

RANKS = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sandbox_cli(*args, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "cutover.sandbox", *args], capture_output=True, text=True,
                            timeout=240)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


class Sandbox:
    def __init__(self, root):
        self.paths = HostPaths(cutover_root=str(root / "root"), state_dir=str(root / "state"))
        stage_test_release(self.paths)
        self.port = free_port()
        self.args = ["--state-dir", self.paths.state_dir, "--cutover-root", self.paths.cutover_root,
                     "--port", str(self.port), "--ranks", str(RANKS), "--layers", "3", "--step-interval", "0.2"]

    def get(self, path: str):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def post(self, path: str, body: bytes):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def beats(self) -> list[Heartbeat]:
        beats = []
        for rank in range(RANKS):
            with open(self.paths.heartbeat(rank)) as handle:
                beats.append(Heartbeat.from_json(handle.read()))
        return beats

    def control(self, mode: str, generation: int, lease_s: float | None = 60.0) -> None:
        atomic_write_text(self.paths.control, armed_record(mode, generation, lease_s=lease_s).to_json())

    def wait_for(self, predicate, timeout_s: float, what: str):
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.02)
        raise AssertionError(f"{what} not within {timeout_s}s; heartbeats: {[vars(b) for b in self.beats()]}")

    def metric(self, name: str, **labels) -> float:
        _, text = self.get("/metrics")
        label_text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        wanted = f"{name}{{{label_text}}}" if labels else name
        for line in text.splitlines():
            if line.startswith(wanted + " "):
                return float(line.split()[-1])
        raise AssertionError(f"{wanted} not in /metrics:\n{text}")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    box = Sandbox(tmp_path_factory.mktemp("sandbox"))
    box.control("triton", 1, lease_s=None)
    out = sandbox_cli("up", *box.args)
    assert "sandbox up" in out.stdout
    yield box
    sandbox_cli("down", "--state-dir", box.paths.state_dir)


def test_endpoints_are_sglang_shaped_and_labelled(sandbox):
    assert sandbox.get("/health")[0] == 200
    code, info = sandbox.get("/get_server_info")
    info = json.loads(info)
    assert code == 200 and info["sandbox"] is True and "not a model" in info["note"] and info["tp_size"] == RANKS
    assert info["kernel"] == "reference (no GPU)"
    code, answer = sandbox.post("/generate", json.dumps({"text": "hi there", "sampling_params":
                                                         {"max_new_tokens": 3}}).encode())
    assert code == 200 and answer["meta_info"]["sandbox"] is True and answer["meta_info"]["completion_tokens"] == 3
    assert sandbox.post("/generate", b"{not json")[0] == 400
    assert sandbox.metric("cutover_generate_requests_total") >= 1
    assert sandbox.metric("cutover_sandbox_info", kernel="reference (no GPU)", device="cpu") == 1
    again = sandbox_cli("up", *sandbox.args)  # idempotent
    assert "already running" in again.stdout


def test_a_second_sandbox_on_the_same_port_is_refused_clearly(sandbox, tmp_path):
    other = ["--state-dir", str(tmp_path / "other"), "--cutover-root", str(tmp_path / "root"),
             "--port", str(sandbox.port), "--ranks", "1"]
    result = sandbox_cli("up", *other, check=False)
    assert result.returncode != 0
    assert f"port {sandbox.port} is used by the sandbox of state dir {sandbox.paths.state_dir}" in result.stderr
    assert "cutover.sandbox down --state-dir" in result.stderr and sandbox.get("/health")[0] == 200


def test_mode_switch_is_acknowledged_by_every_rank_within_one_second(sandbox):
    start = time.time()
    sandbox.control("shadow", 2)
    sandbox.wait_for(lambda: all(b.generation_seen == 2 and b.mode_active == "shadow" for b in sandbox.beats()),
                     1.0, "every rank acknowledging shadow")
    assert time.time() - start < 1.0
    assert sandbox.metric("cutover_mode", rank=0, mode="shadow") == 1
    sandbox.wait_for(lambda: sandbox.metric("cutover_shadow_compared_total", rank=1) > 0, 15, "compared calls")

    def shadow_lines():
        with open(sandbox.paths.stats_file(1)) as handle:
            return [line for line in map(json.loads, handle) if line["mode"] == "shadow" and line["layers"]]

    line = sandbox.wait_for(shadow_lines, 5, "a shadow stats line")[-1]
    assert line["generation"] == 2 and line["kernel"] == "reference (no GPU)"


def plugin_series(sandbox, name: str, **labels) -> float:
    """The sum of a plugin series (docs/metrics.md) over the samples of /metrics that carry `labels` (0 if none)."""
    wanted = {k: str(v) for k, v in labels.items()}
    return sum(s.value for family in text_string_to_metric_families(sandbox.get("/metrics")[1])
               for s in family.samples if s.name == name and wanted.items() <= s.labels.items())


def test_plugin_series_are_on_the_sandbox_metrics_as_on_sglangs(sandbox):
    """The ranks write the plugin's series through prometheus_client's multiprocess directory; /metrics shows
    them for every rank and layer, as SGLang's /metrics does with metrics enabled."""
    host = socket.gethostname()
    for rank in range(RANKS):  # the series follow the heartbeat within a stats drain (1 s)
        sandbox.wait_for(lambda: plugin_series(sandbox, "cutover_plugin_mode", host=host, rank=rank,
                                               mode="shadow") == 1, 5, f"rank {rank}'s mode series")
        assert plugin_series(sandbox, "cutover_plugin_generation", host=host, rank=rank) == 2
        assert f'cutover_plugin_lease_age_seconds{{host="{host}",rank="{rank}"}}' in sandbox.get("/metrics")[1]
        sandbox.wait_for(lambda: plugin_series(sandbox, "cutover_plugin_compared_calls_total", rank=rank,
                                               layer=2) > 0, 15, f"rank {rank}'s compared calls of layer 2")
    calls = plugin_series(sandbox, "cutover_plugin_verify_calls_total", rank=0)
    compared = plugin_series(sandbox, "cutover_plugin_divergence_rel_l2_ratio_count", rank=0)
    assert calls >= compared > 0
    assert plugin_series(sandbox, "cutover_plugin_divergence_rel_l2_ratio_bucket", rank=0, le="+Inf") == compared


def test_sglangs_generated_tokens_and_accept_length_are_on_the_sandbox_metrics(sandbox):
    """Rank 0 counts the tokens its verify steps accept, as SGLang's first scheduler does, so the shadow baseline
    and the promote watch read tokens/s and accept length off the sandbox as off SGLang."""
    counted = plugin_series(sandbox, "sglang:generation_tokens_total")
    accept = sandbox.wait_for(lambda: plugin_series(sandbox, "sglang:spec_accept_length"), 60, "an accept length")
    assert 1 < accept < 5  # trees of 4 to 16 tokens: 1 to log2(tree size) + 1 accepted a request
    assert plugin_series(sandbox, "sglang:generation_tokens_total") > counted


def test_injected_nan_in_the_custom_path_is_counted(sandbox):
    fault = os.path.join(sandbox.paths.state_dir, "sandbox-fault")
    before = sandbox.metric("cutover_nonfinite_total", rank=0, kernel="custom")
    with open(fault, "w") as handle:
        handle.write("nan:layer=2:rank=0")
    try:
        sandbox.wait_for(lambda: sandbox.metric("cutover_nonfinite_total", rank=0, kernel="custom") > before, 15,
                         "non-finite custom outputs counted")
        assert sandbox.metric("cutover_nonfinite_total", rank=1, kernel="custom") == 0
        sandbox.wait_for(lambda: plugin_series(sandbox, "cutover_plugin_nonfinite_outputs_total", rank=0, layer=2,
                                               kernel="custom") > 0, 5, "the plugin series of layer 2 counting it")
    finally:
        os.unlink(fault)


def test_a_killed_controller_lease_expiry_returns_every_rank_to_triton(sandbox):
    renewer = subprocess.Popen([sys.executable, "-c", f"""
import time
from cutover.hostprotocol.hostlayout import ControlRecord, atomic_write_text
while True:
    atomic_write_text({sandbox.paths.control!r}, ControlRecord(mode="shadow", generation=3, set_by="renewer",
                      set_at=time.time(), release_id={TEST_RELEASE!r}, lease_expires_at=time.time() + 1.5).to_json())
    time.sleep(0.3)
"""])
    try:
        sandbox.wait_for(lambda: all(b.generation_seen == 3 and b.mode_active == "shadow" for b in sandbox.beats()),
                         5, "shadow under a renewed lease")
        time.sleep(2.0)  # renewals keep it armed past one lease length
        assert all(b.mode_active == "shadow" for b in sandbox.beats())
    finally:
        renewer.send_signal(signal.SIGKILL)
        renewer.wait()
    killed_at = time.time()
    sandbox.wait_for(lambda: all(b.mode_active == "triton" for b in sandbox.beats()), 3.0, "triton after expiry")
    assert time.time() - killed_at < 1.5 + 0.5 + 0.5  # lease + one poll + slack
    assert all("lease of generation 3 (shadow) expired" in b.reason for b in sandbox.beats())
    sandbox.wait_for(lambda: plugin_series(sandbox, "cutover_plugin_lease_expiries_total") == RANKS, 3,
                     "each rank's lease expiry counted")
    sandbox.wait_for(lambda: plugin_series(sandbox, "cutover_plugin_mode", mode="triton") == RANKS, 3,
                     "each rank's mode series on triton")


def test_unclean_rank_death_takes_the_server_down_and_the_restart_stays_on_triton(sandbox):
    sandbox.control("custom", 4, lease_s=600)  # outlives a slow restart on a loaded machine
    sandbox.wait_for(lambda: all(b.mode_active == "custom" for b in sandbox.beats()), 2, "custom")
    victim = sandbox.beats()[1].pid
    os.kill(victim, signal.SIGKILL)
    sandbox.wait_for(lambda: sandbox_cli("status", "--state-dir", sandbox.paths.state_dir).stdout.count(
        '"running": false'), 15, "the server going down with its rank")
    assert os.path.exists(sandbox.paths.armed_marker(1))
    old_pids = {b.pid for b in sandbox.beats()}
    sandbox_cli("up", *sandbox.args)
    sandbox.wait_for(lambda: all(b.generation_seen == 4 and b.pid not in old_pids for b in sandbox.beats()), 10,
                     "restarted ranks reading generation 4")
    rank0, rank1 = sandbox.beats()
    assert rank1.mode_active == "triton" and f"pid {victim}" in rank1.reason and rank1.counters["unclean_restart"] == 1
    assert rank0.mode_active == "custom"  # rank 0 was stopped cleanly by its server: nothing to contain
    sandbox.control("custom", 5)  # a newer generation is the operator asking again: re-arms
    sandbox.wait_for(lambda: all(b.mode_active == "custom" for b in sandbox.beats()), 1.0, "custom re-armed")


def test_down_stops_every_process(sandbox):
    pids = [b.pid for b in sandbox.beats()]
    out = sandbox_cli("down", "--state-dir", sandbox.paths.state_dir)
    assert "stopped" in out.stdout
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2]
    assert all(b.counters["stopped"] == 1 and b.mode_active == "triton" for b in sandbox.beats())
    assert not any(os.path.exists(sandbox.paths.armed_marker(r)) for r in range(RANKS))
    assert "nothing to stop" in sandbox_cli("down", "--state-dir", sandbox.paths.state_dir).stdout
