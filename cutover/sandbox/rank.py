"""One sandbox rank process: the plugin attached to a stand-in backend, driven by synthetic DDTree traffic.

CPU: stock = the torch reference of SGLang's kernel, custom = the split-K reference ("reference (no GPU)"); the
steps between eager ones stand in for graph replays (no graph exists on the CPU).
GPU: stock = SGLang's real Triton kernel, custom = the real CUDA kernel, each shape's verify step (all
layers) captured once in a CUDA graph and replayed; every ``EAGER_EVERY``-th step runs eagerly so the audit
(truth anchor, captures) sees real inputs.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import signal
import time

import torch

from cutover.plugin.hooks import around_backend_init, around_forward_extend, register_hooks
from cutover.plugin.snapshot import graph_replay_standin
from cutover.sandbox.backend import StandInBackend, StandInForwardBatch, StandInLayer, StandInModelRunner
from cutover.sandbox.faults import FaultyKernels, parse_faults, read_fault_spec
from cutover.sandbox.speculative import SpeculativeStats
from kernel_ext.cudagraph import capture_graph

log = logging.getLogger("cutover.sandbox")

STANDIN_PATH = "cutover.sandbox.backend.StandInBackend"
HEADS_PER_RANK = 8
EAGER_EVERY = 10
FAULT_CHECK_S = 1.0


def attach_plugin() -> str:
    """Register the plugin's hooks on StandInBackend the way SGLang loads them; returns how."""
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry
    except ImportError:
        for name, hook in (("__init__", around_backend_init), ("forward_extend", around_forward_extend)):
            original = getattr(StandInBackend, name)
            setattr(StandInBackend, name, functools.wraps(original)(
                lambda *a, _o=original, _h=hook, **k: _h(_o, *a, **k)))
        return "hooks applied directly (SGLang's HookRegistry is not installed here)"
    register_hooks(HookRegistry, backend_path=STANDIN_PATH)
    HookRegistry.apply_hooks()
    return "hooks applied through sglang.srt.plugins.hook_registry.HookRegistry"


def stock_kernel(device: torch.device):
    if device.type == "cuda":
        from cutover.plugin.hooks import resolve_stock_kernel

        return resolve_stock_kernel()[0]
    from kernel_ext.reference import reference_extend_attention_fwd

    return reference_extend_attention_fwd


class Traffic:
    """Random DDTree verify batches: mixed prefix lengths, batch sizes and tree sizes."""

    def __init__(self, device: torch.device, seed: int, dtype: torch.dtype):
        self.device = device
        self.rng = random.Random(seed)
        self.dtype = dtype
        self.cpu = device.type == "cpu"

    def shape(self) -> dict:
        if self.cpu:
            batch = self.rng.choice([1, 2, 3])
            return dict(T=self.rng.choice([4, 8, 16]), batch=batch,
                        prefix_lens=[self.rng.randint(8, 192) for _ in range(batch)])
        batch = self.rng.choice([1, 4, 8])
        return dict(T=self.rng.choice([8, 16]), batch=batch,
                    prefix_lens=[self.rng.randint(256, 4096) for _ in range(batch)])

    def batch(self, shape: dict | None = None):
        from kernel_ext.testing import make_verify_batch

        shape = shape or self.shape()
        extra = {} if self.cpu else dict(qo_indptr_dtype=torch.int64, mask_dtype=torch.uint8)
        return make_verify_batch(HEADS_PER_RANK, shape["T"], shape["batch"], shape["prefix_lens"], mask="tree",
                                 dtype=self.dtype, device=self.device, seed=self.rng.randrange(2**31),
                                 nan_unused_rows=False, **extra)


