"""File access to one host's state: the local filesystem, or paramiko SFTP with verified host keys.

This is the fast path (status reads, lease renewals, the emergency rollback). It only reads and writes the
small state files of `cutover.hostprotocol.hostlayout`; everything that deploys or installs goes through Ansible.
"""

from __future__ import annotations

import contextlib
import errno
import getpass
import os
import socket
import stat as statmod
import time
import uuid
from abc import ABC, abstractmethod
from pathlib import PurePosixPath

import paramiko

from cutover.config import Host
from cutover.hostprotocol.controlwrite import LocalFiles
from cutover.errors import HostError
from cutover.hostprotocol.hostlayout import atomic_write_text, make_dirs


CLOCK_READ_TIMEOUT_S = 15.0
# An SFTP request that gets no answer for this long fails (a hung NFS mount under the state dir, a host
# thrashing): without it one stalled host would hang status, rollback and the shadow and promote loops.
SFTP_IO_TIMEOUT_S = 30.0


class Transport(ABC):
    """Small-file operations on one host. Paths are absolute POSIX paths on that host."""

    host: str

    @abstractmethod
    def read_text(self, path: str) -> str | None:
        """The file's text, or None if it does not exist."""

    @abstractmethod
    def write_atomic(self, path: str, text: str) -> None:
        """Replace the file so readers see the old or the new text, never a torn one (temp, fsync, rename)."""

    @abstractmethod
    def append_line(self, path: str, line: str) -> None:
        """Append one line with a single O_APPEND write."""

    @abstractmethod
    def create_exclusive(self, path: str, text: str) -> bool:
        """Create the file with this text only if it does not exist; False if it already exists. The file appears
        whole: a reader never finds it empty or half written."""

    @abstractmethod
    def rename_if_exists(self, path: str, new_path: str) -> bool:
        """Rename path to a fresh name; False if path vanished first (someone else renamed it)."""

    @abstractmethod
    def remove(self, path: str) -> None:
        """Delete a file; a missing file is fine."""

    @abstractmethod
    def size(self, path: str) -> int | None:
        """The file's size in bytes, or None if it does not exist."""

    @abstractmethod
    def readlink(self, path: str) -> str | None:
        """The target of a symlink, or None if path is not a symlink."""

    @abstractmethod
    def listdir(self, path: str) -> list[str]:
        """Entry names of a directory ([] if it does not exist)."""

    @abstractmethod
    def read_tail(self, path: str, nbytes: int) -> str | None:
        """The last nbytes of a file (whole lines only), or None if it does not exist."""

    def read_from(self, path: str, offset: int) -> tuple[str, int] | None:
        """Whole lines from byte `offset` on and the offset just past the last complete line (a partial
        last line is left for the next call); None if the file does not exist."""
        data = self._read_bytes_from(path, offset)
        if data is None:
            return None
        complete = data[: data.rfind(b"\n") + 1]
        return complete.decode(errors="replace"), offset + len(complete)

    @abstractmethod
    def _read_bytes_from(self, path: str, offset: int) -> bytes | None:
        """Raw bytes from offset to the end, or None if the file does not exist."""

    def clock_offset(self) -> float:
        """Seconds the host's clock is ahead of this machine's (0: the host is this machine). Times written into
        the host's state files (leases, locks) and compared with times written there are on the host's clock."""
        return 0.0

    def close(self) -> None:
        """Release the connection (nothing to do for local files)."""

    def _error(self, action: str, path: str, exc: Exception) -> HostError:
        return HostError(f"host {self.host}: cannot {action} {path}: {exc}")

    def __enter__(self) -> "Transport":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LocalTransport(Transport):
    """A host reached with `ansible_connection: local`: plain file access. A failed operation (a full disk, a
    permission) is raised as HostError naming the host and path, as over SSH."""

    def __init__(self, host: str):
        self.host = host
        self._files = LocalFiles()

    @contextlib.contextmanager
    def _errors(self, action: str, path: str):
        try:
            yield
        except OSError as exc:
            raise self._error(action, path, exc) from exc

    def read_text(self, path: str) -> str | None:
        with self._errors("read", path):
            return self._files.read_text(path)

    def write_atomic(self, path: str, text: str) -> None:
        with self._errors("write", path):
            atomic_write_text(path, text)

    def append_line(self, path: str, line: str) -> None:
        with self._errors("append to", path):
            make_dirs(os.path.dirname(path))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, (line.rstrip("\n") + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)

    def create_exclusive(self, path: str, text: str) -> bool:
        with self._errors("create", path):
            return self._files.create_exclusive(path, text)

    def rename_if_exists(self, path: str, new_path: str) -> bool:
        with self._errors("rename", path):
            return self._files.rename_if_exists(path, new_path)

    def remove(self, path: str) -> None:
        with self._errors("remove", path):
            self._files.remove(path)

    def size(self, path: str) -> int | None:
        with self._errors("stat", path):
            try:
                return os.stat(path).st_size
            except FileNotFoundError:
                return None

    def readlink(self, path: str) -> str | None:
        try:
            return os.readlink(path)
        except OSError:
            return None

    def listdir(self, path: str) -> list[str]:
        with self._errors("list", path):
            try:
                return sorted(os.listdir(path))
            except FileNotFoundError:
                return []

    def _read_bytes_from(self, path: str, offset: int) -> bytes | None:
        with self._errors("read", path):
            try:
                with open(path, "rb") as handle:
                    handle.seek(offset)
                    return handle.read()
            except FileNotFoundError:
                return None

    def read_tail(self, path: str, nbytes: int) -> str | None:
        with self._errors("read", path):
            try:
                with open(path, "rb") as handle:
                    size = handle.seek(0, os.SEEK_END)
                    handle.seek(max(0, size - nbytes - 1))
                    return _whole_lines(handle.read(), size > nbytes)
            except FileNotFoundError:
                return None


