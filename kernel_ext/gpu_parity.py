"""GPU parity of the CUDA verify kernel: against a float64 reference and against SGLang's Triton kernel.

    python -m kernel_ext.gpu_parity [--subset tiny|quick|full] [--no-triton] [--json PATH]

Every case draws fresh random inputs on the device, scatters the prefix rows over a KV pool twice as large
whose unused rows are NaN, fills the mask's prefix columns (never read) with random bits and poisons both
outputs with NaN. A case passes when the kernel served it, wrote every output element (no NaN left) and its
relative L2 error against float64 is at most 1.25x SGLang Triton's own error on the same inputs (without
Triton: at most 1e-2). Also checks the live-switch pieces: enable=0 writes nothing, verify_gate's modes and
counter, a CUDA-graph capture replayed on new data and with the gate closed, and calls back to back with early
start (eager and in a graph) against the same calls in plain stream order.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time

import torch

from kernel_ext import api
from kernel_ext.reference import reference_verify_attention
from kernel_ext.testing import VerifyBatch, compare, make_verify_batch

TRITON_RATIO = 1.25      # our error vs float64 may be at most this times Triton's
ABS_BOUND_NO_TRITON = 1e-2
GRID_H = (8, 16)
GRID_T = (1, 2, 8, 16, 32, 64)
GRID_BATCH = (1, 3, 8, 32)
GRID_PREFIX = (0, 1, 7, 1000, 5000, 32768)
MASKS = ("tree", "chain", "causal")
# Batches of more requests than a wave holds work items (16 x 16 rows: 33 on 132 SMs; 8 x 16 rows: 66): one long
# request among short ones (the plan's waves of splits), and lengths spread over 0-9000 keys (one split each).
LONG_AMONG_SHORT = [6000] + [200] * 39


def spread_lengths(batch: int) -> list[int]:
    """Prefix lengths of `batch` requests spread over 0-9000 keys."""
    return [(i * 7919) % 9000 for i in range(batch)]


SPREAD_LENGTHS = spread_lengths(80)
# over 128 requests: the longest-first order keeps the first 128 requests' keys in registers, computes the rest
SPREAD_LENGTHS_LONG = spread_lengths(160)


def long_among(batch: int, long_at: tuple[int, ...], long_keys: int, short_keys: int) -> list[int]:
    """Prefix lengths of `batch` requests: `long_keys` at the positions `long_at`, `short_keys` elsewhere."""
    return [long_keys if b in long_at else short_keys for b in range(batch)]


# Long requests among many short ones where the combine's layout merges few splits per request (8 x 8 rows on 132
# SMs: two for 64 requests, six for 20): their many splits take the combine's long-request pass, which finds them
# 1024 requests at a time (lanes hold requests 32 apart, hence positions 0, 37, 63 and 1050).
LONG_AMONG_64 = long_among(64, (0, 37, 63), 60000, 200)
LONG_AMONG_20 = long_among(20, (11,), 60000, 300)
LONG_PAST_1024 = long_among(1100, (5, 1050), 30000, 10)


def load_sglang_triton():
    """SGLang's extend_attention_fwd (0.5.16+ layout, then the older one), or None when not importable."""
    for name in ("sglang.kernels.ops.attention.extend_attention",
                 "sglang.srt.layers.attention.triton_ops.extend_attention"):
        try:
            module = __import__(name, fromlist=["extend_attention_fwd"])
            return module.extend_attention_fwd
        except ImportError:
            continue
    return None


def make_case(H: int, T: int, batch: int, prefix, mask: str = "tree", index_dtype=torch.int64, *,
              device="cuda", **options) -> VerifyBatch:
    """A random bf16 target-verify batch on the device (kernel_ext.testing.make_verify_batch)."""
    return make_verify_batch(H, T, batch, prefix, mask, index_dtype, dtype=torch.bfloat16, device=device, **options)


