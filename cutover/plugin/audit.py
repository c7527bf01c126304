"""Off-hot-path audit of sampled shadow calls: the float64 truth anchor and the worst-call captures.

Snapshots come two ways: ``offer`` copies at most one sampled eager call per ``interval_s`` from Python, and
``submit`` takes the device snapshots of ``cutover.plugin.snapshot`` (graph-replayed calls, and eager ones alike).
A background thread then computes each kernel's relative L2 error against ``reference_verify_attention`` in
float64 (the ``truth`` list of the next stats line, each sample with its ``source``: "eager" or "graph") and keeps
the snapshot in the capture store if its custom-vs-stock divergence is among the worst.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

import torch

from cutover.plugin.captures import CaptureStore, relative_l2, snapshot_bytes, snapshot_call
from cutover.plugin.devicestate import NONFINITE_SENTINEL

log = logging.getLogger("cutover.plugin")


def truth_reference(capture: dict) -> torch.Tensor:
    """The float64 reference output [N, H, Dv] of a capture's inputs (kernel_ext.reference)."""
    from kernel_ext.reference import reference_verify_attention

    a = capture["args"]
    v_buffer = a["k_buffer"][..., : a["v_extend"].shape[-1]] if a["v_buffer_is_k_view"] else a["v_buffer"]
    return reference_verify_attention(
        a["q_extend"], a["k_extend"], a["v_extend"], a["k_buffer"], v_buffer, a["qo_indptr"], a["kv_indptr"],
        a["kv_indices"], a["custom_mask"], a["is_causal"], a["mask_indptr"], a["sm_scale"], a["k_scale"],
        a["v_scale"], capture["kwargs"].get("skip_prefix_custom_mask", True), torch.float64,
    )


def truth_errors(capture: dict) -> tuple[float, float]:
    """(custom, stock) relative L2 errors of a capture against the float64 reference."""
    truth = truth_reference(capture)
    rows = int(capture["args"]["qo_indptr"][-1])
    return (relative_l2(capture["o_custom"][:rows], truth[:rows]),
            relative_l2(capture["o_stock"][:rows], truth[:rows]))


class Audit:
    """Rate-limited snapshots from the dispatcher, processed by one daemon thread."""

    def __init__(self, store: CaptureStore, rank: int, kernel_label: str, release_id: str | None,
                 interval_s: float = 1.0, max_snapshot_bytes: int = 64 << 20):
        self.store = store
        self.rank = rank
        self.kernel_label = kernel_label
        self.release_id = release_id
        self.interval_s = interval_s
        self.max_snapshot_bytes = max_snapshot_bytes
        self._next_at = 0.0
        self._queue: queue.Queue = queue.Queue(maxsize=2)
        self._truth: list[dict] = []
        self._lock = threading.Lock()
        self.skipped_too_large = 0
        self.errors = 0
        self._thread = threading.Thread(target=self._work, name="cutover-audit", daemon=True)
        self._thread.start()

    def offer(self, layer, args, kwargs, o_stock, o_custom, sample, stock_name: str = "?") -> None:
        """Called after an eager call in shadow mode; snapshots at most one sampled call per interval."""
        now = time.monotonic()
        if now < self._next_at:
            return
        self._next_at = now + self.interval_s  # so at most one device sync (reading the flag) per interval
        if not int(sample[0]):
            return
        size = snapshot_bytes(args)
        if size > self.max_snapshot_bytes:
            if not self.skipped_too_large:
                log.warning("cutover: rank %s: truth anchor skips calls whose inputs exceed %d MiB (layer %s: %d MiB); "
                            "only smaller eager verify calls are checked against float64", self.rank,
                            self.max_snapshot_bytes >> 20, layer, size >> 20)
            self.skipped_too_large += 1
            return
        capture = snapshot_call(args, kwargs, o_stock, o_custom)
        capture.update(layer=layer, stock_kernel=stock_name, source="eager")
        self.submit(capture)

    def submit(self, capture: dict) -> None:
        """Queue a snapshot (capture format, with layer, stock_kernel and source) for the audit thread; dropped
        when two are already waiting."""
        capture.update(rank=self.rank, ts=time.time(), kernel=self.kernel_label, release_id=self.release_id)
        try:
            self._queue.put_nowait(capture)
        except queue.Full:
            pass

    def take_truth(self) -> list[dict]:
        """Truth-anchor samples finished since the last call (for the stats line)."""
        with self._lock:
            taken, self._truth = self._truth, []
        return taken

    def drain(self, timeout_s: float = 30.0) -> None:
        """Wait until queued snapshots are processed (tests and clean shutdown)."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def _work(self) -> None:
        while True:
            capture = self._queue.get()
            try:
                self._process(capture)
            except Exception as exc:  # noqa: BLE001 - the audit must never take the rank down
                self.errors += 1
                log.warning("cutover: audit of a layer %s call failed: %s", capture.get("layer"), exc)
            finally:
                self._queue.task_done()

    def _process(self, capture: dict) -> None:
        rows = int(capture["args"]["qo_indptr"][-1])
        capture["rel_l2"] = relative_l2(capture["o_custom"][:rows], capture["o_stock"][:rows])
        err_custom, err_stock = truth_errors(capture)
        capture["truth"] = {"err_custom": err_custom, "err_stock": err_stock}
        with self._lock:
            self._truth.append({"layer": capture["layer"], "err_custom": _json_float(err_custom),
                                "err_stock": _json_float(err_stock), "source": capture.get("source", "eager")})
        self.store.save(capture)


def _json_float(value: float) -> float:
    """Finite floats as they are; inf/nan as the non-finite sentinel (stats lines stay strict JSON)."""
    return value if value == value and abs(value) != float("inf") else NONFINITE_SENTINEL
