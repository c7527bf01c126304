"""Kernel releases: `cutover build` compiles kernel_ext into dist/releases/<release_id>/ with a manifest.

The release id is derived from the kernel source-tree hash (the CUDA sources and kernel_ext's Python), the
target archs, the nvcc version and the ABI version, so the same sources give the same id and a rebuild is a
no-op. Besides the library, a release carries kernel_ext's Python under python/kernel_ext/: the code of the
kernel's acceptance on each host's GPU at stage (cutover/hostprotocol/acceptance.py), and of its benchmark there. A release
is built in a temporary directory next to its final place and renamed into place only when complete: a failed
build leaves nothing. Two builds of the same sources may run at once: whichever finishes second finds the
first's complete release in place, keeps it and discards its own (the two are the same release).

manifest.json: release_id, files {name: sha256}, library, archs, nvcc_version, min_driver (from nvcc's version,
kernel_ext/build.py MIN_DRIVER_BY_CUDA), abi_version, source_tree_hash, source_rev (git commit, "+dirty" if the
kernel sources have local changes), built_at, built_by.

A release is checked before stage uses it (find_release, load_release): its fields reach host paths, Ansible
variables and Jinja, so each must have the form `cutover build` writes, and a release that fails is a bad input
file, reported as a ConfigError (exit 2, like a bad config or inventory), not as a failed build (exit 3).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from cutover.hostprotocol.acceptance import PYTHON_DIR
from cutover.errors import BuildError, ConfigError, CutoverError
from cutover.hostprotocol.hostlayout import load_record, release_tree_problem, sha256_file, short_repr

MANIFEST = "manifest.json"
LATEST = "LATEST"
RELEASES_DIR_ENV = "CUTOVER_RELEASES_DIR"
RELEASE_ID_FORM = re.compile(r"[0-9a-f]{10}-[0-9a-f]{6}")  # what release_id_for makes
_SHA256 = re.compile(r"[0-9a-f]{64}")
# One part of a file name in a release: no '', '.' or '..', and only characters that mean nothing to a shell,
# to Jinja or to a path (the names travel to the hosts as Ansible variables).
_NAME_PART = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]*")
FILE_NAME_RULE = ("a relative, normalised path (no leading '/', no empty, '.' or '..' parts) of letters, digits "
                  "and _ . + -")


def _is_file_name(name) -> bool:
    return isinstance(name, str) and all(_NAME_PART.fullmatch(part) for part in name.split("/"))


# The manifest fields stage relies on: what each must be, and its test. release_id must also name the release's
# directory and `library` be one of `files` (_check_manifest).
MANIFEST_FIELDS = {
    "release_id": ("a non-empty string", lambda v: isinstance(v, str) and bool(v)),
    "files": ("a non-empty mapping of file name to sha256, which every host verifies the release against",
              lambda v: isinstance(v, dict) and bool(v) and all(isinstance(d, str) for d in v.values())),
    "archs": ("a non-empty list of archs such as sm_120",
              lambda v: isinstance(v, list) and bool(v)
              and all(isinstance(a, str) and re.fullmatch(r"sm_\d+a?", a) for a in v)),
    "min_driver": ("the minimum NVIDIA driver version, such as 580.65.06",
                   lambda v: isinstance(v, str) and re.fullmatch(r"\d+(\.\d+){1,2}", v) is not None),
    "library": ("the kernel library's file name, one of files", lambda v: isinstance(v, str) and bool(v)),
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
    archs = list(archs or kb.DEFAULT_ARCHS)
    try:
        nvcc_version = str(kb.nvcc_version(nvcc))
        modules = python_files(kb)
        sources = [Path(p) for p in kb.source_files()] + modules
    except kb.KernelBuildError as exc:
        raise BuildError(f"cannot build the kernel: {exc}",
                         hint="install the CUDA toolkit (nvcc) or pass its path with --nvcc") from exc
    try:
        min_driver = kb.min_driver(nvcc_version)
    except kb.KernelBuildError as exc:
        raise BuildError(f"cannot build the kernel: {exc}",
                         hint="add the toolkit's row to MIN_DRIVER_BY_CUDA in kernel_ext/build.py, or pass "
                              "--nvcc with a toolkit it lists") from exc
    root = Path(kb.__file__).resolve().parent.parent
    tree_hash = source_tree_hash(sources, root)
    release_id = release_id_for(tree_hash, archs, nvcc_version, kb.ABI_VERSION)
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / release_id
    existing = _intact(final) if (final / MANIFEST).exists() else None  # a damaged one is rebuilt
    if existing is not None:
        _write_latest(out_dir, release_id)
        return BuildResult(existing, built=False)
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
        linked = [str(module) for module in modules if module.is_symlink()]
        if linked:
            raise BuildError(f"kernel_ext source {linked[0]} is a symbolic link: a release holds regular files only",
                             hint="replace the link with the file itself; nothing was written to " + str(out_dir))
        for module in modules:
            shutil.copyfile(module, package / module.name)
        manifest = {
            "release_id": release_id,
            "library": library.resolve().relative_to(tmp.resolve()).as_posix(),
            "archs": archs,
            "nvcc_version": nvcc_version,
            "min_driver": min_driver,
            "abi_version": kb.ABI_VERSION,
            "source_tree_hash": tree_hash,
            "source_rev": _source_rev(root),
            "built_at": time.time(),
            "built_by": operator,
            "files": {p.relative_to(tmp).as_posix(): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()},
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        other = _move_into_place(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _write_latest(out_dir, release_id)
    if other is not None:
        return BuildResult(other, built=False)
    return BuildResult(Release(release_id, final, manifest), built=True)


def _intact(path: Path) -> Release | None:
    """The release at `path` if it matches its manifest, else None (damaged or half there)."""
    try:
        return verify_local(path)
    except CutoverError:
        return None


def _move_into_place(tmp: Path, final: Path) -> Release | None:
    """Rename the complete build `tmp` to `final`; None once it is there. When another build of the same release
    got there first (it ran at the same time), its intact release is returned and left alone: it is the same
    release, and may be being staged. A damaged one is renamed aside, then removed."""
    if final.exists():
        existing = _intact(final)
        if existing is not None:
            return existing
        aside = final.parent / f".old-{final.name}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(final, aside)
        except FileNotFoundError:
            pass  # another build moved it aside already
        except OSError as exc:
            raise BuildError(f"release {final.name}: cannot move the damaged release at {final} aside: {exc}",
                             hint=f"remove {final}, then run `cutover build` again") from exc
        shutil.rmtree(aside, ignore_errors=True)
    try:
        os.rename(tmp, final)
    except OSError as exc:  # ENOTEMPTY/EEXIST: another build moved its release in since the check above
        if not final.exists():
            raise BuildError(f"release {final.name}: cannot move the finished build into {final}: {exc}",
                             hint=f"make {final.parent} writable, then run `cutover build` again") from exc
        existing = _intact(final)
        if existing is not None:
            return existing
        others = sorted(p.name for p in final.parent.glob(f".tmp-{final.name}-*") if p != tmp)
        raise BuildError(
            f"release {final.name}: another `cutover build` of the same sources put {final} in place while this "
            f"one ran, and it does not verify ({exc}); builds still running here: {', '.join(others) or 'none'}",
            hint=f"let the other build finish, then run `cutover build` again (it removes a damaged {final})") from exc
    return None


def load_release(path: Path) -> Release:
    """Read a release directory's manifest and check that it holds directories and regular files only (the
    files' digests are checked where they land: on each host)."""
    problem = release_tree_problem(str(path)) if path.is_dir() else ""
    if problem:
        raise ConfigError(f"release {path.name}: {problem}; a release holds regular files only",
                          hint="rebuild with `cutover build` (it writes regular files only)")
    manifest_path = path / MANIFEST
    try:
        manifest = load_record(manifest_path.read_bytes(), "manifest")
    except FileNotFoundError as exc:
        raise ConfigError(f"{path} is not a release: it has no {MANIFEST}", hint="run `cutover build`") from exc
    except (OSError, ValueError) as exc:  # ValueError: not a JSON object, not UTF-8, too large or too deep
        raise ConfigError(f"{manifest_path} cannot be read as JSON: {exc}",
                          hint="rebuild with `cutover build`") from exc
    _check_manifest(manifest_path, manifest, path.resolve().name)
    return Release(manifest["release_id"], path, manifest)


