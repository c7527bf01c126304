"""One rank's plugin runtime: device state, kernels, control thread, stats drain, audit, heartbeat."""

from __future__ import annotations

import atexit
import logging
import os
import socket
import time

import torch

from cutover.hostprotocol.hostlayout import Heartbeat, HostPaths, atomic_write_text
from cutover.plugin.audit import Audit
from cutover.plugin.captures import CaptureStore
from cutover.plugin.control import ControlLoop, ControlState, Decision
from cutover.plugin.devicestate import DeviceState, isolate_from_other_threads_captures
from cutover.plugin.buffers import GrowOnlyBuffers
from cutover.plugin.dispatch import VerifyDispatcher
from cutover.plugin.hooks import refusal_reason, sglang_version
from cutover.plugin.kernels import CUDA_LABEL, REFERENCE_LABEL, KernelUnavailable, select_kernels
from cutover.plugin.metrics import rank_metrics
from cutover.plugin.snapshot import GraphSnapshots
from cutover.plugin.stats import StatsDrain
from cutover.servingstack import serving_stack

log = logging.getLogger("cutover.plugin")

DRAIN_INTERVAL_S = 1.0
IDLE_STATS_INTERVAL_S = 60.0  # triton/custom: calls-only lines this often; shadow: every drain


def current_release(paths: HostPaths) -> tuple[str | None, str | None]:
    """(release_id, release_dir) that ``<cutover_root>/current`` points to, or (None, None)."""
    if not os.path.islink(paths.current) and not os.path.isdir(paths.current):
        return None, None
    target = os.path.realpath(paths.current)
    return os.path.basename(target), target


def _reported_stack(device: torch.device) -> dict:
    """The serving stack for the heartbeat; what cannot be read is said in it (never raises: the plugin must not
    stop a rank for a heartbeat field, and promote refuses a stack that does not match its verdict's)."""
    try:
        return serving_stack(device, sglang_version())
    except Exception as exc:  # noqa: BLE001 - reported, never fatal
        log.warning("cutover: the serving stack could not be read: %s: %s", type(exc).__name__, exc)
        return {"error": f"{type(exc).__name__}: {exc}"}