def run_case(case: VerifyBatch, triton_fwd, label: dict) -> dict:
    """Run ours, Triton and float64 on one case; the verdict with both errors."""
    ref = reference_verify_attention(**case.verify_kwargs(), compute_dtype=torch.float64)
    ours = case.fresh_output()
    served = api.verify_attention(*case.args(ours))
    torch.cuda.synchronize()
    c_ours = compare(ours, ref)
    row = dict(label, served=served, err_ours=c_ours.rel_l2, max_abs_ours=c_ours.max_abs,
               nonfinite_ours=c_ours.nonfinite_actual, err_triton=None)
    if triton_fwd is not None:
        tri = case.fresh_output()
        scale_args = case.args(tri)
        triton_fwd(*scale_args)
        torch.cuda.synchronize()
        c_tri = compare(tri, ref)
        row.update(err_triton=c_tri.rel_l2, nonfinite_triton=c_tri.nonfinite_actual)
        bound = TRITON_RATIO * c_tri.rel_l2
    else:
        bound = ABS_BOUND_NO_TRITON
    row["passed"] = bool(served and c_ours.nonfinite_actual == 0 and c_ours.rel_l2 <= bound)
    if not row["passed"]:
        row["detail"] = c_ours.describe()
    return row


def _case(h: int, t: int, batch: int, prefix, mask: str, index_dtype=torch.int64, *, seed: int,
          shown: dict | None = None, **options):
    """(label, builder) of one case: the label names its grid fields, with `shown` replacing or adding some."""
    label = {**dict(H=h, T=t, batch=batch, prefix=prefix, mask=mask, index=str(index_dtype).split(".")[-1]),
             **(shown or {})}
    return label, lambda: make_case(h, t, batch, prefix, mask, index_dtype, seed=seed, **options)


