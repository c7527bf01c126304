"""Drain the device counters into ``stats/rank-<r>.jsonl`` (a `StatsRecord` per line) and heartbeat totals.

Sums (calls, compared, non-finite counts, histogram) are written as deltas over the interval.
``rel_l2_max`` and ``max_abs`` are the maxima since the current generation was applied (device counters are
reset when a new generation is applied; a per-interval maximum would need a reset racing the compute stream,
which could lose exactly the worst value). Only layers with calls in the interval appear.
"""

from __future__ import annotations

import time

import torch

from cutover.hostprotocol.hostlayout import append_jsonl
from cutover.hostprotocol.statsrecord import LayerRecord, StatsRecord
from cutover.plugin.devicestate import (CALLS, COMPARED, HIST, MAX_ABS, REL_L2_MAX, nonfinite_custom,
                                        nonfinite_stock)


def layer_record(now_row: torch.Tensor, before_row: torch.Tensor) -> LayerRecord:
    delta = now_row - before_row
    return LayerRecord(
        calls=int(delta[CALLS]),
        compared=int(delta[COMPARED]),
        rel_l2_max=float(now_row[REL_L2_MAX]),
        rel_l2_hist=tuple(int(x) for x in delta[HIST:].tolist()),
        max_abs=float(now_row[MAX_ABS]),
        nonfinite_custom=int(nonfinite_custom(delta)),
        nonfinite_stock=int(nonfinite_stock(delta)),
    )


class StatsDrain:
    """Turns successive host copies of the counters into stats lines and running totals."""

    def __init__(self, path: str, rank: int):
        self.path = path
        self.rank = rank
        self._totals_before: torch.Tensor | None = None
        self._line_before: torch.Tensor | None = None
        self._last_at = time.time()
        self.totals = {"verify_calls": 0, "verify_steps": 0, "compared": 0, "nonfinite_custom": 0,
                       "nonfinite_stock": 0}
        self.last_verify_at: float | None = None
        self.pending_delta: torch.Tensor | None = None  # counters folded in since the exporter took them
        self.write_errors = 0  # stats lines that could not be appended (heartbeat counter stats_write_errors)
        self._pending_truth: list[dict] = []  # truth samples of lines not written yet

    def reset(self, counters: torch.Tensor) -> None:
        """The device counters were zeroed (new generation): ``counters`` is their new baseline. Truth samples
        of the old generation that no line took are dropped with it."""
        self._totals_before = counters.clone()
        self._line_before = counters.clone()
        self._last_at = time.time()
        self._pending_truth = []

    def drain(self, counters: torch.Tensor, *, mode: str, generation: int, release_id: str | None,
              kernel: str, truth: list[dict], write: bool) -> StatsRecord | None:
        """Fold a counters copy into the totals; when ``write`` (or truth samples wait) append a stats line
        covering everything since the previous line written, and return it. A line that cannot be appended
        is counted in ``write_errors`` and raised (OSError); its interval and truth samples go into the next
        line, so nothing is lost while the generation lasts."""
        truth = self._pending_truth + truth
        self._pending_truth = []
        now = time.time()
        delta = counters - (self._totals_before if self._totals_before is not None else 0)
        self._totals_before = counters
        self.pending_delta = delta if self.pending_delta is None else self.pending_delta + delta
        calls = delta[:, CALLS]
        if bool((calls > 0).any()):
            self.last_verify_at = now
            self.totals["verify_calls"] += int(calls.sum())
            self.totals["verify_steps"] += int(calls.max())  # a step calls every layer once
            self.totals["compared"] += int(delta[:, COMPARED].sum())
            self.totals["nonfinite_custom"] += int(nonfinite_custom(delta).sum())
            self.totals["nonfinite_stock"] += int(nonfinite_stock(delta).sum())
        if not write and not truth:
            return None
        before = self._line_before if self._line_before is not None else torch.zeros_like(counters)
        active = torch.nonzero(counters[:, CALLS] - before[:, CALLS] > 0).flatten().tolist()
        if not active and not truth:
            self._line_before, self._last_at = counters, now
            return None
        record = StatsRecord(
            ts=now, rank=self.rank, generation=generation, mode=mode, release_id=release_id,
            interval_s=round(now - self._last_at, 3), kernel=kernel,
            layers={str(layer): layer_record(counters[layer], before[layer]) for layer in active},
            truth=tuple(truth),
        )
        try:
            append_jsonl(self.path, record.to_json())
        except OSError:
            self.write_errors += 1
            self._pending_truth = truth
            raise
        self._line_before, self._last_at = counters, now
        return record
