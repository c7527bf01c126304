"""What the engine tests run inside the interpreter worker (tests/sglang_engine/conftest.py): each builds SGLang's
real objects (engine.py), drives them through the plugin's modes with its control thread live, and returns plain
data (errors against the float64 truth, per-layer counters, what SGLang's kernel was given) for the test to
judge."""

from __future__ import annotations


from armed import armed_record
from cutover.hostprotocol.hostlayout import ControlRecord, HostPaths, atomic_write_text, read_heartbeat
from cutover.plugin import hooks
from cutover.plugin.devicestate import CALLS, COMPARED, REL_L2_MAX, SERVED
from sglang_engine.engine import (StockSpy, build_engine, capture_verify_metadata, forward_captured, load_replay,
                                  run_step, verify_step, wait_for_mode)

RANK = 0
# (prefixes, draft tokens per request): mixed prefixes with a zero one, trees up to the kernel's 64 tokens
STEPS = (((0, 13), 64), ((5, 0, 2), 16))


def paths() -> HostPaths:
    return hooks.host_paths_from_env()


def request(mode: str, sample_rate: int = 1) -> int:
    """control.json as the CLI writes it (atomically, a live lease, the next generation); waits until the rank
    runs ``mode``. Returns the generation."""
    try:
        with open(paths().control) as handle:
            generation = ControlRecord.from_json(handle.read()).generation + 1
    except FileNotFoundError:
        generation = 1
    record = armed_record(mode, generation, lease_s=120.0, sample_rate=sample_rate, set_by="engine-test")
    atomic_write_text(paths().control, record.to_json())
    wait_for_mode(paths(), RANK, mode, generation)
    return generation


def layer_counters(layers: int) -> dict:
    counters = hooks._runtime.state.read_counters()
    return {layer: {"calls": int(counters[layer, CALLS]), "served": int(counters[layer, SERVED]),
                    "compared": int(counters[layer, COMPARED]), "rel_l2_max": float(counters[layer, REL_L2_MAX])}
            for layer in range(layers)}


def run_steps(engine, steps=STEPS, seed: int = 1) -> float:
    """Every step through SGLang's backend; the largest error against the float64 truth over all of them."""
    worst = 0.0
    for prefixes, drafts in steps:
        step = verify_step(engine, prefixes, drafts, seed)
        outputs = run_step(engine, step)
        worst = max(worst, *((outputs[layer].double() - step.expected[layer]).abs().max().item()
                             for layer in outputs))
    return worst


def modes_round_trip() -> dict:
    """triton -> shadow -> custom -> triton on one target backend: per mode, the error, the per-layer counters,
    the qo_indptr SGLang's kernel got, and the heartbeat."""
    engine = build_engine((0, 13), 64, max_requests=3)
    spy = StockSpy(engine.backend)
    results = {"extend_attention_fwd": type(engine.backend.extend_attention_fwd).__name__,
               "dispatcher": type(getattr(engine.backend, "_cutover_dispatcher", None)).__name__, "modes": []}
    for mode in ("triton", "shadow", "custom", "triton"):
        request(mode)
        error = run_steps(engine)
        results["modes"].append({"mode": mode, "error": error, "counters": layer_counters(engine.layers),
                                 "stock_qo_indptrs": spy.take(),
                                 "heartbeat_mode": read_heartbeat(paths().heartbeat(RANK)).mode_active})
    return results


def draft_verify_beside_target() -> dict:
    """A draft worker's TritonAttnBackend (same layer ids as the target's) runs TARGET_VERIFY in shadow: what the
    plugin counted for it, then for the target."""
    target = build_engine((0, 13), 64, max_requests=3)
    draft = build_engine((0, 13), 64, max_requests=3, draft_worker=True)
    request("shadow")
    before = layer_counters(target.layers)
    draft_error = run_steps(draft, steps=STEPS[:1])
    after_draft = layer_counters(target.layers)
    target_error = run_steps(target, steps=STEPS[:1])
    return {"draft_kernel_wrapped": hasattr(draft.backend, "_cutover_dispatcher"), "draft_error": draft_error,
            "target_error": target_error, "before": before, "after_draft": after_draft,
            "after_target": layer_counters(target.layers)}


GRAPH_CAPTURE_BS, GRAPH_DRAFTS = 4, 16
GRAPH_REPLAYS = ((0, 70, 33), (90, 0))  # real requests per replay, each padded to GRAPH_CAPTURE_BS


def graph_metadata_round_trip() -> dict:
    """SGLang's CUDA-graph metadata path for target verify without a graph (the CPU has none): the capture metadata
    of a full batch, then per mode a padded step of another size loaded as the graph runner loads one and every
    layer run over the captured batch, as a replay runs it. Per mode: the error of the real rows against the float64
    truth, the per-layer counter deltas, and whether SGLang's kernel got the backend's qo_indptr (or, in custom,
    an empty extend)."""
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    engine = build_engine((0,) * GRAPH_CAPTURE_BS, GRAPH_DRAFTS, max_requests=GRAPH_CAPTURE_BS,
                          max_context_len=128, cuda_graph=True)
    spy = StockSpy(engine.backend)
    request("triton")
    with forward_context(ForwardContext(attn_backend=engine.backend)):
        captured = capture_verify_metadata(engine, GRAPH_CAPTURE_BS, GRAPH_DRAFTS)
    results = []
    for index, mode in enumerate(("triton", "shadow", "custom", "triton")):
        request(mode)
        prefixes = GRAPH_REPLAYS[index % 2]
        before = layer_counters(engine.layers)
        with forward_context(ForwardContext(attn_backend=engine.backend)):
            step = load_replay(engine, captured, prefixes, seed=index + 2)
            outputs = forward_captured(engine, captured)
        rows = len(prefixes) * GRAPH_DRAFTS
        after = layer_counters(engine.layers)
        metadata_qo = engine.backend.forward_metadata.qo_indptr.tolist()
        results.append({
            "mode": mode,
            "error": max((outputs[layer][:rows].double() - step.expected[layer][:rows]).abs().max().item()
                         for layer in outputs),
            "delta": {layer: {key: after[layer][key] - before[layer][key] for key in ("calls", "served", "compared")}
                      for layer in after},
            "stock_qo_indptrs": spy.take(), "metadata_qo_indptr": metadata_qo,
        })
    return {"qo_dtype": str(engine.backend.forward_metadata.qo_indptr.dtype), "modes": results}