class SSHTransport(Transport):
    """A remote host over paramiko SFTP; its host key must be in known_hosts (never auto-added)."""

    def __init__(self, host: Host):
        self.host = host.name
        self._offset: float | None = None
        self._client = connect(host)
        try:
            self._sftp = self._client.open_sftp()
            self._sftp.get_channel().settimeout(SFTP_IO_TIMEOUT_S)
        except (paramiko.SSHException, OSError) as exc:
            self._client.close()
            raise HostError(f"host {host.name}: cannot open an SFTP session: {exc}",
                            hint="check that the host's sshd enables the sftp subsystem") from exc

    def close(self) -> None:
        self._client.close()

    def clock_offset(self) -> float:
        """Measured once per session: the host's `date +%s.%N` against the midpoint of the round trip."""
        if self._offset is None:
            before = time.time()
            try:
                _, stdout, _ = self._client.exec_command("date +%s.%N", timeout=CLOCK_READ_TIMEOUT_S)
                answer = stdout.read().decode(errors="replace").strip()
            except (OSError, paramiko.SSHException) as exc:
                raise HostError(f"host {self.host}: cannot read its clock: {exc}",
                                hint="cutover runs `date` on the host over SSH: check that the login allows "
                                     "commands") from exc
            after = time.time()
            try:
                self._offset = float(answer) - (before + after) / 2
            except ValueError as exc:
                raise HostError(f"host {self.host}: `date +%s.%N` answered {answer!r}, not a time",
                                hint="cutover needs GNU date on the host (coreutils)") from exc
        return self._offset

    def read_text(self, path: str) -> str | None:
        try:
            with self._sftp.open(path, "r") as handle:
                return handle.read().decode(errors="replace")  # bad bytes fail the JSON parse, not the reader
        except FileNotFoundError:
            return None
        except (OSError, paramiko.SSHException) as exc:
            raise self._error("read", path, exc) from exc

    def write_atomic(self, path: str, text: str) -> None:
        tmp = self._write_temp(path, text)
        try:
            self._sftp.posix_rename(tmp, path)
        except (OSError, paramiko.SSHException) as exc:
            self._remove_quietly(tmp)
            raise self._error("write", path, exc) from exc

    def _write_temp(self, path: str, text: str) -> str:
        """A new temporary file beside `path` holding `text`, synced to disk; its path."""
        self._makedirs(str(PurePosixPath(path).parent))
        tmp = str(PurePosixPath(path).parent / f".tmp-{uuid.uuid4().hex}")
        try:
            with self._sftp.open(tmp, "w") as handle:
                handle.write(text.encode())
                handle.flush()
                self._fsync(handle)
            self._sftp.chmod(tmp, 0o644)
        except (OSError, paramiko.SSHException) as exc:
            self._remove_quietly(tmp)
            raise self._error("write", path, exc) from exc
        return tmp

    def _remove_quietly(self, path: str) -> None:
        try:
            self._sftp.remove(path)
        except (OSError, paramiko.SSHException):
            pass

    def append_line(self, path: str, line: str) -> None:
        self._makedirs(str(PurePosixPath(path).parent))
        try:
            with self._sftp.open(path, "a") as handle:
                handle.write((line.rstrip("\n") + "\n").encode())
                handle.flush()
                self._fsync(handle)
        except (OSError, paramiko.SSHException) as exc:
            raise self._error("append to", path, exc) from exc

    def create_exclusive(self, path: str, text: str) -> bool:
        tmp = self._write_temp(path, text)
        try:
            # OpenSSH's hardlink@openssh.com is link(2): it fails if path exists; a reader sees no file or all of it
            self._sftp._request(paramiko.sftp.CMD_EXTENDED, "hardlink@openssh.com", tmp, path)
            return True
        except (OSError, paramiko.SSHException) as exc:
            if self._exists(path):
                return False
            raise self._error("create", path, exc) from exc
        finally:
            self._remove_quietly(tmp)

    def rename_if_exists(self, path: str, new_path: str) -> bool:
        try:
            self._sftp.rename(path, new_path)
            return True
        except FileNotFoundError:
            return False
        except (OSError, paramiko.SSHException) as exc:
            if not self._exists(path):
                return False
            raise self._error("rename", path, exc) from exc

    def remove(self, path: str) -> None:
        try:
            self._sftp.remove(path)
        except FileNotFoundError:
            pass
        except (OSError, paramiko.SSHException) as exc:
            raise self._error("remove", path, exc) from exc

    def size(self, path: str) -> int | None:
        try:
            return self._sftp.stat(path).st_size
        except FileNotFoundError:
            return None
        except (OSError, paramiko.SSHException) as exc:
            raise self._error("stat", path, exc) from exc

    def readlink(self, path: str) -> str | None:
        try:
            return self._sftp.readlink(path)
        except (OSError, paramiko.SSHException) as exc:
            if self._session_lost(exc):
                raise self._error("read the link", path, exc) from exc
            return None  # missing, or not a link

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(self._sftp.listdir(path))
        except FileNotFoundError:
            return []
        except (OSError, paramiko.SSHException) as exc:
            raise self._error("list", path, exc) from exc

    def read_tail(self, path: str, nbytes: int) -> str | None:
        try:
            with self._sftp.open(path, "r") as handle:
                size = handle.stat().st_size
                handle.seek(max(0, size - nbytes - 1))
                return _whole_lines(handle.read(), size > nbytes)
        except FileNotFoundError:
            return None
        except (OSError, paramiko.SSHException) as exc:
            raise self._error("read", path, exc) from exc

    def _read_bytes_from(self, path: str, offset: int) -> bytes | None:
        try:
            with self._sftp.open(path, "r") as handle:
                handle.seek(offset)
                return handle.read()
        except FileNotFoundError:
            return None
        except (OSError, paramiko.SSHException) as exc:
            raise self._error("read", path, exc) from exc

    def _exists(self, path: str) -> bool:
        try:
            self._sftp.stat(path)
            return True
        except (OSError, paramiko.SSHException) as exc:
            if self._session_lost(exc):
                raise self._error("stat", path, exc) from exc
            return False

    def _session_lost(self, exc: Exception) -> bool:
        """Whether `exc` came from the session (dropped, timed out) rather than from the file."""
        transport = self._client.get_transport()
        return (isinstance(exc, (paramiko.SSHException, TimeoutError)) or transport is None
                or not transport.is_active())

    def _error(self, action: str, path: str, exc: Exception) -> HostError:
        if isinstance(exc, TimeoutError):  # the request stream is out of step now: a caller reconnects
            self.close()
            return HostError(f"host {self.host}: cannot {action} {path}: no answer within {SFTP_IO_TIMEOUT_S:g} s",
                             hint="is the host overloaded, or its state directory on a hung mount?")
        return super()._error(action, path, exc)

    def _makedirs(self, directory: str) -> None:
        missing = []
        current = PurePosixPath(directory)
        while True:
            try:
                if not statmod.S_ISDIR(self._sftp.stat(str(current)).st_mode):
                    raise HostError(f"host {self.host}: {current} exists and is not a directory")
                break
            except FileNotFoundError:
                missing.append(current)
                current = current.parent
            except (OSError, paramiko.SSHException) as exc:  # a dropped session: HostError, so callers reconnect
                raise self._error("stat", str(current), exc) from exc
        for path in reversed(missing):
            try:
                self._sftp.mkdir(str(path), 0o755)
            except (OSError, paramiko.SSHException) as exc:
                if not self._exists(str(path)):
                    raise self._error("create directory", str(path), exc) from exc

    def _fsync(self, handle: paramiko.SFTPFile) -> None:
        """fsync through OpenSSH's fsync@openssh.com extension (paramiko has no public call for it)."""
        self._sftp._request(paramiko.sftp.CMD_EXTENDED, "fsync@openssh.com", handle.handle)


