"""Test-only fault injection into the sandbox's custom path (never part of the SGLang plugin).

Spec (env ``CUTOVER_SANDBOX_FAULT`` at start, or the file ``<state_dir>/sandbox-fault``, re-read about once a
second): specs joined by ``|``, each ``divergence:layer=L[:rel=X][:rank=R]`` (custom output scaled by 1+X,
default X=0.05, so its relative L2 to stock is about X) or ``nan:layer=L[:rank=R]`` (the first element of the
custom output becomes NaN). The corruption is applied in place and weighted by the launch's enable flag, so it
also works inside a captured CUDA graph (the per-layer fault strengths live in a device tensor).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from cutover.plugin.dispatch import current_verify_layer

FAULT_ENV = "CUTOVER_SANDBOX_FAULT"
FAULT_FILE = "sandbox-fault"
DEFAULT_REL = 0.05


@dataclass(frozen=True)
class Fault:
    kind: str  # "divergence" or "nan"
    layer: int
    rel: float = DEFAULT_REL
    rank: int | None = None


def parse_faults(text: str) -> list[Fault]:
    """Parse a fault spec; ValueError naming the bad part and the expected form."""
    faults = []
    for part in (p.strip() for p in text.split("|")):
        if not part:
            continue
        kind, _, rest = part.partition(":")
        fields = dict(item.split("=", 1) for item in rest.split(":") if "=" in item)
        if kind not in ("divergence", "nan") or "layer" not in fields:
            raise ValueError(f"bad sandbox fault {part!r}: expected divergence:layer=L[:rel=X][:rank=R] "
                             "or nan:layer=L[:rank=R]")
        try:
            faults.append(Fault(kind, int(fields["layer"]), float(fields.get("rel", DEFAULT_REL)),
                                int(fields["rank"]) if "rank" in fields else None))
        except ValueError as exc:
            raise ValueError(f"bad sandbox fault {part!r}: {exc}") from exc
    return faults


def read_fault_spec(state_dir: str) -> str:
    """The current spec: the fault file when present, else the environment variable."""
    try:
        with open(os.path.join(state_dir, FAULT_FILE)) as handle:
            return handle.read().strip()
    except FileNotFoundError:
        return os.environ.get(FAULT_ENV, "").strip()


class FaultyKernels:
    """Wraps a kernel set; corrupts the custom output of faulty layers after our kernel wrote it."""

    def __init__(self, inner, device: torch.device, rank: int, max_layers: int = 512):
        self.inner = inner
        self.rank = rank
        self.label = inner.label
        # per layer: [divergence rel, nan flag]
        self.strength = torch.zeros(max_layers, 2, dtype=torch.float32, device=device)
        self.active: list[Fault] = []

    def set_faults(self, faults: list[Fault]) -> None:
        mine = [f for f in faults if f.rank in (None, self.rank) and 0 <= f.layer < self.strength.shape[0]]
        table = torch.zeros_like(self.strength, device="cpu")
        for fault in mine:
            if fault.kind == "divergence":
                table[fault.layer, 0] = fault.rel
            else:
                table[fault.layer, 1] = 1.0
        self.strength.copy_(table)
        self.active = mine

    def gate(self, *args) -> None:
        self.inner.gate(*args)

    def epilogue(self, *args) -> None:
        self.inner.epilogue(*args)

    def custom(self, args, kwargs, o, scratch, enable) -> bool:
        served = self.inner.custom(args, kwargs, o, scratch, enable)
        layer = current_verify_layer()
        if served and layer is not None and 0 <= layer < self.strength.shape[0]:
            # our kernel wrote o when enable[0] (custom mode), the scratch when enable[1] (shadow sample)
            for out, flag in ((o, enable[0:1]), (scratch, enable[1:2])):
                weight = flag.to(torch.float32)
                rel, nan_flag = self.strength[layer, 0:1] * weight, self.strength[layer, 1:2] * weight
                out.mul_((1.0 + rel).to(out.dtype))
                first = out.view(-1)[0:1]
                first.copy_(torch.where(nan_flag > 0, torch.full_like(first, float("nan")), first))
        return served