def grid_cases(subset: str):
    """(label, builder) pairs: the issue's grid (full), a representative slice (quick) or a tiny set."""
    if subset == "tiny":
        # the last: 128 rows of one request with ~60 splits, the combine's long batch in CombineLongSplitsMoreRows
        shapes = [(8, 1, 1, 0), (8, 8, 3, 7), (16, 16, 2, 300), (8, 64, 1, 1000), (16, 8, 1, 8000)]
    elif subset == "quick":
        shapes = [(h, t, b, p) for h, t, b, p in itertools.product(GRID_H, GRID_T, GRID_BATCH, GRID_PREFIX)
                  if (h * 7 + t * 3 + b * 5 + p) % 9 == 0 or (b == 1 and p == 32768)]
    else:
        shapes = list(itertools.product(GRID_H, GRID_T, GRID_BATCH, GRID_PREFIX))
    for i, (h, t, b, p) in enumerate(shapes):
        yield _case(h, t, b, p, MASKS[i % 3], torch.int64 if (i // 3) % 2 == 0 else torch.int32, seed=i)
    mixed, spread = dict(prefix="mixed"), dict(prefix="spread")
    scales = dict(k_scale=0.7, v_scale=1.3)
    extras = [
        _case(8, 8, 6, [0, 1, 7, 1000, 5000, 130], "tree", seed=1001, shown=mixed),
        _case(8, 4, 70, [(i * 397) % 2600 for i in range(70)], "tree", seed=1010, shown=mixed),
        _case(16, 64, 5, [4097, 0, 63, 20000, 9], "tree", torch.int32, seed=1002, shown=mixed),
        # one long request among more requests than a wave holds CTAs: the plan's waves of splits
        _case(16, 16, len(LONG_AMONG_SHORT), LONG_AMONG_SHORT, "tree", seed=1012, shown=mixed),
        # more requests than a wave holds work items, lengths spread: one split each, in waves
        _case(8, 16, len(SPREAD_LENGTHS), SPREAD_LENGTHS, "tree", torch.int32, seed=1013, shown=spread),
        _case(8, 16, len(SPREAD_LENGTHS_LONG), SPREAD_LENGTHS_LONG, "tree", seed=1014, shown=spread),
        # long requests among many short ones: the combine's long-request pass
        _case(8, 8, len(LONG_AMONG_64), LONG_AMONG_64, "tree", seed=1015, shown=dict(prefix="3 long")),
        _case(8, 8, len(LONG_AMONG_20), LONG_AMONG_20, "chain", torch.int32, seed=1016, shown=dict(prefix="1 long")),
        _case(8, 1, len(LONG_PAST_1024), LONG_PAST_1024, "causal", seed=1017, shown=dict(prefix="2 long")),
        _case(8, 16, 3, 500, "tree", mask_dtype=torch.int8, seed=1003, shown=dict(mask="tree-int8")),
        _case(8, 16, 3, 500, "tree", mask_dtype=torch.uint8, seed=1004, shown=dict(mask="tree-uint8")),
        _case(16, 8, 4, 777, "tree", q_row_padding=64, seed=1005, shown=dict(q="padded")),
        _case(8, 16, 4, 900, "tree", qo_indptr_dtype=torch.int64, kv_indptr_dtype=torch.int64,
              mask_dtype=torch.uint8, seed=1008, shown=dict(graph_dtypes="int64 indptr, uint8 mask")),
        _case(8, 8, 2, 3000, "tree", **scales, seed=1006, shown=dict(scales="0.7/1.3")),
        _case(16, 16, 3, 2000, "tree", torch.int32, **scales, seed=1009, shown=dict(scales="0.7/1.3")),
        _case(8, 8, 2, 3000, "causal", is_causal=False, seed=1007, shown=dict(is_causal=False)),
        # 33 splits per request on 132 SMs: the combine merges a lane's 8-9 splits in one batch of 9
        _case(8, 8, 4, 16384, "tree", seed=1011),
    ]
    # tiny keeps the two mixed-prefix cases: the second has more requests than the plan's warp has lanes
    yield from (extras if subset != "tiny" else extras[:2])


def check_enable_gate() -> list[dict]:
    """enable=0 leaves o untouched bit for bit; enable=1 writes it; verify_gate's three modes."""
    rows = []
    case = make_case(8, 8, 2, 600, "tree", seed=7)
    out = case.fresh_output()
    closed = torch.zeros(1, dtype=torch.int32, device="cuda")
    api.verify_attention(*case.args(out), enable=closed)
    torch.cuda.synchronize()
    rows.append(dict(check="enable=0 writes nothing", passed=bool(torch.isnan(out).all())))
    opened = torch.ones(1, dtype=torch.int32, device="cuda")
    out_open, out_plain = case.fresh_output(), case.fresh_output()
    api.verify_attention(*case.args(out_open), enable=opened)
    api.verify_attention(*case.args(out_plain))
    torch.cuda.synchronize()
    rows.append(dict(check="enable=1 equals no gate", passed=bool(torch.equal(out_open, out_plain))))

    for dtype in (torch.int32, torch.int64):
        qo = torch.tensor([0, 8, 16, 24], dtype=dtype, device="cuda")
        gated = torch.full_like(qo, -5)
        enable = torch.full((2,), -1, dtype=torch.int32, device="cuda")
        seen, ok = [], True
        for mode, every, calls in ((0, 1, 2), (1, 3, 7), (2, 1, 2)):
            state = torch.tensor([mode, every, 0, 0], dtype=torch.int32, device="cuda")
            for call in range(calls):
                api.verify_gate(state, qo, gated, enable)
                e = enable.tolist()
                want = [int(mode == 2), int(mode == 1 and call % every == 0)]
                want_qo = [0] * 4 if mode == 2 else qo.tolist()
                ok &= e == want and gated.tolist() == want_qo
                seen.append((mode, call, e))
            ok &= int(state[2]) == calls
        rows.append(dict(check=f"verify_gate modes ({str(dtype).split('.')[-1]} indptr)", passed=bool(ok)))
    return rows


def check_graph_replay() -> list[dict]:
    """Captured once: replays follow new inputs and the device-side enable flag without recapture."""
    case = make_case(16, 16, 3, 2000, "tree", seed=11)
    enable = torch.ones(1, dtype=torch.int32, device="cuda")
    workspace = torch.empty(api.workspace_bytes(3, 16, 16), dtype=torch.uint8, device="cuda")
    out = case.fresh_output()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up (kernel attributes) outside the capture
        api.verify_attention(*case.args(out), enable=enable, workspace=workspace)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        api.verify_attention(*case.args(out), enable=enable, workspace=workspace)
    rows = []
    out.fill_(math.nan)
    graph.replay()
    eager = case.fresh_output()
    api.verify_attention(*case.args(eager))
    torch.cuda.synchronize()
    rows.append(dict(check="graph replay equals eager", passed=bool(torch.equal(out, eager))))
    case.q.copy_(torch.randn_like(case.q, dtype=torch.float32).to(torch.bfloat16))
    case.kv_indptr.copy_(torch.tensor([0, 5, 2005, 3000], dtype=torch.int32, device="cuda"))  # new split plan
    graph.replay()
    eager = case.fresh_output()
    api.verify_attention(*case.args(eager))
    torch.cuda.synchronize()
    rows.append(dict(check="replay follows new q and kv_indptr", passed=bool(torch.equal(out, eager))))
    enable.zero_()
    out.fill_(math.nan)
    graph.replay()
    torch.cuda.synchronize()
    rows.append(dict(check="replay with enable=0 writes nothing", passed=bool(torch.isnan(out).all())))
    enable.fill_(1)
    graph.replay()
    torch.cuda.synchronize()
    rows.append(dict(check="reopened replay equals eager", passed=bool(torch.equal(out, eager))))
    return rows


def check_early_start() -> list[dict]:
    """Calls back to back with early start, sharing one workspace (each plans while the call before finishes,
    and the plans differ from call to call) give the plain-order outputs bit for bit: eagerly and in a graph."""
    cases = [make_case(8, 8, 4, [3000, 64, 9000, 700], "tree", seed=21), make_case(8, 8, 1, 20000, "tree", seed=22),
             make_case(16, 16, 3, 2000, "tree", seed=23)]
    workspace = torch.empty(max(api.workspace_bytes(len(c.prefix_lens), c.q.shape[1], c.max_len_extend)
                                for c in cases), dtype=torch.uint8, device="cuda")
    plain = []
    for case in cases:
        plain.append(case.fresh_output())
        api.verify_attention(*case.args(plain[-1]))
    sequence = cases * 2

    def back_to_back(outs):
        for case, out in zip(sequence, outs):
            api.verify_attention(*case.args(out), workspace=workspace, early_start=True)

    eager = [case.fresh_output() for case in sequence]
    back_to_back(eager)
    graphed = [case.fresh_output() for case in sequence]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        back_to_back(graphed)
    for out in graphed:
        out.fill_(math.nan)
    graph.replay()
    torch.cuda.synchronize()
    expected = plain * 2
    return [dict(check=f"early start back to back ({how}) equals plain order",
                 passed=all(torch.equal(out, want) for out, want in zip(outs, expected)))
            for how, outs in (("eager", eager), ("graph", graphed))]


def run(subset: str, use_triton: bool = True) -> dict:
    triton_fwd = load_sglang_triton() if use_triton else None
    results, started = [], time.time()
    for label, build in grid_cases(subset):
        case = build()
        results.append(run_case(case, triton_fwd, label))
        del case
        if len(results) % 50 == 0:  # progress, so a run cut short still says how far it got
            print(f"{sum(r['passed'] for r in results)}/{len(results)} cases passed so far "
                  f"({time.time() - started:.0f} s)", flush=True)
    checks = check_enable_gate() + check_graph_replay() + check_early_start()
    ratios = [r["err_ours"] / r["err_triton"] for r in results if r.get("err_triton")]
    return dict(
        gpu=torch.cuda.get_device_name(), torch=torch.__version__, subset=subset,
        triton_reference=triton_fwd is not None, seconds=time.time() - started,
        cases=results, checks=checks,
        passed=sum(r["passed"] for r in results), total=len(results),
        checks_passed=sum(c["passed"] for c in checks), checks_total=len(checks),
        worst_ratio=max(ratios) if ratios else None, median_ratio=sorted(ratios)[len(ratios) // 2] if ratios else None,
        worst_err_ours=max(r["err_ours"] for r in results),
    )


def print_summary(report: dict) -> None:
    for r in report["cases"]:
        if not r["passed"]:
            print("FAIL", {k: v for k, v in r.items()})
    for c in report["checks"]:
        print(("ok  " if c["passed"] else "FAIL"), c["check"])
    print(f"parity {report['subset']}: {report['passed']}/{report['total']} cases passed, "
          f"{report['checks_passed']}/{report['checks_total']} checks; worst err ours {report['worst_err_ours']:.2e}; "
          f"ours/triton err ratio median {report['median_ratio']} worst {report['worst_ratio']} "
          f"({report['seconds']:.0f} s, {report['gpu']})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", choices=("tiny", "quick", "full"), default="quick")
    parser.add_argument("--no-triton", action="store_true", help="skip SGLang's Triton kernel (e.g. under a sanitizer)")
    parser.add_argument("--json", help="write the full report here")
    args = parser.parse_args(argv)
    report = run(args.subset, use_triton=not args.no_triton)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print_summary(report)
    ok = report["passed"] == report["total"] and report["checks_passed"] == report["checks_total"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
