"""Measure the shadow divergence a correct kernel produces, to calibrate the gate thresholds (docs/gates.md).

    python -m checks.calibrate [--out reports/gate_calibration_cpu.json]

On the CPU this compares the two torch kernels the sandbox shadows (reference computed in float32 as the
stock path, split-K with bf16 softmax weights as the custom path), both rounded to bf16 outputs, on bf16
inputs over a grid of verify shapes; each is also measured against a float64 reference (the truth anchor).
It prints a table and writes the raw numbers as JSON. The GPU numbers come from the kernel parity suite
(docs/perf.md). Needs torch (the `kernel` extra).
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import time
from pathlib import Path

import torch

from kernel_ext.reference import reference_verify_attention, splitk_verify_attention
from kernel_ext.testing import compare, make_verify_batch

GRID = {"H": (8,), "T": (1, 8, 16, 64), "batch": (1, 3), "prefix": (0, 7, 300, 2000), "mask": ("tree", "causal")}


def measure(H: int, T: int, batch: int, prefix: int, mask: str, seed: int) -> dict:
    b = make_verify_batch(H, T, batch, prefix, mask=mask, dtype=torch.bfloat16, seed=seed)
    kwargs = b.verify_kwargs()
    truth = reference_verify_attention(**kwargs)
    stock = reference_verify_attention(**kwargs, compute_dtype=torch.float32).to(torch.bfloat16)
    custom = splitk_verify_attention(**kwargs).to(torch.bfloat16)
    shadow = compare(custom, stock)
    err_custom, err_stock = compare(custom, truth).rel_l2, compare(stock, truth).rel_l2
    ratio = err_custom / err_stock if err_stock > 0 else (1.0 if err_custom == 0 else float("inf"))
    return {
        "H": H,
        "T": T,
        "batch": batch,
        "prefix": prefix,
        "mask": mask,
        "rel_l2": shadow.rel_l2,
        "max_abs": shadow.max_abs,
        "nonfinite": shadow.nonfinite_actual + shadow.nonfinite_expected,
        "err_custom": err_custom,
        "err_stock": err_stock,
        "truth_ratio": ratio,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="reports/gate_calibration_cpu.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    names = list(GRID)
    for seed, values in enumerate(itertools.product(*GRID.values())):
        rows.append(measure(**dict(zip(names, values)), seed=seed))
        r = rows[-1]
        print(
            f"H={r['H']} T={r['T']:>2} batch={r['batch']} prefix={r['prefix']:>4} {r['mask']:<6} "
            f"rel_l2={r['rel_l2']:.2e} max_abs={r['max_abs']:.2e} err_custom={r['err_custom']:.2e} "
            f"err_stock={r['err_stock']:.2e} ratio={r['truth_ratio']:.3f}"
        )
    summary = {key: max(r[key] for r in rows) for key in ("rel_l2", "max_abs", "truth_ratio", "nonfinite")}
    print("worst over the grid: " + ", ".join(f"{k}={v:.3g}" for k, v in summary.items()))
    document = {
        "what": "sandbox CPU shadow divergence (bf16 inputs and outputs)",
        "torch": torch.__version__,
        "machine": platform.machine(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "grid": GRID,
        "worst": summary,
        "cases": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
