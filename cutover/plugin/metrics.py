"""One rank's Prometheus series (docs/metrics.md), written through prometheus_client.

Where they go: when the serving process runs with Prometheus multiprocess mode (`PROMETHEUS_MULTIPROC_DIR` set,
as SGLang sets it for `--enable-metrics`; the sandbox sets it too), prometheus_client writes every value into
that directory and the server's own `/metrics` exposes them. Otherwise the rank rewrites a node_exporter
textfile, `<dir>/cutover_rank<r>.prom` (atomically: written aside, then renamed), with `<dir>` from
`CUTOVER_METRICS_TEXTFILE_DIR`, else `<state_dir>/metrics`. Without prometheus_client in the serving
environment nothing is exported, the rank says so once in its log, and serves on unchanged.
"""

from __future__ import annotations

import logging
import os
import time

import torch

from cutover.hostprotocol.hostlayout import MODES, REL_L2_BIN_EDGES
from cutover.plugin.devicestate import CALLS, COMPARED, HIST, nonfinite_custom, nonfinite_stock

log = logging.getLogger("cutover.plugin")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
TEXTFILE_DIR_ENV = "CUTOVER_METRICS_TEXTFILE_DIR"
RANK_LABELS = ("host", "rank")
LAYER_LABELS = ("host", "rank", "layer")


def rank_metrics(state_dir: str, host: str, rank: int) -> RankMetrics | None:
    """The rank's exporter, or None (logged) when prometheus_client cannot be imported here."""
    textfile_dir = os.environ.get(TEXTFILE_DIR_ENV) or os.path.join(state_dir, "metrics")
    try:
        return RankMetrics(host, rank, None if os.environ.get(MULTIPROC_ENV) else textfile_dir)
    except ImportError:  # optional in the serving environment
        log.warning("cutover: rank %s exports no Prometheus series: prometheus_client is not installed in this "
                    "serving environment (install prometheus-client there to export them)", rank)
        return None


class RankMetrics:
    """The series of one rank; `update()` once per stats drain. `textfile_dir` None: multiprocess mode."""

    def __init__(self, host: str, rank: int, textfile_dir: str | None):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.labels = {"host": host, "rank": str(rank)}
        self.textfile = os.path.join(textfile_dir, f"cutover_rank{rank}.prom") if textfile_dir else None
        self.registry = CollectorRegistry()
        reg = {"registry": self.registry}
        live = {"multiprocess_mode": "livemax", **reg}  # one process per (host, rank): its own value
        self.mode = Gauge("cutover_plugin_mode", "1 for the mode the rank runs (triton, shadow, custom), else 0.",
                          RANK_LABELS + ("mode",), **live)
        self.generation = Gauge("cutover_plugin_generation", "The control generation the rank has applied.",
                                RANK_LABELS, **live)
        self.lease_age = Gauge("cutover_plugin_lease_age_seconds",
                               "Seconds since the rank saw the lease of its generation set or renewed.",
                               RANK_LABELS, **live)
        self.mode_switches = Counter("cutover_plugin_mode_switches", "Mode changes the rank made.",
                                     RANK_LABELS, **reg)
        self.lease_expiries = Counter("cutover_plugin_lease_expiries",
                                      "Leases that expired on the rank (it fell back to triton).", RANK_LABELS, **reg)
        self.calls = Counter("cutover_plugin_verify_calls", "Verify attention calls the plugin saw.",
                             LAYER_LABELS, **reg)
        self.compared = Counter("cutover_plugin_compared_calls",
                                "Verify calls computed by both kernels and compared (shadow).", LAYER_LABELS, **reg)
        self.nonfinite = Counter("cutover_plugin_nonfinite_outputs",
                                 "Compared calls whose output had a NaN or Inf, by kernel (custom, stock).",
                                 LAYER_LABELS + ("kernel",), **reg)
        self.divergence = Histogram("cutover_plugin_divergence_rel_l2_ratio",
                                    "Relative L2 error of the custom output against SGLang's, per compared call.",
                                    LAYER_LABELS, buckets=REL_L2_BIN_EDGES, **reg)
        for counter in (self.mode_switches, self.lease_expiries):
            counter.labels(**self.labels)  # exported as 0 from the start, so increase() sees the first one
        self._mode_seen: str | None = None
        self._lease_seen: float | None = None
        self._lease_set_at = time.monotonic()
        self._expiries_seen = 0

    def update(self, mode: str, generation: int, lease_expires_at: float | None, lease_expiries: int,
               delta: torch.Tensor | None) -> None:
        """Fold one drain in: the rank's mode and lease, and `delta` (counters since the previous drain)."""
        for name in MODES:
            self.mode.labels(**self.labels, mode=name).set(int(name == mode))
        if self._mode_seen is not None and mode != self._mode_seen:
            self.mode_switches.labels(**self.labels).inc()
        self._mode_seen = mode
        self.generation.labels(**self.labels).set(max(generation, 0))
        if lease_expires_at != self._lease_seen:
            self._lease_seen, self._lease_set_at = lease_expires_at, time.monotonic()
        if lease_expires_at is not None:
            self.lease_age.labels(**self.labels).set(round(time.monotonic() - self._lease_set_at, 3))
        if lease_expiries > self._expiries_seen:
            self.lease_expiries.labels(**self.labels).inc(lease_expiries - self._expiries_seen)
            self._expiries_seen = lease_expiries
        if delta is not None:
            self._add_counters(delta)
        if self.textfile:
            from prometheus_client import write_to_textfile

            os.makedirs(os.path.dirname(self.textfile), exist_ok=True)
            write_to_textfile(self.textfile, self.registry)  # atomic: written aside, then renamed

    def _add_counters(self, delta: torch.Tensor) -> None:
        custom, stock = nonfinite_custom(delta), nonfinite_stock(delta)
        for layer in torch.nonzero(delta[:, CALLS] > 0).flatten().tolist():
            labels = {**self.labels, "layer": str(layer)}
            row = delta[layer]
            self.calls.labels(**labels).inc(int(row[CALLS]))
            if int(row[COMPARED]) > 0:
                self.compared.labels(**labels).inc(int(row[COMPARED]))
                self._add_binned(self.divergence.labels(**labels), [int(n) for n in row[HIST:].tolist()])
            for kernel, count in (("custom", int(custom[layer])), ("stock", int(stock[layer]))):
                if count:
                    self.nonfinite.labels(**labels, kernel=kernel).inc(count)

    @staticmethod
    def _add_binned(histogram, counts: list[int]) -> None:
        """Add the device's bin counts to a histogram child. prometheus_client observes one value at a time;
        the device keeps bin counts, so they go into the child's per-bucket values (its `observe()` does the
        same per value). `_sum` gets each comparison at its bin's lower edge: a lower bound of the true sum."""
        lower_edges = (0.0,) + REL_L2_BIN_EDGES
        for index, count in enumerate(counts):
            if count:
                histogram._buckets[index].inc(count)
                histogram._sum.inc(count * lower_edges[index])
