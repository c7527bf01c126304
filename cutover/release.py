"""Kernel releases: `cutover build` compiles kernel_ext into dist/releases/<release_id>/ with a manifest.

The release id is derived from the kernel source-tree hash (the CUDA sources and kernel_ext's Python), the
target archs, the nvcc version and the ABI version, so the same sources give the same id and a rebuild is a
no-op. Besides the library, a release carries kernel_ext's Python under python/kernel_ext/: the code of the
kernel's acceptance on each host's GPU at stage (cutover/acceptance.py), and of its benchmark there. A release
is built in a temporary directory next to its final place and renamed into place only when complete: a failed
build leaves nothing.

manifest.json: release_id, files {name: sha256}, library, archs, nvcc_version, min_driver, abi_version,
source_tree_hash, source_rev (git commit, "+dirty" if the kernel sources have local changes), built_at, built_by.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from cutover.acceptance import PYTHON_DIR
from cutover.errors import BuildError, ConfigError
from cutover.hostlayout import sha256_file

MANIFEST = "manifest.json"
LATEST = "LATEST"
DEFAULT_ARCHS = ("sm_90a", "sm_120")
RELEASES_DIR_ENV = "CUTOVER_RELEASES_DIR"
# The manifest fields stage relies on: what each must be, and its test.
MANIFEST_FIELDS = {
    "release_id": ("a non-empty string", lambda v: isinstance(v, str) and bool(v)),
    "files": ("a non-empty mapping of file name to sha256, which every host verifies the release against",
              lambda v: isinstance(v, dict) and bool(v) and all(isinstance(d, str) for d in v.values())),
    "archs": ("a non-empty list of archs such as sm_120",
              lambda v: isinstance(v, list) and bool(v) and all(isinstance(a, str) for a in v)),
    "min_driver": ("the minimum NVIDIA driver version, a string", lambda v: isinstance(v, str) and bool(v)),
}


@dataclass(frozen=True)
class Release:
    release_id: str
    path: Path
    manifest: dict


@dataclass(frozen=True)
class BuildResult:
    release: Release
    built: bool  # False: an identical release was already there


def source_tree_hash(files: list[Path], root: Path) -> str:
    """sha256 over (relative path, content hash) of every source file, in path order."""
    digest = hashlib.sha256()
    for path in sorted(Path(f).resolve() for f in files):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + sha256_file(path).encode() + b"\n")
    return digest.hexdigest()


def python_files(kernel_build) -> list[Path]:
    """kernel_ext's Python modules, which a release carries (PYTHON_DIR/kernel_ext/)."""
    return sorted(Path(kernel_build.__file__).resolve().parent.glob("*.py"))


def release_id_for(tree_hash: str, archs: list[str], nvcc_version: str, abi_version) -> str:
    """Readable and deterministic: the tree hash prefix, then a hash of everything else that shapes the binary."""
    build = hashlib.sha256(json.dumps([sorted(archs), nvcc_version, abi_version]).encode()).hexdigest()
    return f"{tree_hash[:10]}-{build[:6]}"


def _kernel_build():
    try:
        from kernel_ext import build
    except ImportError as exc:
        raise BuildError(f"the kernel build module kernel_ext.build cannot be imported: {exc}",
                         hint="run cutover from a checkout or installation that includes kernel_ext") from exc
    return build


