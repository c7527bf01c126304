"""The control write lock: one read-modify-write of control.json at a time, whoever writes it and however.

Every writer of control.json derives its record from the file it just read: a mode change takes the next
generation, a lease renewal keeps the generation and moves the lease. Two writers at once lose a write. A
renewal that read generation N before a rollback wrote N+1 puts N back, and the ranks that had not yet read
N+1 stay armed. Two mode changes that both read N both write N+1, and a rank that applied the first never
applies the second (ranks apply strictly newer generations only).

So every writer (the CLI over SFTP or on local files, the Ansible module on the host) first takes
<state_dir>/control.json.lock: created whole and only if absent (a hard link), removed when the write is done,
held for milliseconds. A lock older than STALE_S on the host's clock was left by a writer that died or lost
its connection in the middle (one as far in the future, by a clock since stepped back): it is broken, and the
caller journals that. A writer checks that it still holds the lock just before it writes. The ranks never take
it: they only read control.json, which is always replaced whole.

Standard library only: the Ansible module imports this on the host (cutover_hostprotocol/controlwrite.py).
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Protocol

STALE_S = 5.0  # a write takes milliseconds: a lock this old was left by a writer that is gone
WAIT_S = 3 * STALE_S  # how long a writer waits for a live holder before it gives up
POLL_S = 0.05


class ControlLockBusy(Exception):
    """The lock stayed held by a live writer for WAIT_S, or was taken from us before our write."""


class FileOps(Protocol):
    """The file operations the lock needs: a cutover Transport, or LocalFiles."""

    def read_text(self, path: str) -> str | None: ...

    def create_exclusive(self, path: str, text: str) -> bool: ...

    def rename_if_exists(self, path: str, new_path: str) -> bool: ...

    def remove(self, path: str) -> None: ...


class LocalFiles:
    """FileOps on this machine's files; errors are raised as OSError."""

    def read_text(self, path: str) -> str | None:
        try:
            with open(path, errors="replace") as handle:  # bad bytes fail the JSON parse, not the reader
                return handle.read()
        except FileNotFoundError:
            return None

    def create_exclusive(self, path: str, text: str) -> bool:
        directory = os.path.dirname(path) or "."
        os.makedirs(directory, mode=0o755, exist_ok=True)
        tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
        with open(tmp, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # explicit: the umask must not make a lock file others can write
        try:
            os.link(tmp, path)  # fails if path exists; a reader sees no file or the whole text
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def rename_if_exists(self, path: str, new_path: str) -> bool:
        try:
            os.rename(path, new_path)
            return True
        except FileNotFoundError:
            return False

    def remove(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def remove_if_unchanged(files: FileOps, path: str, expected_text: str) -> bool:
    """Move `path` aside and delete it if it still holds `expected_text`; a file someone else created since is
    put back. True if the file we judged is gone (or was already)."""
    aside = f"{path}.stale-{uuid.uuid4().hex[:8]}"
    if not files.rename_if_exists(path, aside):
        return True
    moved = files.read_text(aside)
    if moved is not None and moved != expected_text:
        files.create_exclusive(path, moved)  # not the file we judged: put it back
        files.remove(aside)
        return False
    files.remove(aside)
    return True


def describe_holder(text: str, now: float) -> str:
    """Who holds a lock, from its text, for messages."""
    try:
        data = json.loads(text)
        age = now - float(data["at"])
        return f"{data.get('holder', '?')} (pid {data.get('pid', '?')} on {data.get('client', '?')}, {age:.1f} s ago)"
    except (ValueError, TypeError, KeyError):
        return "an unreadable lock file"


class ControlWriteLock:
    """`with ControlWriteLock(files, path, holder, now) as lock:` read control.json, derive the new record,
    `lock.confirm()`, write it. `now` is the host's clock; `broken` is set when a stale lock was replaced."""

    def __init__(self, files: FileOps, path: str, holder: str, now: Callable[[], float]):
        self.files, self.path, self.holder, self.now = files, path, holder, now
        self.text = ""
        self.broken: str | None = None  # describe_holder of the stale lock this one replaced

    def __enter__(self) -> "ControlWriteLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while True:
            self.text = json.dumps({"holder": self.holder, "token": uuid.uuid4().hex, "at": self.now(),
                                    "pid": os.getpid(), "client": socket.gethostname()}, sort_keys=True)
            if self.files.create_exclusive(self.path, self.text):
                return
            held = self.files.read_text(self.path)
            if held is None:
                continue
            if self._stale(held) and remove_if_unchanged(self.files, self.path, held):
                self.broken = describe_holder(held, self.now())
                continue
            if time.monotonic() >= deadline:
                raise ControlLockBusy(f"{self.path} stayed held by {describe_holder(held, self.now())} "
                                      f"for {WAIT_S:.0f} s")
            time.sleep(POLL_S)

    def confirm(self) -> None:
        """Raise ControlLockBusy unless the lock is still ours (a stall past STALE_S lets another writer in)."""
        held = self.files.read_text(self.path)
        if held != self.text:
            holder = describe_holder(held, self.now()) if held else "nobody"
            raise ControlLockBusy(f"{self.path} was taken over while we held it (now held by {holder}); "
                                  "nothing was written")

    def release(self) -> None:
        remove_if_unchanged(self.files, self.path, self.text)

    def _stale(self, text: str) -> bool:
        """Taken STALE_S ago or more, or as far in the future (a clock stepped back must not block a rollback)."""
        try:
            return abs(self.now() - float(json.loads(text)["at"])) >= STALE_S
        except (ValueError, TypeError, KeyError):
            return True  # not a lock record: left by something broken