def _check_manifest(manifest_path: Path, manifest, directory: str) -> None:
    """ConfigError naming the first field that stage needs and the manifest lacks or holds in a wrong form."""
    if not isinstance(manifest, dict):
        raise ConfigError(f"{manifest_path}: a manifest must be a JSON object, found {type(manifest).__name__}",
                          hint="rebuild the release with `cutover build`")
    for name, (wanted, valid) in MANIFEST_FIELDS.items():
        if name not in manifest:
            problem = "is missing"
        elif not valid(manifest[name]):
            problem = f"must be {wanted}, found {short_repr(manifest[name])}"
        else:
            continue
        raise ConfigError(f"{manifest_path}: field {name!r} {problem}",
                          hint=f"rebuild the release with `cutover build`; {name} must be {wanted}")

    def bad(field: str, problem: str, wanted: str):
        return ConfigError(f"{manifest_path}: field {field!r} {problem}",
                           hint=f"rebuild the release with `cutover build`; {wanted}")

    release_id = manifest["release_id"]
    if not RELEASE_ID_FORM.fullmatch(release_id):
        raise bad("release_id", f"must be an id as `cutover build` makes it, found {release_id!r}",
                  "a release id is 10 hex digits, '-' and 6 hex digits, e.g. 4f25ad6295-d898f2")
    if release_id != directory:
        raise bad("release_id", f"is {release_id!r}, but the release's directory is {directory!r}",
                  "a release's directory is named by its id (do not rename or copy a release under another name)")
    for name, digest in manifest["files"].items():
        if not _is_file_name(name):
            raise bad("files", f"names {name!r}, which is not {FILE_NAME_RULE}",
                      "files names the release's own files, relative to its directory")
        if not _SHA256.fullmatch(digest):
            raise bad("files", f"gives {name!r} the sha256 {digest!r}, which is not 64 lower-case hex digits",
                      "files maps each file name to its sha256")
    if manifest["library"] not in manifest["files"]:
        raise bad("library", f"is {manifest['library']!r}, which is not one of files",
                  "library must be one of files, so every host verifies it")


def verify_local(path: Path) -> Release:
    """Load a release directory and check every file against its manifest (ConfigError on any mismatch)."""
    release = load_release(path)
    manifest = release.manifest
    for name, expected in manifest["files"].items():
        file = path / name
        if not file.is_file():
            raise ConfigError(f"release {path.name}: {name} is missing", hint="rebuild with `cutover build`")
        if sha256_file(file) != expected:
            raise ConfigError(f"release {path.name}: {name} does not match its sha256 in the manifest",
                              hint="the file was changed after the build: rebuild with `cutover build`")
    return release


def releases_dir(configured: str | None = None) -> Path:
    """Where releases are built: $CUTOVER_RELEASES_DIR, else the config's releases_dir, else dist/releases."""
    return Path(os.environ.get(RELEASES_DIR_ENV) or configured or "dist/releases")


def find_release(ref: str | None, out_dir: Path) -> Release:
    """A release by directory path or id (in out_dir); default the last one built (out_dir/LATEST).
    Its files are checked against the manifest here (ConfigError) and again on every host it lands on."""
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