def build_release(out_dir: Path, archs: list[str] | None = None, nvcc: str | None = None,
                  operator: str = "") -> BuildResult:
    """Compile the kernel for `archs` into out_dir/<release_id>/, or report the identical release already there."""
    kb = _kernel_build()
    archs = list(archs or getattr(kb, "DEFAULT_ARCHS", DEFAULT_ARCHS))
    try:
        nvcc_version = str(kb.nvcc_version(nvcc))
        modules = python_files(kb)
        sources = [Path(p) for p in kb.source_files()] + modules
    except kb.KernelBuildError as exc:
        raise BuildError(f"cannot build the kernel: {exc}",
                         hint="install the CUDA toolkit (nvcc) or pass its path with --nvcc") from exc
    root = Path(kb.__file__).resolve().parent.parent
    tree_hash = source_tree_hash(sources, root)
    release_id = release_id_for(tree_hash, archs, nvcc_version, kb.ABI_VERSION)
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / release_id
    if (final / MANIFEST).exists():
        try:
            release = verify_local(final)
            _write_latest(out_dir, release_id)
            return BuildResult(release, built=False)
        except BuildError:
            pass  # damaged: rebuild it
    tmp = out_dir / f".tmp-{release_id}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        try:
            library = Path(kb.build_library(tmp, archs, nvcc))
        except kb.KernelBuildError as exc:
            raise BuildError(f"the kernel failed to compile for {', '.join(archs)}: {exc}",
                             hint="fix the compile error above; nothing was written to " + str(out_dir)) from exc
        package = tmp / PYTHON_DIR / "kernel_ext"
        package.mkdir(parents=True)
        for module in modules:
            shutil.copyfile(module, package / module.name)
        manifest = {
            "release_id": release_id,
            "library": library.resolve().relative_to(tmp.resolve()).as_posix(),
            "archs": archs,
            "nvcc_version": nvcc_version,
            "min_driver": str(kb.MIN_DRIVER),
            "abi_version": kb.ABI_VERSION,
            "source_tree_hash": tree_hash,
            "source_rev": _source_rev(root),
            "built_at": time.time(),
            "built_by": operator,
            "files": {p.relative_to(tmp).as_posix(): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()},
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _write_latest(out_dir, release_id)
    return BuildResult(Release(release_id, final, manifest), built=True)


def load_release(path: Path) -> Release:
    """Read a release directory's manifest (files are checked where they land: on each host)."""
    manifest_path = path / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError as exc:
        raise BuildError(f"{path} is not a release: it has no {MANIFEST}", hint="run `cutover build`") from exc
    except ValueError as exc:
        raise BuildError(f"{manifest_path} is not valid JSON: {exc}", hint="rebuild with `cutover build`") from exc
    _check_manifest(manifest_path, manifest)
    return Release(manifest["release_id"], path, manifest)


def _check_manifest(manifest_path: Path, manifest) -> None:
    """BuildError naming the first field that stage needs and the manifest lacks or holds in a wrong form."""
    if not isinstance(manifest, dict):
        raise BuildError(f"{manifest_path}: a manifest must be a JSON object, found {type(manifest).__name__}",
                         hint="rebuild the release with `cutover build`")
    for name, (wanted, valid) in MANIFEST_FIELDS.items():
        if name not in manifest:
            problem = "is missing"
        elif not valid(manifest[name]):
            problem = f"must be {wanted}, found {manifest[name]!r}"
        else:
            continue
        raise BuildError(f"{manifest_path}: field {name!r} {problem}",
                         hint=f"rebuild the release with `cutover build`; {name} must be {wanted}")


def verify_local(path: Path) -> Release:
    """Load a release directory and check every file against its manifest (BuildError on any mismatch)."""
    release = load_release(path)
    manifest = release.manifest
    for name, expected in manifest["files"].items():
        file = path / name
        if not file.is_file():
            raise BuildError(f"release {path.name}: {name} is missing", hint="rebuild with `cutover build`")
        if sha256_file(file) != expected:
            raise BuildError(f"release {path.name}: {name} does not match its sha256 in the manifest",
                             hint="the file was changed after the build: rebuild with `cutover build`")
    return release


def releases_dir(configured: str | None = None) -> Path:
    """Where releases are built: $CUTOVER_RELEASES_DIR, else the config's releases_dir, else dist/releases."""
    return Path(os.environ.get(RELEASES_DIR_ENV) or configured or "dist/releases")


def find_release(ref: str | None, out_dir: Path) -> Release:
    """A release by directory path or id (in out_dir); default the last one built (out_dir/LATEST).
    Its files are checked against the manifest here (BuildError) and again on every host it lands on."""
    if ref is None:
        latest = out_dir / LATEST
        if not latest.exists():
            raise ConfigError(f"no release has been built in {out_dir}",
                              hint="run `cutover build` first, or pass --release <dir or id>")
        ref = latest.read_text().strip()
    candidate = Path(ref)
    if not (candidate / MANIFEST).exists():
        candidate = out_dir / ref
    if not candidate.is_dir():
        raise ConfigError(f"release {ref!r} not found (neither a directory nor an id in {out_dir})",
                          hint="run `cutover build`, or pass an existing release directory")
    return verify_local(candidate)


def _write_latest(out_dir: Path, release_id: str) -> None:
    tmp = out_dir / f".{LATEST}.{uuid.uuid4().hex[:8]}"
    tmp.write_text(release_id + "\n")
    os.replace(tmp, out_dir / LATEST)


def _source_rev(root: Path) -> str | None:
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "kernel_ext"],
                               capture_output=True, text=True, timeout=10)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None
