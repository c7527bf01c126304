"""Metric parsing, the shadow baseline, and load-file validation."""

import pytest

from cutover.errors import ConfigError
from cutover.workflow.load import MAX_RATE_PER_S, load_spec
from cutover.workflow.probes import ServerSample, baseline, parse_metrics, probe, tokens_per_s

METRICS = """\
# HELP cutover_verify_steps_total Verify steps.
# TYPE cutover_verify_steps_total counter
cutover_verify_steps_total{rank="0"} 100
cutover_verify_steps_total{rank="1"} 102
cutover_errors_total 3
sglang:spec_accept_length{model_name="m",dp_rank="0"} 2.0
sglang:spec_accept_length{model_name="m",dp_rank="1"} 3.0
sglang:generation_tokens_total{model_name="m",tp_rank="0"} 1200
sglang:generation_tokens_total{model_name="m",tp_rank="1"} 34
cutover_mode{rank="0",mode="shadow"} 1
not a metric line
"""


def test_parse_metrics_sums_label_sets_averages_the_accept_length_and_skips_comments():
    values = parse_metrics(METRICS)
    assert values["cutover_verify_steps_total"] == 202
    assert values["cutover_errors_total"] == 3
    assert values["sglang:spec_accept_length"] == 2.5
    assert values["sglang:generation_tokens_total"] == 1234
    assert "not" not in values


def test_baseline_rates_from_first_and_last_healthy_sample():
    samples = [
        ServerSample(at=10.0, healthy=True, verify_steps_total=100, errors_total=1, accept_length=2.0),
        ServerSample(at=12.0, healthy=False, error="down"),
        ServerSample(at=20.0, healthy=True, verify_steps_total=300, errors_total=1, accept_length=3.0),
    ]
    assert baseline(samples) == {"samples": 2, "verify_rate": 20.0, "error_rate": 0.0, "accept_length": 2.5,
                                 "tokens_per_s": None}
    assert baseline(samples[:1])["verify_rate"] is None


def tokens(*points):
    """(seconds, generation tokens counter, throughput gauge) -> healthy samples."""
    return [ServerSample(at=t, healthy=True, verify_steps_total=0, generation_tokens_total=c, gen_throughput=g)
            for t, c, g in points]


def test_tokens_per_s_is_the_generation_token_counters_rise_over_the_window_before_the_gauge():
    window = tokens((10.0, 1000, 7.0), (15.0, None, 8.0), (20.0, 1600, 9.0))
    assert tokens_per_s(window) == 60.0
    assert baseline(window)["tokens_per_s"] == 60.0
    assert tokens_per_s(window, minimum=3) == 8.0  # two counted probes are too few: the gauge's mean speaks


def test_tokens_per_s_falls_back_to_the_throughput_gauge_and_is_none_without_either():
    assert tokens_per_s(tokens((10.0, None, 40.0), (20.0, None, 50.0))) == 45.0
    assert tokens_per_s(tokens((10.0, None, 0.0), (20.0, None, 0.0))) == 0.0  # an idle server's real zero
    assert tokens_per_s(tokens((10.0, None, None), (20.0, None, None))) is None
    assert baseline(tokens((10.0, None, None), (20.0, None, None)))["tokens_per_s"] is None


def test_a_baseline_under_the_runs_own_load_keeps_no_tokens_per_s():
    assert baseline(tokens((10.0, 1000, 7.0), (20.0, 1600, 9.0)), driven_load=True)["tokens_per_s"] is None


def test_a_baseline_under_the_runs_own_load_keeps_no_verify_rate_and_says_why():
    """promote watches without that load: the driven rate would read as a regression of a healthy host."""
    from cutover.workflow.promote import unchecked_watch_checks

    samples = [ServerSample(at=10.0, healthy=True, verify_steps_total=100, accept_length=2.0),
               ServerSample(at=20.0, healthy=True, verify_steps_total=300, accept_length=3.0)]
    driven = baseline(samples, driven_load=True)
    assert driven["verify_rate"] is None and driven["accept_length"] == 2.5
    assert unchecked_watch_checks(driven) == (
        "NOT CHECKED during the watch: verify-step rate (the shadow baseline has no value for it; the shadow run "
        "drove its own load (--load), so its rate is not the host's own traffic)")


def probe_of(tmp_path, text: str) -> ServerSample:
    """One probe of a server whose /metrics is `text`."""
    import requests

    from .hostfiles import local_host
    from .serving import MetricsFront

    front = MetricsFront(lambda: text)
    host = local_host(tmp_path)
    host.vars.update(serving_port=front.port, serving_address="127.0.0.1")
    try:
        return probe(host, requests.Session())
    finally:
        front.stop()


def test_probe_reads_sglangs_generation_tokens_and_throughput(tmp_path):
    sample = probe_of(tmp_path, METRICS + "sglang:gen_throughput{tp_rank=\"0\"} 812.5\n")
    assert sample.healthy and sample.verify_steps_total == 202 and sample.accept_length == 2.5
    assert sample.generation_tokens_total == 1234 and sample.gen_throughput == 812.5


@pytest.mark.parametrize("throughput", ["sglang:gen_throughput NaN\n", "sglang:gen_throughput -1\n", ""])
def test_probe_of_a_server_without_token_figures_has_none(tmp_path, throughput):
    sample = probe_of(tmp_path, "cutover_verify_steps_total 5\n" + throughput)
    assert sample.healthy and sample.verify_steps_total == 5
    assert sample.generation_tokens_total is None and sample.gen_throughput is None and sample.accept_length is None


def write(tmp_path, text):
    path = tmp_path / "load.yml"
    path.write_text(text)
    return path


def test_load_spec_defaults_and_bounds(tmp_path):
    spec = load_spec(write(tmp_path, "prompts: [hello, world]\nrate_per_s: 2\n"))
    assert spec.prompts == ("hello", "world") and spec.rate_per_s == 2.0 and spec.max_new_tokens == 32


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("rate_per_s: 1\n", "prompts"),
        ("prompts: []\n", "prompts"),
        (f"prompts: [a]\nrate_per_s: {MAX_RATE_PER_S + 1}\n", "rate_per_s"),
        ("prompts: [a]\nmax_new_tokens: 1.5\n", "max_new_tokens"),
        ("prompts: [a]\nurl: http://elsewhere\n", "url"),
    ],
)
def test_bad_load_file_names_file_and_field(tmp_path, text, field):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_spec(path)
    assert str(path) in str(caught.value) and f"'{field}'" in str(caught.value)


def test_load_driver_posts_prompts_at_the_set_rate(tmp_path):
    import json
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from cutover.workflow.load import LoadDriver

    from .hostfiles import local_host

    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's naming
            received.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            self.send_response(200 if len(received) % 2 else 500)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = local_host(tmp_path)
    host.vars.update(serving_port=server.server_address[1], serving_address="127.0.0.1")
    spec = load_spec(write(tmp_path, "prompts: [alpha, beta]\nrate_per_s: 10\nmax_new_tokens: 4\n"))
    driver = LoadDriver(spec, [host]).start()
    time.sleep(1.05)
    driver.stop()
    server.shutdown()
    counts = driver.snapshot()[host.name]
    assert 8 <= counts["sent"] <= 12, counts
    assert counts["ok"] + counts["failed"] <= len(received) <= counts["sent"]
    assert counts["ok"] >= 1 and counts["failed"] >= 1  # the server fails every second request
    assert received[0] == ("/generate", {"text": "alpha", "sampling_params": {"max_new_tokens": 4}})
    assert received[1][1]["text"] == "beta"
