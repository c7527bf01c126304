"""Build libcutover_verify.so from kernel_ext/csrc with nvcc (no torch needed).

    python -m kernel_ext.build [--out DIR] [--arch sm_90a --arch sm_120]
    python -m kernel_ext.build --profile [--out DIR]      # phase marks of csrc/phase_clock.cuh, into build/profile
    python -m kernel_ext.build --resources [--arch ...]   # registers and spills of every kernel, per arch

`build_library` is what `cutover build` packages. The build is all-or-nothing: nvcc writes into a temporary
directory and the library is moved into place only when it compiled. `kernel_resources` compiles the same
sources with `-Xptxas -v` and reads what ptxas reports for each kernel: the mma.sync kernels run at or near 255
registers, so a change can make them spill on one arch and not the other. A profiling build (`profile=True`,
`--profile`) defines CUTOVER_PROFILE, which compiles the phase marks in; the release build holds no profiling code.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ABI_VERSION = 3  # must equal CUTOVER_ABI_VERSION in csrc/cutover_verify.h (checked by _abi_version_in_header)

# The minimum Linux x86_64 NVIDIA driver for a library built by each CUDA toolkit (nvcc major.minor): the GA rows
# of "CUDA Toolkit and Corresponding Driver Versions" in NVIDIA's CUDA toolkit release notes. The library embeds
# PTX (for the newest arch), which a driver can JIT only if it knows that toolkit's PTX ISA, and the PTX ISA
# changes with major.minor, not with an update: so the GA row of the minor is the floor, whatever the update.
# The table starts at 12.8 on purpose: sm_120 (CT200, in DEFAULT_ARCHS) needs CUDA >= 12.8. An nvcc it does
# not list is refused (min_driver); add its row from the release notes, after checking that nvcc compiles
# every arch of DEFAULT_ARCHS.
MIN_DRIVER_BY_CUDA = {
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}

LIBRARY_NAME = "libcutover_verify.so"
CSRC = Path(__file__).resolve().parent / "csrc"
BUILD_DIR = Path(__file__).resolve().parent / "build"  # the in-repo build output (kernel_ext/_lib.py loads it)
DEFAULT_ARCHS = ("sm_90a", "sm_120")  # the one default: `cutover build` (cutover/release.py) uses it too
NVCC_ENV = "CUTOVER_NVCC"
PROFILE_MACRO = "CUTOVER_PROFILE"  # compiles csrc/phase_clock.cuh's marks and cutover_debug_phase_times in


class KernelBuildError(Exception):
    """The kernel library could not be built; the message says why and what to do."""


def source_files() -> list[Path]:
    """Every file that goes into the library (sorted), for hashing and packaging."""
    return sorted(p for p in CSRC.rglob("*") if p.is_file() and p.suffix in {".cu", ".cuh", ".h"})


def _find_nvcc(nvcc: str | None) -> str:
    candidate = nvcc or os.environ.get(NVCC_ENV) or shutil.which("nvcc")
    if candidate is None and Path("/usr/local/cuda/bin/nvcc").exists():
        candidate = "/usr/local/cuda/bin/nvcc"
    if candidate is None:
        raise KernelBuildError(
            f"nvcc not found: set {NVCC_ENV}=/path/to/nvcc or put the CUDA toolkit's bin/ on PATH "
            "(e.g. export PATH=/usr/local/cuda/bin:$PATH)"
        )
    if shutil.which(candidate) is None and not Path(candidate).is_file():
        raise KernelBuildError(f"nvcc '{candidate}' does not exist: fix {NVCC_ENV} or PATH")
    return candidate


def nvcc_version(nvcc: str | None = None) -> str:
    """The release of the nvcc that would build, e.g. '13.0.88'."""
    exe = _find_nvcc(nvcc)
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise KernelBuildError(f"could not run '{exe} --version': {exc}") from exc
    match = re.search(r"release [\d.]+, V([\d.]+)", out)
    if not match:
        raise KernelBuildError(f"could not read the version from '{exe} --version' output: {out.strip()[:200]}")
    return match.group(1)


def min_driver(version: str) -> str:
    """The minimum NVIDIA driver for a library built by nvcc `version` (e.g. '13.0.88' -> '580.65.06')."""
    match = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)*", version)
    if not match:
        raise KernelBuildError(f"nvcc version {version!r} is not of the form major.minor[.patch]")
    cuda = (int(match.group(1)), int(match.group(2)))
    if cuda not in MIN_DRIVER_BY_CUDA:
        known = ", ".join(f"{major}.{minor}" for major, minor in sorted(MIN_DRIVER_BY_CUDA))
        raise KernelBuildError(
            f"nvcc {version} is CUDA {cuda[0]}.{cuda[1]}, whose minimum NVIDIA driver is not known to cutover "
            f"(known: {known}); add CUDA {cuda[0]}.{cuda[1]}'s minimum Linux driver to MIN_DRIVER_BY_CUDA in "
            "kernel_ext/build.py (NVIDIA's CUDA toolkit release notes, \"CUDA Toolkit and Corresponding Driver "
            "Versions\", its GA row), or build with a listed nvcc")
    return MIN_DRIVER_BY_CUDA[cuda]


def _gencode_flags(archs: tuple[str, ...] | list[str]) -> tuple[list[str], str]:
    """nvcc -gencode flags for the archs (SASS for each, PTX of the newest), and the targets string."""
    if not archs:
        raise KernelBuildError("no target archs given: pass e.g. ('sm_90a', 'sm_120')")
    flags, targets = [], []
    for arch in archs:
        match = re.fullmatch(r"sm_(\d+)(a?)", arch)
        if not match:
            raise KernelBuildError(f"bad arch '{arch}': expected the form sm_90a or sm_120")
        num, suffix = match.groups()
        flags.append(f"-gencode=arch=compute_{num}{suffix},code=sm_{num}{suffix}")
        targets.append(arch)
    newest = max(archs, key=lambda a: int(re.sub(r"\D", "", a)))
    num = re.sub(r"\D", "", newest)
    suffix = "a" if newest.endswith("a") else ""
    flags.append(f"-gencode=arch=compute_{num}{suffix},code=compute_{num}{suffix}")
    targets.append(f"compute_{num}{suffix}")
    return flags, ",".join(targets)


def _abi_version_in_header() -> int:
    text = (CSRC / "cutover_verify.h").read_text()
    match = re.search(r"#define CUTOVER_ABI_VERSION (\d+)", text)
    if not match:
        raise KernelBuildError("csrc/cutover_verify.h defines no CUTOVER_ABI_VERSION")
    return int(match.group(1))


def _compile(exe: str, gencode: list[str], targets: str, target: Path,
             extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """nvcc over csrc's .cu files into `target`; a failed compile raises KernelBuildError with nvcc's errors."""
    sources = [str(p) for p in source_files() if p.suffix == ".cu"]
    cmd = [exe, "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden",
           "--expt-relaxed-constexpr", "-lineinfo", f'-DCUTOVER_TARGETS="{targets}"',
           *extra, *gencode, "-I", str(CSRC), *sources, "-o", str(target)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()] or proc.stderr.splitlines()
        raise KernelBuildError("nvcc failed to compile kernel_ext/csrc:\n  " + "\n  ".join(errors[:12]))
    return proc


def build_library(out_dir: Path, archs=DEFAULT_ARCHS, nvcc: str | None = None, profile: bool = False) -> Path:
    """Compile csrc into out_dir/libcutover_verify.so and return its path (nothing is left behind on failure).

    `profile` builds the profiling library: the phase marks and their entry point, which a release never carries.
    """
    if _abi_version_in_header() != ABI_VERSION:
        raise KernelBuildError("kernel_ext/build.py ABI_VERSION and csrc/cutover_verify.h disagree: update both")
    exe = _find_nvcc(nvcc)
    gencode, targets = _gencode_flags(tuple(archs))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as tmp:
        target = Path(tmp) / LIBRARY_NAME
        _compile(exe, gencode, targets, target, extra=(f"-D{PROFILE_MACRO}",) if profile else ())
        final = out_dir / LIBRARY_NAME
        os.replace(target, final)
    return final


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one kernel (entry function) on one arch."""

    kernel: str  # the mangled name
    arch: str
    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")


