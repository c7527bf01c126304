"""Run the verify kernel on one benchmark shape a few times (for ncu / nsys to capture).

    python kernel_ext/device/profile_one.py H T BATCH PREFIX [--calls N]
"""
from __future__ import annotations

import argparse

import torch

from kernel_ext import api
from kernel_ext.bench import Shape


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("H", "T", "batch", "prefix"):
        parser.add_argument(name, type=int)
    parser.add_argument("--calls", type=int, default=2)
    args = parser.parse_args()
    shape = Shape(args.H, args.T, args.batch, args.prefix, "tree")
    for _ in range(args.calls):
        api.verify_attention(*shape.args(0), workspace=shape.workspace)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
