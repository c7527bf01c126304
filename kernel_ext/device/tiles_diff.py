"""Compare two tile configurations of the kernel on the same inputs and locate any difference.

    python kernel_ext/device/tiles_diff.py [--configs 1 3]

For a few shapes: each config's relative L2 error against float64, and where config B departs from the
reference (which 64-row tiles, which 64-dim value blocks, which tokens), to localise a layout bug quickly.
"""
from __future__ import annotations

import argparse

import torch

from kernel_ext import api
from kernel_ext.gpu_parity import make_case
from kernel_ext.reference import reference_verify_attention
from kernel_ext.testing import compare

SHAPES = [(8, 8, 1, 64, "tree"), (8, 8, 1, 0, "tree"), (8, 8, 1, 1000, "chain"), (16, 16, 2, 300, "tree"),
          (8, 64, 1, 1000, "causal"), (16, 64, 3, 5000, "tree")]


def run(config: int, case) -> torch.Tensor:
    api.TILE_CONFIG = config
    out = case.fresh_output()
    served = api.verify_attention(*case.args(out))
    torch.cuda.synchronize()
    if not served:
        raise SystemExit(f"config {config} did not serve the case")
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", type=int, nargs=2, default=(1, 3))
    args = parser.parse_args()
    worst = 0.0
    for i, (h, t, b, p, mask) in enumerate(SHAPES):
        case = make_case(h, t, b, p, mask, seed=100 + i)
        ref = reference_verify_attention(**case.verify_kwargs(), compute_dtype=torch.float64)
        outs = [run(c, case) for c in args.configs]
        errs = [compare(o, ref).rel_l2 for o in outs]
        worst = max(worst, errs[1])
        line = f"H{h} T{t} b{b} P{p} {mask}: rel L2 config {args.configs[0]} {errs[0]:.2e}, config {args.configs[1]} {errs[1]:.2e}"
        bad = (outs[1].float() - ref.float()).abs() > 0.05 + 0.05 * ref.float().abs()
        bad |= ~torch.isfinite(outs[1])
        if bad.any():
            tokens = bad.any(dim=2).any(dim=1).nonzero().flatten().tolist()
            heads = bad.any(dim=2).any(dim=0).nonzero().flatten().tolist()
            blocks = bad.any(dim=0).any(dim=0).view(-1, 64).any(dim=1).nonzero().flatten().tolist()
            line += (f"\n   bad {int(bad.sum())}/{bad.numel()}; tokens {tokens[:16]}; heads {heads[:16]}; "
                     f"64-dim blocks {blocks}; nan {int((~torch.isfinite(outs[1])).sum())}")
            line += f"\n   sample ours {outs[1][0, 0, :6].tolist()} ref {ref[0, 0, :6].tolist()}"
        print(line, flush=True)
    return 0 if worst < 1e-2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
