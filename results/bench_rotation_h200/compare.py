"""Same-run comparison of the benchmark's rotation before and after this change, on the shapes it touches.

Before: at most 64 index sets per shape for our kernel, 4 for SGLang's kernels (whose graphs held
min(sets, 4) calls). After: every kernel cycles through max(512 MB, 4 x L2) of KV rows (kernel_ext.bench).
The shapes: every full-grid shape with batch x prefix <= 4096 x 1 or 1024 x 4 (where either count changes),
plus batch 4 / prefix 4096 as a control (SGLang's 4 sets already touched 75 MB there). Run from the repo root
with PYTHONPATH=.:.bundle/sglang; writes compare.json into argv[1].
"""
import itertools
import json
import sys
from pathlib import Path

import torch

from kernel_ext import api, bench
from kernel_ext.gpu_parity import load_sglang_triton
from sglang.kernels.ops.attention.verify_mla import verify_shared_kv_fwd

out = Path(sys.argv[1])
triton_fwd = load_sglang_triton()
rows = []
shapes = itertools.product((8, 16), (8, 16, 32, 64), ((1, 1024), (1, 4096), (4, 1024), (4, 4096)), ("tree", "chain"))
for H, T, (batch, prefix), mask in shapes:
    row = dict(H=H, T=T, batch=batch, prefix=prefix, mask=mask)
    for label, max_sets, sglang_calls in (("old", 64, lambda s: min(s, 4)), ("new", 1024, lambda s: s)):
        bench.MAX_SETS = max_sets
        shape = bench.Shape(H, T, batch, prefix, mask)
        ours = bench.time_graph(bench.rotating(shape, lambda *a: api.verify_attention(
            *a, workspace=shape.workspace, early_start=True)), reps=20, calls=shape.sets)
        tri = bench.time_graph(bench.rotating(shape, triton_fwd), reps=3, calls=sglang_calls(shape.sets))
        row.update({f"sets_{label}": shape.sets, f"ours_us_{label}": ours * 1e3, f"triton_us_{label}": tri * 1e3})
        if mask == "chain":
            def shared(*args):
                return verify_shared_kv_fwd(*args, max_bs=max(64, batch))
            try:
                if shared(*shape.args(0)):
                    row[f"shared_us_{label}"] = bench.time_graph(bench.rotating(shape, shared), reps=3,
                                                                 calls=sglang_calls(shape.sets)) * 1e3
            except Exception as exc:
                row[f"shared_error_{label}"] = repr(exc)[:120]
        del shape
        torch.cuda.empty_cache()
    rows.append(row)
    fmt = lambda k: f"{row[k]:8.1f}" if k in row else "       -"  # noqa: E731
    print(f"{H:>3} {T:>3} {batch:>2} {prefix:>5} {mask:>5} sets {row['sets_old']:>3}->{row['sets_new']:>4} "
          f"ours {fmt('ours_us_old')} {fmt('ours_us_new')}  triton {fmt('triton_us_old')} {fmt('triton_us_new')}"
          f"  shared {fmt('shared_us_old')} {fmt('shared_us_new')}", flush=True)
    (out / "compare.json").write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), rows=rows), indent=1))