class RankWorker:
    """Builds the stand-in backend (plugin attached by its hooks) and runs verify steps until stopped."""

    def __init__(self, rank: int, device: str, layers: int, step_interval_s: float, state_dir: str, seed: int):
        self.rank = rank
        self.device = torch.device(device)
        self.layers = [StandInLayer(i) for i in range(layers)]
        self.step_interval_s = step_interval_s
        self.state_dir = state_dir
        self.how = attach_plugin()
        self.backend = StandInBackend(StandInModelRunner(rank, self.device, stock_kernel(self.device)))
        dispatcher = getattr(self.backend, "_cutover_dispatcher", None)
        self.runtime = dispatcher.runtime if dispatcher is not None else None
        self.faults = None
        if self.runtime is not None and self.runtime.active:
            self.faults = FaultyKernels(self.runtime.kernels, self.device, rank)
            self.runtime.kernels = self.faults
        self.fault_spec = ""
        self._next_fault_check = 0.0
        self.traffic = Traffic(self.device, seed + rank, torch.bfloat16)
        self.speculative = SpeculativeStats(seed) if rank == 0 else None  # one rank speaks for the server
        self.steps = 0

    def check_faults(self) -> None:
        now = time.monotonic()
        if self.faults is None or now < self._next_fault_check:
            return
        self._next_fault_check = now + FAULT_CHECK_S
        spec = read_fault_spec(self.state_dir)
        if spec == self.fault_spec:
            return
        self.fault_spec = spec
        try:
            self.faults.set_faults(parse_faults(spec))
            log.warning("sandbox rank %s: fault injection now %r", self.rank, spec or "off")
        except ValueError as exc:
            log.error("sandbox rank %s: %s (faults unchanged)", self.rank, exc)

    def step(self, batch) -> None:
        """One target-verify forward: every layer's attention through the (hooked) backend."""
        forward_batch = StandInForwardBatch(batch)
        for layer in self.layers:
            q = batch.q if layer.layer_id == 0 else batch.q * (1.0 + 0.03 * layer.layer_id)
            self.backend.forward_extend(q, batch.k_extend, batch.v_extend, layer, forward_batch)

    def run_cpu(self, stop) -> None:
        """Without a GPU there is no graph: every step but each ``EAGER_EVERY``-th stands in for a replay
        (cutover.plugin.snapshot.graph_replay_standin), so the truth anchor takes it through the device-snapshot
        path, as on the GPU."""
        while not stop():
            self.check_faults()
            eager = self.steps % EAGER_EVERY == 0
            shape = self.traffic.shape()
            with contextlib.nullcontext() if eager else graph_replay_standin():
                self.step(self.traffic.batch(shape))
            self.served(shape)
            self.steps += 1
            time.sleep(self.step_interval_s)

    def run_cuda(self, stop) -> None:
        graphs = [self._capture(self.traffic.shape()) for _ in range(3)]
        while not stop():
            self.check_faults()
            graph, batch, shape = graphs[self.steps % len(graphs)]
            batch.q.normal_()
            if self.steps % EAGER_EVERY == 0:
                self.step(batch)
            else:
                graph.replay()
            torch.cuda.current_stream().synchronize()
            self.served(shape)
            self.steps += 1
            time.sleep(self.step_interval_s)

    def served(self, shape: dict) -> None:
        """Count the verify step of `shape` in the server's speculative series (on the rank that keeps them)."""
        if self.speculative is not None:
            self.speculative.record(shape["T"], shape["batch"])

    def _capture(self, shape: dict):
        batch = self.traffic.batch(shape)
        return capture_graph(lambda: self.step(batch)), batch, shape


def run_rank(rank: int, device: str, layers: int, step_interval_s: float, state_dir: str, seed: int = 0) -> int:
    """Entry of a rank process (``python -m cutover.sandbox rank``); SIGTERM ends it cleanly."""
    torch.set_num_threads(1)  # a good neighbour: the sandbox shares the machine
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    worker = RankWorker(rank, device, layers, step_interval_s, state_dir, seed)
    label = worker.runtime.kernel_label if worker.runtime else "none"
    log.warning("sandbox rank %s up: %s; custom path: %s; %d layers", rank, worker.how, label, len(worker.layers))
    if worker.device.type == "cuda":
        worker.run_cuda(lambda: bool(stopping))
    else:
        worker.run_cpu(lambda: bool(stopping))
    if worker.runtime is not None:
        worker.runtime.stop()
    log.warning("sandbox rank %s stopped after %d steps", rank, worker.steps)
    return 0