def parse_ptxas_report(text: str) -> list[KernelResources]:
    """Every entry function of `nvcc -Xptxas -v` output, with its registers, stack and spills."""
    rows, entry, frame = [], None, None
    for line in text.splitlines():
        if match := _PTXAS_ENTRY.search(line):
            if entry is not None:
                raise KernelBuildError(f"ptxas reported no registers for {entry[0]} ({entry[1]})")
            entry, frame = (match.group(1), match.group(2)), None
        elif entry is not None and (match := _PTXAS_FRAME.search(line)):
            frame = tuple(int(v) for v in match.groups())
        elif entry is not None and (match := _PTXAS_REGISTERS.search(line)):
            if frame is None:
                raise KernelBuildError(f"ptxas reported no stack frame line for {entry[0]} ({entry[1]})")
            rows.append(KernelResources(entry[0], entry[1], int(match.group(1)), *frame))
            entry = None
    if entry is not None:
        raise KernelBuildError(f"ptxas reported no registers for {entry[0]} ({entry[1]})")
    return rows


def kernel_resources(archs=DEFAULT_ARCHS, nvcc: str | None = None) -> list[KernelResources]:
    """Compile csrc for `archs` with `-Xptxas -v` (into a temporary directory) and read every kernel's resources."""
    exe = _find_nvcc(nvcc)
    gencode, targets = _gencode_flags(tuple(archs))
    with tempfile.TemporaryDirectory(prefix="cutover-ptxas-") as tmp:
        proc = _compile(exe, gencode, targets, Path(tmp) / LIBRARY_NAME, extra=("-Xptxas", "-v"))
    return parse_ptxas_report(proc.stderr + proc.stdout)