def connect(host: Host) -> paramiko.SSHClient:
    """An SSH client to the host, its key verified against system and inventory known_hosts."""
    client = paramiko.SSHClient()
    client.load_system_host_keys()
    known_hosts = host.known_hosts
    if os.path.exists(known_hosts):
        client.load_system_host_keys(known_hosts)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    where = f"{host.address}:{host.port}"
    key_name = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
    try:
        client.connect(
            host.address,
            port=host.port,
            username=host.user,
            key_filename=host.key_file,
            timeout=host.connect_timeout_s,
            banner_timeout=host.connect_timeout_s,
            auth_timeout=host.connect_timeout_s,
            allow_agent=host.key_file is None,
            look_for_keys=host.key_file is None,
        )
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise HostError(
            f"host {host.name} ({where}): its host key does not match the one in known_hosts ({known_hosts}): "
            f"refusing to connect",
            hint=f"if the host was legitimately re-keyed, verify the new fingerprint out of band, then "
            f"`ssh-keygen -R '{key_name}' -f {known_hosts}` and add the new key",
        ) from exc
    except paramiko.AuthenticationException as exc:
        client.close()
        raise HostError(
            f"host {host.name} ({where}): authentication failed as user {host.user or getpass.getuser()}",
            hint="check ansible_user and ansible_ssh_private_key_file in the inventory",
        ) from exc
    except paramiko.SSHException as exc:
        client.close()
        if "not found in known_hosts" in str(exc):
            raise HostError(
                f"host {host.name} ({where}): its host key is not in known_hosts ({known_hosts}): refusing to connect",
                hint=f"verify the host's fingerprint, then add it: `ssh-keyscan -p {host.port} {host.address} >> "
                f"{known_hosts}` (or set cutover_known_hosts in the inventory)",
            ) from exc
        raise HostError(f"host {host.name} ({where}) is unreachable: {exc}") from exc
    except (OSError, socket.timeout) as exc:
        client.close()
        reason = _connect_failure(exc)
        raise HostError(
            f"host {host.name} ({where}) is unreachable: {reason}",
            hint="check ansible_host/ansible_port in the inventory and that sshd runs there",
        ) from exc
    client.get_transport().set_keepalive(15)  # long ack waits and shadow runs keep an idle session open
    return client


def open_transport(host: Host) -> Transport:
    """The transport for a host: local file access or SSH, as its inventory entry says."""
    return LocalTransport(host.name) if host.is_local else SSHTransport(host)


def _connect_failure(exc: OSError) -> str:
    """A short reason for a failed TCP connect (paramiko wraps per-address errors)."""
    inner = list(getattr(exc, "errors", {}).values()) or [exc]
    reasons = {os.strerror(e.errno) if getattr(e, "errno", None) in errno.errorcode else (str(e) or "timed out")
               for e in inner}
    return "; ".join(sorted(reasons))


def _whole_lines(data: bytes, truncated: bool) -> str:
    """Drop the partial first line of a tail window (the window starts one byte early, so a window that
    begins exactly at a line start keeps that line)."""
    text = data.decode(errors="replace")
    if truncated:
        text = text.split("\n", 1)[1] if "\n" in text else ""
    return text