class PluginRuntime:
    """Everything the plugin does in one rank process. ``active`` is False when the custom path cannot run
    (the reason is logged once and kept in the heartbeat); the dispatcher then passes every call through."""

    def __init__(self, paths: HostPaths, rank: int, device: torch.device | str, *,
                 kernels=None, poll_s: float | None = None, audit_interval_s: float = 1.0, unavailable: str = ""):
        self.paths = paths
        self.rank = rank
        self.device = torch.device(device)
        self.host = socket.gethostname()
        self.release_id, release_dir = current_release(paths)
        # `unavailable` given: no kernel is loaded, this process refuses custom for that reason
        if kernels is None and not unavailable:
            try:
                kernels = select_kernels(self.device, release_dir)
            except KernelUnavailable as exc:
                unavailable = str(exc)
        if unavailable:
            kernels = None
            log.warning("cutover: rank %s stays on Triton: %s", rank, unavailable)
        self.kernels = kernels
        self.kernel_label = kernels.label if kernels else (CUDA_LABEL if self.device.type == "cuda"
                                                           else REFERENCE_LABEL)
        self.active = kernels is not None
        self.state = DeviceState(self.device) if self.active else None
        self.buffers = GrowOnlyBuffers()
        self.audit = Audit(CaptureStore(paths.captures, rank), rank, self.kernel_label, self.release_id,
                           interval_s=audit_interval_s)
        self.stats = StatsDrain(paths.stats_file(rank), rank)
        self.metrics = rank_metrics(paths.state_dir, self.host, rank)
        self.snapshots = GraphSnapshots(self.device, self.audit, interval_s=audit_interval_s) if self.active else None
        self.problems: dict[str, int] = {}
        self.fallback_shapes: set[tuple] = set()
        loop_args = {} if poll_s is None else {"poll_s": poll_s}
        if self.state is not None and self.device.type == "cuda":
            loop_args["prepare_thread"] = isolate_from_other_threads_captures  # SGLang captures meanwhile
        self.control = ControlLoop(paths, rank, self._apply, self._tick, **loop_args)
        self.control.state.unavailable = unavailable
        self.control.state.release_id = self.release_id
        self.control.state.stack = _reported_stack(self.device)
        self._next_drain = 0.0
        self._next_idle_line = 0.0
        self._started = False

    # -- hot-path helpers (called at capture time or on eager calls only) ------------------------------
    def wrap(self, stock) -> VerifyDispatcher:
        return VerifyDispatcher(stock, self)

    def note_problem(self, message: str) -> None:
        count = self.problems.get(message, 0)
        self.problems[message] = count + 1
        if count == 0:
            log.warning("cutover: rank %s: %s", self.rank, message)

    @property
    def stack(self) -> dict:
        """The serving stack this process runs: in every heartbeat, and what a custom request is checked against."""
        return self.control.state.stack

    @property
    def unavailable(self) -> str:
        """Why this process cannot serve custom ("" while it can); the control state refuses requests with it."""
        return self.control.state.unavailable

    def refuse(self, reason: str) -> None:
        """Never serve custom in this process from now on (the plugin cannot hook or read SGLang's verify calls
        here): calls pass straight to SGLang's kernel, the control thread runs triton, and a shadow or custom
        request is refused with ``reason`` in the heartbeat, as for a kernel that cannot load."""
        if not reason or reason in self.unavailable:
            return
        self.control.state.unavailable = f"{self.unavailable}; {reason}" if self.unavailable else reason
        self.active = False
        log.warning("cutover: rank %s stays on Triton: %s", self.rank, reason)

    def refuse_unreadable(self, problem: str) -> None:
        """A verify call (or its hook) in a form the plugin cannot read: SGLang serves it; noted (logged once,
        heartbeat ``errors``), and the first such problem becomes the reason this process refuses custom."""
        self.note_problem(problem)
        if self.active:
            self.refuse(refusal_reason(problem))

    def snapshot_call(self, layer: int, slots, args, kwargs, o, scratch, stock_name: str) -> None:
        """The gated device snapshot of a served verify call (cutover/plugin/snapshot.py); a failure turns the
        snapshots off for this process (noted), never the call."""
        snapshots = self.snapshots
        if snapshots is None or snapshots.disabled:
            return
        try:
            snapshots.launch(layer, slots, args, kwargs, o, scratch, stock_name)
        except Exception as exc:  # noqa: BLE001 - the truth anchor never fails a served step
            snapshots.disabled = f"the snapshot launch raised {type(exc).__name__}: {exc}"
            self.note_problem(f"graph truth-anchor snapshots off: {snapshots.disabled}")

    def note_fallback_shape(self, shape: tuple, dtype) -> None:
        key = (shape, str(dtype))
        if key not in self.fallback_shapes:
            self.fallback_shapes.add(key)
            log.info("cutover: rank %s: call shape %s %s not served by the custom kernel; Triton serves it",
                     self.rank, shape, dtype)

    # -- control thread -----------------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self.control.start()
        atexit.register(self.stop, orderly=False)

    def stop(self, orderly: bool = True) -> None:
        """Stop: last stats and heartbeat written. An orderly stop (an explicit call: the sandbox's SIGTERM, a
        test) also goes back to triton and removes the armed marker. Reaching interpreter exit without one
        (atexit) is not orderly: SGLang's scheduler returns normally after an exception it caught, so the marker
        stays and the next process comes up on Triton until a newer generation, as after a SIGKILL."""
        if not self._started:
            return
        self._started = False
        why = "process exited" if orderly else "process exited without an orderly stop; armed marker kept"
        try:
            self.control.stop(clean=orderly)
            self.drain(write=True)
            self._write_heartbeat(self.control.state, Decision(self.control.mode_active, 1, why), stopped=True)
        except Exception as exc:  # noqa: BLE001 - at exit: the armed marker (if any) stays, the safe side
            log.warning("cutover: rank %s did not stop cleanly: %s: %s", self.rank, type(exc).__name__, exc)

    def _apply(self, decision: Decision, new_generation: bool) -> None:
        if new_generation and self.state is not None:
            self._drain_noting_failures(write=True)  # close the old generation's interval before its reset
        if self.state is not None:
            self.state.set_mode(decision.mode, decision.sample_rate, reset_counters=new_generation)
            if new_generation:
                self.stats.reset(self.state.read_counters())
        log.info("cutover: rank %s now %s (generation %s)%s", self.rank, decision.mode,
                 self.control.state.generation_seen, f": {decision.reason}" if decision.reason else "")

    def _tick(self, state: ControlState, decision: Decision) -> None:
        """Take graph snapshots, drain when due, then heartbeat: the heartbeat is written whatever the rest did."""
        now = time.monotonic()
        try:
            self._snapshot_tick()
            if now >= self._next_drain:
                self._next_drain = now + DRAIN_INTERVAL_S
                idle_line = now >= self._next_idle_line
                if idle_line:
                    self._next_idle_line = now + IDLE_STATS_INTERVAL_S
                self._drain_noting_failures(write=self.control.mode_active == "shadow" or idle_line)
                self._export_metrics(state)
        finally:
            self._write_heartbeat(state, decision)

    def _export_metrics(self, state: ControlState) -> None:
        """Update the rank's Prometheus series; a failure is noted (logged once), never raised."""
        if self.metrics is None:
            return
        delta, self.stats.pending_delta = self.stats.pending_delta, None
        try:
            self.metrics.update(self.control.mode_active, self.control.applied_generation, state.lease_expires_at,
                                state.lease_expiries, delta)
        except Exception as exc:  # noqa: BLE001 - the series are for operators; serving goes on without them
            self.note_problem(f"the Prometheus series could not be updated: {type(exc).__name__}: {exc}")

    def _snapshot_tick(self) -> None:
        """Arm, poll and take the device snapshots (cutover/plugin/snapshot.py) from the control thread; a failure
        is counted in ``audit_errors`` and noted, never raised."""
        if self.snapshots is None:
            return
        try:
            self.snapshots.tick(shadow=self.control.mode_active == "shadow")
        except Exception as exc:  # noqa: BLE001 - the truth anchor never stops the control thread
            self.audit.errors += 1
            self.note_problem(f"a graph truth-anchor snapshot failed: {type(exc).__name__}: {exc}")

    def _drain_noting_failures(self, write: bool) -> None:
        """drain(), where a stats line that cannot be written (a full disk) or a drain that fails is noted, never
        raised: the next line covers its interval, the heartbeat counts it, and a mode switch goes ahead."""
        try:
            self.drain(write=write)
        except OSError as exc:
            self.note_problem(f"a stats line could not be written: {exc}")
        except Exception as exc:  # noqa: BLE001 - the heartbeat and the mode switch must not depend on a drain
            self.note_problem(f"the stats drain failed: {type(exc).__name__}: {exc}")

    def drain(self, write: bool) -> None:
        """Fold the device counters into the totals; append a stats line when ``write``."""
        if self.state is None:
            return
        self.stats.drain(self.state.read_counters(), mode=self.control.mode_active,
                         generation=max(self.control.applied_generation, 0), release_id=self.release_id,
                         kernel=self.kernel_label, truth=self.audit.take_truth(), write=write)

    def heartbeat(self, state: ControlState, decision: Decision, stopped: bool = False) -> Heartbeat:
        reason = decision.reason
        if not self.active and not reason:
            reason = f"custom path unavailable: {self.unavailable}"
        counters = dict(self.stats.totals)
        counters.update(
            fallback_shapes=len(self.fallback_shapes), errors=len(self.problems),  # distinct problems
            captures=self.audit.store.saved, audit_errors=self.audit.errors,
            stats_write_errors=self.stats.write_errors,
            unclean_restart=int(state.refuse_up_to is not None), stopped=int(stopped),
        )
        return Heartbeat(
            rank=self.rank, pid=os.getpid(), host=self.host, mode_active=self.control.mode_active,
            generation_seen=state.generation_seen, release_id=self.release_id, kernel=self.kernel_label,
            reason=reason, last_verify_at=self.stats.last_verify_at, counters=counters, written_at=time.time(),
            stack=self.stack,
        )

    def _write_heartbeat(self, state: ControlState, decision: Decision, stopped: bool = False) -> None:
        atomic_write_text(self.paths.heartbeat(self.rank), self.heartbeat(state, decision, stopped).to_json())
