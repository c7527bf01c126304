"""Rerun a capture (cutover/plugin/captures.py) through both kernels and the float64 reference, offline.

Reports, against the float64 reference of the captured inputs: the outputs recorded live (stock and custom),
and fresh reruns of the stock kernel (SGLang's Triton kernel on a GPU; on a CPU its torch reference, labelled
so) and of the custom kernel (the CUDA kernel on a GPU; the split-K torch reference on a CPU).

A rerun uses what is installed here, not what ran live, so the result names what it ran: the kernel library
kernel_ext loaded (its path and, when a release's manifest.json beside it lists it with the same sha256, that
release's id) and the SGLang version. A library that is not the capture's release is refused unless
``allow_release_mismatch``; then every result carries a warning naming both releases. A stock kernel other
than the one the capture recorded is a warning only: the capture records its module, not SGLang's version.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cutover.errors import CutoverError
from cutover.release import MANIFEST, releases_dir


class ReplayError(CutoverError, exit_code=2):
    """A capture could not be read or rerun."""


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
    release_id: str | None  # the release the capture was taken under (None: not recorded)
    device: str
    rows: list[ReplayRow]
    custom_vs_stock_live: float
    kernel_library: str | None = None  # the library the custom rerun ran (None: torch reference, no library)
    kernel_library_release: str | None = None  # its release id (None: not a release's library)
    kernel_library_identity: str = ""  # "release <id>" or "not a release (why)"
    sglang_version: str | None = None  # SGLang of the stock rerun (None: torch reference, no SGLang)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RerunKernels:
    """What the reruns call, and what it is."""

    stock_name: str
    stock_fn: object
    custom_name: str
    custom_fn: object
    library: str | None = None
    library_release: str | None = None
    library_identity: str = ""
    sglang_version: str | None = None


def _errors(candidate, truth) -> tuple[float, float, int]:
    import torch

    from cutover.plugin.captures import relative_l2

    nonfinite = int((~torch.isfinite(candidate.double())).sum())
    diff = (candidate.double() - truth).abs()
    return relative_l2(candidate, truth), float(torch.nan_to_num(diff, nan=float("inf")).max()), nonfinite


def library_release(path: str | os.PathLike) -> tuple[str | None, str]:
    """(release id or None, description) of a kernel library file: a release's when the manifest.json beside
    it (links resolved, as ``<cutover_root>/current`` is one) lists the file with the same sha256."""
    from cutover.hostprotocol.hostlayout import sha256_file

    real = Path(path).resolve()
    manifest_path = real.parent / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        return None, f"not a release: no {MANIFEST} beside {real}"
    except (OSError, ValueError) as exc:
        return None, f"not a release: {manifest_path} unreadable ({exc})"
    release_id = manifest.get("release_id") if isinstance(manifest, dict) else None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(release_id, str) or not release_id or not isinstance(files, dict):
        return None, f"not a release: {manifest_path} has no release_id and files"
    if real.name not in files:
        return None, f"not a release: {manifest_path} does not list {real.name}"
    if sha256_file(str(real)) != files[real.name]:
        return None, f"not release {release_id}: {real} differs from the sha256 in {manifest_path}"
    return release_id, f"release {release_id}"


def release_library_path(release_id: str) -> str:
    """Where the library of ``release_id`` is likely found here (for the hint), else the pattern."""
    from kernel_ext.build import LIBRARY_NAME

    from cutover.plugin.hooks import host_paths_from_env

    dirs = [Path(host_paths_from_env().releases), releases_dir()]
    for directory in dirs:
        if (directory / release_id / LIBRARY_NAME).is_file():
            return str((directory / release_id / LIBRARY_NAME).resolve())
    return (f"<releases dir>/{release_id}/{LIBRARY_NAME} (on a serving host <cutover_root>/releases/, "
            "where `cutover build` ran dist/releases/; copy the release directory here if neither has it)")


def _kernels(device: str) -> RerunKernels:
    """The rerun kernels for ``device``, with the library and SGLang version they come from."""
    if device.startswith("cuda"):
        from cutover.plugin.hooks import resolve_stock_kernel, sglang_version

        try:
            stock, module = resolve_stock_kernel()
        except ImportError as exc:
            raise ReplayError(f"--device {device} reruns SGLang's Triton kernel, which cannot be imported here: "
                              f"{exc}", hint="pip install sglang (the version the hosts serve) into this "
                              "environment, or run `cutover replay` where SGLang is installed; --device cpu "
                              "replays against torch references without it") from exc
        import kernel_ext
        from kernel_ext import _lib

        try:
            library = _lib.load_library()
        except _lib.KernelLibraryError as exc:
            raise ReplayError(f"the custom rerun has no kernel library: {exc}",
                              hint=f"point {_lib.LIB_ENV} at the capture's release's {_lib.LIBRARY_NAME}") from exc
        release_id, identity = library_release(library.path)
        return RerunKernels(f"{module}.extend_attention_fwd", stock, "kernel_ext.verify_attention (CUDA)",
                            kernel_ext.verify_attention, library=str(library.path), library_release=release_id,
                            library_identity=identity, sglang_version=sglang_version())
    from kernel_ext.reference import reference_extend_attention_fwd, splitk_extend_attention_fwd

    return RerunKernels("torch reference of SGLang's kernel (no GPU)", reference_extend_attention_fwd,
                        "split-K torch reference (no GPU)", splitk_extend_attention_fwd)


def _check_provenance(capture: dict, kernels: RerunKernels, allow_release_mismatch: bool) -> list[str]:
    """Warnings about reruns that are not what ran live; ReplayError for another release unless allowed."""
    warnings = []
    if kernels.library is not None:
        captured = capture.get("release_id")
        ran = f"{kernels.library} ({kernels.library_identity})"
        if captured is None:
            warnings.append(f"the capture records no release (its rank had no <cutover_root>/current), so the "
                            f"custom rerun's library {ran} cannot be matched to the kernel that ran live")
        elif kernels.library_release != captured:
            message = f"the capture was taken under release {captured}, but the custom rerun loaded {ran}"
            fix = f"CUTOVER_KERNEL_LIB={release_library_path(captured)} cutover replay ..."
            if not allow_release_mismatch:
                raise ReplayError(message + ": its numbers would not be the live kernel's",
                                  hint=f"rerun the capture's release: {fix}; or pass --allow-release-mismatch "
                                       "to run this library on the capture's inputs (labelled as such)")
            warnings.append(f"{message}: the custom rerun is that library's, not the live kernel's "
                            f"(to rerun release {captured}: {fix})")
    if kernels.sglang_version is not None and capture.get("stock_kernel") not in (None, "?", kernels.stock_name):
        warnings.append(f"the stock rerun is {kernels.stock_name} of SGLang {kernels.sglang_version}; the capture "
                        f"recorded {capture['stock_kernel']} as its stock kernel (another SGLang), so the stock "
                        "rerun need not match the live one")
    return warnings


def replay_capture(path: str, device: str = "cpu", allow_release_mismatch: bool = False) -> ReplayResult:
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
    kernels = _kernels(device)
    warnings = _check_provenance(capture, kernels, allow_release_mismatch)
    truth = truth_reference(capture)
    rows_used = int(capture["args"]["qo_indptr"][-1])
    truth = truth[:rows_used]
    rows = []
    for kernel, key, implementation in (("stock", "o_stock", capture.get("stock_kernel", "?")),
                                        ("custom", "o_custom", capture.get("kernel", "?"))):
        rows.append(ReplayRow(kernel, "recorded live", implementation, *_errors(capture[key][:rows_used], truth)))
    stock_label = kernels.stock_name + (f" (SGLang {kernels.sglang_version})" if kernels.sglang_version else "")
    custom_label = kernels.custom_name + (f" ({kernels.library_identity})" if kernels.library else "")
    for kernel, implementation, fn in (("stock", stock_label, kernels.stock_fn),
                                       ("custom", custom_label, kernels.custom_fn)):
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
        kernel_library=kernels.library, kernel_library_release=kernels.library_release,
        kernel_library_identity=kernels.library_identity, sglang_version=kernels.sglang_version,
        warnings=warnings,
    )
