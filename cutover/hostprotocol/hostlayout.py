"""The on-host file layout and record formats shared by the operator side and the plugin runtime.

Standard library only: the plugin imports this inside SGLang's process, where typer, ansible and paramiko
are absent. Everything that names a path or a field of a host-side file lives here, once.

    <cutover_root>/releases/<release_id>/   kernel .so + manifest.json
    <cutover_root>/current, previous         symlinks, swapped atomically
    <state_dir>/control.json                 ControlRecord: what the operator asks every rank to do
    <state_dir>/control.json.lock            held for each write of control.json (cutover/hostprotocol/controlwrite.py)
    <state_dir>/phase.json                   workflow phase of this host (operator side only)
    <state_dir>/runtime/rank-<r>.json        heartbeat of each rank
    <state_dir>/runtime/armed-rank-<r>.json  crash-containment marker: rank armed a non-Triton mode
    <state_dir>/stats/rank-<r>.jsonl         divergence stats per interval, per layer
    <state_dir>/captures/                    bounded captures of the worst divergent inputs
    <state_dir>/verdicts/<run_id>.json       shadow verdicts
    <state_dir>/acceptance/<release_id>.*    the release's kernel acceptance on this host's GPU (record, log)
    <state_dir>/rollback-release.json        the last `rollback --to previous` switch, so a re-run never undoes it
    <state_dir>/journal.jsonl                append-only audit log
    <state_dir>/lock                         one operator at a time, with owner and expiry
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath

SCHEMA_VERSION = 1
MODES = ("triton", "shadow", "custom")
DEFAULT_STATE_DIR = "/var/lib/cutover"
DEFAULT_CUTOVER_ROOT = "/opt/cutover"
STATE_DIR_ENV = "CUTOVER_STATE_DIR"
CUTOVER_ROOT_ENV = "CUTOVER_ROOT"
# Bounds every host-side record is held to, on both sides: a value outside them is a corrupt record.
MAX_GENERATION = 2**53 - 1  # exact in every JSON reader; a generation above it is absurd, never applied
MAX_LEASE_AHEAD_S = 900.0  # a lease ends at most this long after the host's clock (plugin clamps, CLI refuses)
MAX_RECORD_BYTES = 1 << 20  # a control, heartbeat, lock or phase file larger than this is corrupt
MAX_RECORD_DEPTH = 32  # JSON nesting deeper than this is corrupt (no record nests beyond a few levels)


class _Path:
    """A HostPaths attribute: `parts` under one of its roots (a dataclass field's name). A part with `{}` makes it
    a method whose argument (a rank, a release or run id) fills the `{}`; otherwise it is the path itself.
    A part that is only `{}` is the argument itself, so an id that is not a string is refused (TypeError)."""

    def __init__(self, root: str, *parts: str):
        self.root, self.parts = root, parts

    def __get__(self, paths, owner=None):
        if paths is None:
            return self
        root = getattr(paths, self.root)
        if any("{}" in part for part in self.parts):
            return lambda key: str(PurePosixPath(root, *(key if part == "{}" else part.format(key)
                                                         for part in self.parts)))
        return str(PurePosixPath(root, *self.parts))


@dataclass(frozen=True)
class HostPaths:
    """Every host-side path, derived from the two roots (POSIX paths: hosts are Linux); the module docstring
    draws the layout."""

    cutover_root: str
    state_dir: str

    releases = _Path("cutover_root", "releases")
    release = _Path("cutover_root", "releases", "{}")  # (release_id)
    current = _Path("cutover_root", "current")
    previous = _Path("cutover_root", "previous")
    # the sha1 of the plugin wheel stage installed last (written by playbooks/stage.yml)
    installed_wheel_marker = _Path("cutover_root", "wheels", "installed.sha1")
    # the last `rollback --to previous` switch (from/to, the new current link's identity, done)
    rollback_record = _Path("state_dir", "rollback-release.json")
    control = _Path("state_dir", "control.json")
    # taken by every writer of control.json for its read-modify-write (cutover/hostprotocol/controlwrite.py)
    control_lock = _Path("state_dir", "control.json.lock")
    phase = _Path("state_dir", "phase.json")
    runtime = _Path("state_dir", "runtime")
    heartbeat = _Path("state_dir", "runtime", "rank-{}.json")  # (rank)
    armed_marker = _Path("state_dir", "runtime", "armed-rank-{}.json")  # (rank)
    stats = _Path("state_dir", "stats")
    stats_file = _Path("state_dir", "stats", "rank-{}.jsonl")  # (rank)
    captures = _Path("state_dir", "captures")
    verdicts = _Path("state_dir", "verdicts")
    verdict = _Path("state_dir", "verdicts", "{}.json")  # (run_id)
    acceptance_record = _Path("state_dir", "acceptance", "{}.json")  # (release_id)
    acceptance_log = _Path("state_dir", "acceptance", "{}.log")  # (release_id)
    journal = _Path("state_dir", "journal.jsonl")
    lock = _Path("state_dir", "lock")


def load_record(text: str | bytes, what: str) -> dict:
    """One host-side JSON record as a dict; ValueError naming `what` for anything else: bytes that are not UTF-8,
    more than MAX_RECORD_BYTES, nesting deeper than MAX_RECORD_DEPTH, numbers Python refuses, not an object."""
    if len(text) > MAX_RECORD_BYTES:
        raise ValueError(f"{what} is larger than {MAX_RECORD_BYTES} bytes")
    try:
        if isinstance(text, bytes):
            text = text.decode()
        if _nesting_depth(text) > MAX_RECORD_DEPTH:
            raise ValueError(f"nested deeper than {MAX_RECORD_DEPTH} levels")
        data = json.loads(text)
    except (ValueError, RecursionError, MemoryError) as exc:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"{what} is not valid JSON: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} is not a JSON object")
    return data


def _nesting_depth(text: str) -> int:
    """The deepest [ or { nesting of a JSON text, counted without parsing (so no recursion can overflow)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def finite_number(value) -> bool:
    """A real, finite JSON number (bool excluded): what every time and duration field must hold."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def generation_ok(value) -> bool:
    """A generation a rank may apply: an integer 0 .. MAX_GENERATION."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_GENERATION


@dataclass
class ControlRecord:
    """control.json: the mode every rank must run. Rank processes apply a strictly newer generation only.

    lease_expires_at is a UNIX time; None means leaseless (only triton, and custom after the watch window).
    sample_rate N means: in shadow mode, compare every Nth verify call.
    stacks: the serving stacks (Heartbeat.stack) promote approved custom on; a rank reporting another runs
    triton (an SGLang upgrade and restart after promote). None: no such limit (triton, shadow, a forced promote
    on ranks that report no usable stack).
    resets: a triton record that re-bases the generation counter (rollback writes one when the next generation
    would pass MAX_GENERATION): a rank takes it even below the generation it saw; only triton can reset.
    """

    mode: str = "triton"
    generation: int = 0
    lease_expires_at: float | None = None
    release_id: str | None = None
    sample_rate: int = 1
    set_by: str = ""
    set_at: float = 0.0
    reason: str = ""
    schema: int = SCHEMA_VERSION
    stacks: list | None = None
    resets: bool = False

    def validate(self) -> None:
        if not isinstance(self.mode, str) or self.mode not in MODES:
            raise ValueError(f"control mode {short_repr(self.mode)} is not one of {MODES}")
        if not generation_ok(self.generation):
            raise ValueError(f"control generation {short_repr(self.generation)} must be an integer "
                             f"0 .. {MAX_GENERATION}")
        if not isinstance(self.sample_rate, int) or isinstance(self.sample_rate, bool) or \
                not 1 <= self.sample_rate <= MAX_GENERATION:
            raise ValueError(f"control sample_rate {short_repr(self.sample_rate)} must be an integer >= 1")
        if self.lease_expires_at is not None and not finite_number(self.lease_expires_at):
            raise ValueError(f"control lease_expires_at {short_repr(self.lease_expires_at)} must be a finite UNIX time "
                             "or null")
        if self.release_id is not None and not isinstance(self.release_id, str):
            raise ValueError(f"control release_id {short_repr(self.release_id)} must be a string or null")
        for name in ("set_by", "reason"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"control {name} {short_repr(getattr(self, name))} must be a string")
        if not finite_number(self.set_at):
            raise ValueError(f"control set_at {short_repr(self.set_at)} must be a finite UNIX time")
        if self.stacks is not None and (not isinstance(self.stacks, list)
                                        or not all(isinstance(stack, dict) for stack in self.stacks)):
            raise ValueError(f"control stacks {short_repr(self.stacks)} must be a list of serving stacks or null")
        if not isinstance(self.resets, bool) or (self.resets and self.mode != "triton"):
            raise ValueError(f"control resets {short_repr(self.resets)} must be a boolean, true only in mode triton")

    def lease_expired(self, now: float | None = None) -> bool:
        return self.lease_expires_at is not None and (now or time.time()) >= self.lease_expires_at

    def effective_mode(self, now: float | None = None) -> str:
        """The mode a rank must run now: the requested one, or triton once the lease ran out."""
        return "triton" if self.lease_expired(now) else self.mode

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> "ControlRecord":
        """The record of a control file; ValueError for anything that is not a valid one."""
        data = load_record(text, "control file")
        record = cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
        record.validate()
        return record


def short_repr(value) -> str:
    """A value for a message, cut short (a corrupt file may hold a megabyte in one field)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long for str()
        return f"<{type(value).__name__} too large to print>"
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass
class Heartbeat:
    """runtime/rank-<r>.json, rewritten by each rank's control thread at every poll."""

    rank: int
    pid: int
    host: str
    mode_active: str
    generation_seen: int
    release_id: str | None
    kernel: str  # "cuda" or "reference (no GPU)": what actually computes the custom path
    reason: str = ""  # why mode_active differs from what control.json asks, if it does
    last_verify_at: float | None = None
    counters: dict = field(default_factory=dict)
    written_at: float = 0.0
    schema: int = SCHEMA_VERSION
    stack: dict = field(default_factory=dict)  # cutover.servingstack.serving_stack: SGLang, torch, plugin, GPU

    @property
    def stopped(self) -> bool:
        """The final heartbeat of a clean exit (counters["stopped"]): the rank is gone, however fresh the file."""
        return bool(self.counters.get("stopped"))

    def live(self, stale_s: float, now: float | None = None) -> bool:
        """Written within the last stale_s seconds (host clock) by a rank that has not stopped."""
        return not self.stopped and (now or time.time()) - self.written_at <= stale_s

    def acknowledges(self, generation: int, mode: str) -> bool:
        """This rank applied `generation` (or a newer one) and runs `mode`: the request is in effect here."""
        return self.generation_seen >= generation and self.mode_active == mode

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Heartbeat":
        """The heartbeat of a file; ValueError for anything that is not a valid one."""
        data = load_record(text, "heartbeat")
        try:
            beat = cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
        except TypeError as exc:  # a required field is missing
            raise ValueError(f"heartbeat: {exc}") from None
        problem = beat.problem()
        if problem:
            raise ValueError(f"heartbeat {problem}")
        return beat

    def problem(self) -> str:
        """What makes this heartbeat unusable ("" when nothing does)."""
        ints = {"rank": self.rank, "pid": self.pid, "generation_seen": self.generation_seen}
        for name, value in ints.items():
            if not isinstance(value, int) or isinstance(value, bool) or not -1 <= value <= MAX_GENERATION:
                return f"{name} {short_repr(value)} is not an integer in range"
        if not isinstance(self.mode_active, str) or self.mode_active not in MODES:
            return f"mode_active {short_repr(self.mode_active)} is not one of {MODES}"
        if not finite_number(self.written_at):
            return f"written_at {short_repr(self.written_at)} is not a finite UNIX time"
        if self.last_verify_at is not None and not finite_number(self.last_verify_at):
            return f"last_verify_at {short_repr(self.last_verify_at)} is not a finite UNIX time"
        for name in ("host", "kernel", "reason"):
            if not isinstance(getattr(self, name), str):
                return f"{name} {short_repr(getattr(self, name))} is not a string"
        if self.release_id is not None and not isinstance(self.release_id, str):
            return f"release_id {short_repr(self.release_id)} is not a string"
        if not isinstance(self.counters, dict) or not isinstance(self.stack, dict):
            return "counters and stack must be JSON objects"
        return ""


def read_json(path: str):
    """A host file's JSON object: None when the file is missing, {} when it is not a usable JSON object."""
    try:
        with open(path, "rb") as handle:
            return load_record(handle.read(MAX_RECORD_BYTES + 1), path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


def read_heartbeat(path: str) -> Heartbeat | None:
    """A heartbeat file, or None when it is missing or not a heartbeat."""
    try:
        with open(path, "rb") as handle:
            return Heartbeat.from_json(handle.read(MAX_RECORD_BYTES + 1))
    except (OSError, ValueError):
        return None


def live_heartbeats(paths: HostPaths, tp_size: int, stale_s: float) -> dict[int, Heartbeat]:
    """The live heartbeats (Heartbeat.live) of ranks 0 .. tp_size-1, by rank."""
    now = time.time()
    beats = {rank: read_heartbeat(paths.heartbeat(rank)) for rank in range(tp_size)}
    return {rank: beat for rank, beat in beats.items() if beat and beat.live(stale_s, now)}


def recorded_heartbeats(paths: HostPaths) -> list[Heartbeat]:
    """The last heartbeat of every rank that left one, live, stale or stopped: what each rank last saw."""
    try:
        names = sorted(os.listdir(paths.runtime))
    except OSError:
        return []
    beats = [read_heartbeat(os.path.join(paths.runtime, name)) for name in names
             if name.startswith("rank-") and name.endswith(".json")]
    return [beat for beat in beats if beat]


def next_generation(current: ControlRecord | None, heartbeats: Iterable[Heartbeat]) -> int:
    """The generation of the next control record: above the file's (None: missing or corrupt) and above every
    generation a rank has seen, since ranks apply strictly newer generations only and ignore the rest. Past
    MAX_GENERATION it is RESET_GENERATION (generation_resets): only a triton record may be written there, with
    `resets` set."""
    following = _following_generation(current, heartbeats)
    return following if following <= MAX_GENERATION else RESET_GENERATION


def generation_resets(current: ControlRecord | None, heartbeats: Iterable[Heartbeat]) -> bool:
    """Whether the next generation restarts the count (next_generation is RESET_GENERATION past the maximum)."""
    return _following_generation(current, heartbeats) > MAX_GENERATION


def _following_generation(current: ControlRecord | None, heartbeats: Iterable[Heartbeat]) -> int:
    seen = [beat.generation_seen for beat in heartbeats if generation_ok(beat.generation_seen)]
    return max([current.generation if current else 0, *seen]) + 1


RESET_GENERATION = 1


def triton_in_force(current: ControlRecord | None, heartbeats: Iterable[Heartbeat]) -> bool:
    """control.json asks for triton with a generation no rank has passed (ranks ignore older generations)."""
    return (current is not None and current.mode == "triton"
            and all(beat.generation_seen <= current.generation for beat in heartbeats))


def lease_bound(now: float) -> float:
    """The latest lease end a rank obeys at `now` (host clock): MAX_LEASE_AHEAD_S ahead."""
    return now + MAX_LEASE_AHEAD_S


def release_tree_problem(directory: str) -> str:
    """"" when every entry under the release `directory` is a directory or a regular file with one link; else
    which entry is not (a symbolic link, a device, socket or pipe, or a file hard-linked elsewhere), so nothing a
    release names can reach outside it."""
    if os.path.islink(directory):
        return f"{directory} is a symbolic link"
    for parent, dirs, files in os.walk(directory):  # a symlinked directory is listed in dirs, never entered
        for name in sorted(dirs + files):
            path = os.path.join(parent, name)
            info = os.lstat(path)
            shown = os.path.relpath(path, directory)
            if stat.S_ISLNK(info.st_mode):
                return f"{shown} is a symbolic link (to {os.readlink(path)})"
            if stat.S_ISDIR(info.st_mode):
                continue
            if not stat.S_ISREG(info.st_mode):
                return f"{shown} is not a regular file (a device, socket or pipe)"
            if info.st_nlink != 1:
                return f"{shown} has {info.st_nlink} hard links (a release file has exactly one)"
    return ""


def sha256_file(path: str) -> str:
    """The sha256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def make_dirs(directory: str, mode: int = 0o755) -> None:
    """Create `directory` and its missing parents with exactly `mode`, whatever the umask (existing ones are left
    as they are)."""
    missing = []
    path = os.path.abspath(directory)
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        missing.append(path)
        path = os.path.dirname(path)
    for path in reversed(missing):
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            continue
        os.chmod(path, mode)


def atomic_write_text(path: str, text: str, mode: int = 0o644) -> None:
    """Write a file so readers see the old or the new content, never a torn one (temp + fsync + rename)."""
    directory = os.path.dirname(path) or "."
    make_dirs(directory)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def append_jsonl(path: str, record: dict) -> None:
    """Append one JSON line with a single write (O_APPEND), so concurrent appenders never interleave."""
    make_dirs(os.path.dirname(path) or ".")
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def journal_entry(action: str, actor: str, **details) -> dict:
    """One journal.jsonl record: when, who, what, and the action's own details."""
    return {"ts": time.time(), "actor": actor, "action": action, **details}


# Relative-L2 histogram of shadow divergence: bucket k counts values below REL_L2_BIN_EDGES[k] (and at or
# above the previous edge); the last bucket counts values >= 1.0. Log-spaced, 4 buckets per decade.
REL_L2_BIN_EDGES = tuple(10.0 ** (-6 + i / 4) for i in range(25))
