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


@dataclass(frozen=True)
class HostPaths:
    """Every host-side path, derived from the two roots (POSIX paths: hosts are Linux)."""

    cutover_root: str
    state_dir: str

    def _root(self, *parts: str) -> str:
        return str(PurePosixPath(self.cutover_root, *parts))

    def _state(self, *parts: str) -> str:
        return str(PurePosixPath(self.state_dir, *parts))

    @property
    def releases(self) -> str:
        return self._root("releases")

    def release(self, release_id: str) -> str:
        return self._root("releases", release_id)

    @property
    def current(self) -> str:
        return self._root("current")

    @property
    def previous(self) -> str:
        return self._root("previous")

    @property
    def rollback_record(self) -> str:
        """The last `rollback --to previous` switch (from/to, the new current link's identity, done)."""
        return self._state("rollback-release.json")

    @property
    def control(self) -> str:
        return self._state("control.json")

    @property
    def control_lock(self) -> str:
        """Taken by every writer of control.json for its read-modify-write (cutover/hostprotocol/controlwrite.py)."""
        return self._state("control.json.lock")

    @property
    def phase(self) -> str:
        return self._state("phase.json")

    @property
    def runtime(self) -> str:
        return self._state("runtime")

    def heartbeat(self, rank: int) -> str:
        return self._state("runtime", f"rank-{rank}.json")

    def armed_marker(self, rank: int) -> str:
        return self._state("runtime", f"armed-rank-{rank}.json")

    @property
    def stats(self) -> str:
        return self._state("stats")

    def stats_file(self, rank: int) -> str:
        return self._state("stats", f"rank-{rank}.jsonl")

    @property
    def captures(self) -> str:
        return self._state("captures")

    @property
    def verdicts(self) -> str:
        return self._state("verdicts")

    def verdict(self, run_id: str) -> str:
        return self._state("verdicts", f"{run_id}.json")

    def acceptance_record(self, release_id: str) -> str:
        return self._state("acceptance", f"{release_id}.json")

    def acceptance_log(self, release_id: str) -> str:
        return self._state("acceptance", f"{release_id}.log")

    @property
    def installed_wheel_marker(self) -> str:
        """The sha1 of the plugin wheel stage installed last (written by playbooks/stage.yml)."""
        return self._root("wheels", "installed.sha1")

    @property
    def journal(self) -> str:
        return self._state("journal.jsonl")

    @property
    def lock(self) -> str:
        return self._state("lock")


@dataclass
class ControlRecord:
    """control.json: the mode every rank must run. Rank processes apply a strictly newer generation only.

    lease_expires_at is a UNIX time; None means leaseless (only triton, and custom after the watch window).
    sample_rate N means: in shadow mode, compare every Nth verify call.
    stacks: the serving stacks (Heartbeat.stack) promote approved custom on; a rank reporting another runs
    triton (an SGLang upgrade and restart after promote). None: no such limit (triton, shadow, a forced promote
    on ranks that report no usable stack).
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

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"control mode {self.mode!r} is not one of {MODES}")
        if not isinstance(self.generation, int) or self.generation < 0:
            raise ValueError(f"control generation {self.generation!r} must be a non-negative integer")
        if not isinstance(self.sample_rate, int) or self.sample_rate < 1:
            raise ValueError(f"control sample_rate {self.sample_rate!r} must be an integer >= 1")
        lease = self.lease_expires_at
        if lease is not None and (isinstance(lease, bool) or not isinstance(lease, (int, float))
                                  or not math.isfinite(lease)):
            raise ValueError(f"control lease_expires_at {lease!r} must be a finite UNIX time or null")
        if self.stacks is not None and (not isinstance(self.stacks, list)
                                        or not all(isinstance(stack, dict) for stack in self.stacks)):
            raise ValueError(f"control stacks {self.stacks!r} must be a list of serving stacks or null")

    def lease_expired(self, now: float | None = None) -> bool:
        return self.lease_expires_at is not None and (now or time.time()) >= self.lease_expires_at

    def effective_mode(self, now: float | None = None) -> str:
        """The mode a rank must run now: the requested one, or triton once the lease ran out."""
        return "triton" if self.lease_expired(now) else self.mode

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ControlRecord":
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("control file is not a JSON object")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        record = cls(**known)
        record.validate()
        return record


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
    def from_json(cls, text: str) -> "Heartbeat":
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("heartbeat is not a JSON object")
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def read_json(path: str):
    """A host file's JSON: None when the file is missing, {} when it is not valid JSON."""
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except ValueError:
        return {}


def read_heartbeat(path: str) -> Heartbeat | None:
    """A heartbeat file, or None when it is missing or not a heartbeat."""
    try:
        with open(path) as handle:
            return Heartbeat.from_json(handle.read())
    except (OSError, ValueError, TypeError):
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
    generation a rank has seen, since ranks apply strictly newer generations only and ignore the rest."""
    seen = [beat.generation_seen for beat in heartbeats if isinstance(beat.generation_seen, int)]
    return max([current.generation if current else 0, *seen]) + 1


def sha256_file(path: str) -> str:
    """The sha256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def atomic_write_text(path: str, text: str, mode: int = 0o644) -> None:
    """Write a file so readers see the old or the new content, never a torn one (temp + fsync + rename)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
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
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
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
