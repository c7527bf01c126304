"""Rerun a capture (cutover/plugin/captures.py) through both kernels and the float64 reference, offline.

Reports, against the float64 reference of the captured inputs: the outputs recorded live (stock and custom),
and fresh reruns of the stock kernel (SGLang's Triton kernel on a GPU; on a CPU its torch reference, labelled
so) and of the custom kernel (the CUDA kernel on a GPU; the split-K torch reference on a CPU).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from cutover.errors import CutoverError


class ReplayError(CutoverError):
    """A capture could not be read or rerun."""

    exit_code = 2


@dataclass
class ReplayRow:
    kernel: str  # "stock" or "custom"
    source: str  # "recorded live" or "rerun"
    implementation: str  # what computed it
    rel_l2: float  # vs float64 reference
    max_abs: float
    nonfinite: int


@dataclass
class ReplayResult:
    capture: str
    rank: int | None
    layer: int | None
    kernel_live: str | None
    release_id: str | None
    device: str
    rows: list[ReplayRow]
    custom_vs_stock_live: float

    def to_dict(self) -> dict:
        return asdict(self)


def _errors(candidate, truth) -> tuple[float, float, int]:
    import torch

    from cutover.plugin.captures import relative_l2

    nonfinite = int((~torch.isfinite(candidate.double())).sum())
    diff = (candidate.double() - truth).abs()
    return relative_l2(candidate, truth), float(torch.nan_to_num(diff, nan=float("inf")).max()), nonfinite


def _kernels(device: str):
    """(stock name, stock fn, custom name, custom fn) for ``device``."""
    if device.startswith("cuda"):
        import kernel_ext

        from cutover.plugin.hooks import resolve_stock_kernel

        stock, module = resolve_stock_kernel()
        custom = kernel_ext.verify_attention
        return f"{module}.extend_attention_fwd", stock, "kernel_ext.verify_attention (CUDA)", custom
    from kernel_ext.reference import reference_extend_attention_fwd, splitk_extend_attention_fwd

    return ("torch reference of SGLang's kernel (no GPU)", reference_extend_attention_fwd,
            "split-K torch reference (no GPU)", splitk_extend_attention_fwd)


def replay_capture(path: str, device: str = "cpu") -> ReplayResult:
    """Load ``path`` and compare every output against the float64 reference; see the module docstring."""
    import torch

    from cutover.plugin.audit import truth_reference
    from cutover.plugin.captures import capture_args, load_capture, relative_l2

    try:
        capture = load_capture(path)
    except (ValueError, OSError) as exc:
        raise ReplayError(str(exc), hint="pass a .pt file from <state_dir>/captures/") from exc
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ReplayError(f"--device {device} asked for, but torch sees no GPU here", hint="use --device cpu")
    truth = truth_reference(capture)
    rows_used = int(capture["args"]["qo_indptr"][-1])
    truth = truth[:rows_used]
    rows = []
    for kernel, key, implementation in (("stock", "o_stock", capture.get("stock_kernel", "?")),
                                        ("custom", "o_custom", capture.get("kernel", "?"))):
        rows.append(ReplayRow(kernel, "recorded live", implementation, *_errors(capture[key][:rows_used], truth)))
    stock_name, stock_fn, custom_name, custom_fn = _kernels(device)
    for kernel, implementation, fn in (("stock", stock_name, stock_fn), ("custom", custom_name, custom_fn)):
        out = torch.full_like(capture["o_stock"], float("nan")).to(device)
        served = fn(*capture_args(capture, out, device), **capture["kwargs"])
        if served is False:
            rows.append(ReplayRow(kernel, "rerun", f"{implementation}: does not serve this call", float("nan"),
                                  float("nan"), 0))
            continue
        rows.append(ReplayRow(kernel, "rerun", implementation, *_errors(out[:rows_used].cpu(), truth)))
    return ReplayResult(
        capture=path, rank=capture.get("rank"), layer=capture.get("layer"), kernel_live=capture.get("kernel"),
        release_id=capture.get("release_id"), device=device, rows=rows,
        custom_vs_stock_live=relative_l2(capture["o_custom"][:rows_used], capture["o_stock"][:rows_used]),
    )