def _demangled(names: list[str]) -> list[str]:
    """C++ names through c++filt where it is installed, else as they are."""
    if shutil.which("c++filt") is None:
        return names
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return out if len(out) == len(names) else names


def _print_resources(rows: list[KernelResources]) -> int:
    names = _demangled([row.kernel for row in rows])
    for row, name in sorted(zip(rows, names), key=lambda pair: (pair[0].arch, pair[1])):
        spill = f"spills {row.spill_store_bytes} B stored, {row.spill_load_bytes} B loaded" if row.spills else "no spills"
        print(f"{row.arch:8} {row.registers:4} registers  stack {row.stack_bytes:4} B  {spill:32} {name}")
    spilling = [row for row in rows if row.spills]
    if spilling:
        print(f"error: {len(spilling)} kernel(s) spill registers to local memory (listed above): reduce their live "
              "state (e.g. kernel_ext/csrc/verify_mma.cuh, TileConfig::Q_REG_STEPS) until ptxas reports none",
              file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path,
                        help="output directory (default kernel_ext/build, or kernel_ext/build/profile with --profile)")
    parser.add_argument("--arch", action="append",
                        help=f"target arch (repeatable); default {' and '.join(DEFAULT_ARCHS)}")
    parser.add_argument("--nvcc", help=f"nvcc to use (default: ${NVCC_ENV}, then PATH)")
    parser.add_argument("--profile", action="store_true",
                        help="build the profiling library (phase marks of csrc/phase_clock.cuh), never a release")
    parser.add_argument("--resources", action="store_true",
                        help="build nothing: print every kernel's registers and spills per arch (exit 1 if any spills)")
    args = parser.parse_args(argv)
    archs = tuple(args.arch or DEFAULT_ARCHS)
    try:
        if args.resources:
            return _print_resources(kernel_resources(archs, args.nvcc))
        default_out = BUILD_DIR / "profile" if args.profile else BUILD_DIR
        path = build_library(args.out or default_out, archs, args.nvcc, profile=args.profile)
    except KernelBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
