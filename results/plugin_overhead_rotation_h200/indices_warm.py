"""Does a kernel that reads a call's kv_indices just before it make SGLang's kernel faster on cold KV rows?

The plugin's idle sequence (gate, our kernel exiting after its plan, SGLang's kernel, epilogue) was faster than the
bare SGLang kernel at batch 1 once the benchmark rotated its KV index sets (call1). Our kernel's plan loads the row
ids of its first tiles before it exits. This times, per call, on the rotated sets of cutover.plugin.bench_overhead:
  stock                      SGLang's kernel alone
  sum(other) + stock         a reduction over an unrelated tensor of the same size first (control: one more launch)
  sum(kv_indices) + stock    a reduction over the call's own kv_indices first (they land in L2)
"""
import sys

import torch

from cutover.plugin.bench_overhead import RotatedBatch, _time_us
from cutover.plugin.hooks import resolve_stock_kernel
from kernel_ext.bench import rotating
from kernel_ext.cudagraph import capture_graph

KV_INDICES = 8  # position of kv_indices in the arguments


def main() -> None:
    stock, _ = resolve_stock_kernel()
    for shape in ((8, 8, 1, 4096), (16, 8, 1, 1024), (8, 8, 4, 16384)):
        batch = RotatedBatch(*shape)
        calls = max(10, batch.sets)
        other = torch.zeros_like(batch.args(0)[KV_INDICES])
        out = torch.empty((), dtype=other.dtype, device="cuda")

        def with_touch(tensor_of):
            def call(*args):
                torch.sum(tensor_of(args), dim=0, out=out)
                stock(*args)
            return call

        row = {}
        for name, fn in (("stock", stock), ("sum(other)+stock", with_touch(lambda a: other)),
                         ("sum(kv_indices)+stock", with_touch(lambda a: a[KV_INDICES]))):
            row[name] = _time_us(capture_graph(rotating(batch, fn), calls), 30, calls)
        print(shape, f"sets {batch.sets}", "  ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
