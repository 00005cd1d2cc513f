"""The fs store's file operations: one seam over the os calls, and the
careful forms of read, write and remove that never follow a symlink, never
block on a FIFO and never put an absolute path into an error text.

Every call the fs store makes on a path goes through an :class:`Ops`, so a
test can stand in a different file system (e.g. a case-insensitive one) at
the level of the os calls.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Union

# Plain strings on the hot paths: pathlib interns every component it parses,
# so a Path per probed id grows the interpreter's intern table for good.
StrPath = Union[str, "os.PathLike[str]"]
# Reads ``length`` bytes at ``offset`` of a session's current log.
ReadAt = Callable[[int, int], bytes]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)

# Opening a log or attachment for reading: a symlink fails (ELOOP), a FIFO
# opens without waiting for a writer (and is then refused by type).
READ_FLAGS = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC
APPEND_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _NONBLOCK | _CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW | _CLOEXEC


class Ops:
    """The os calls the fs store makes on paths (the real ones)."""

    def open(self, path: StrPath, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags, mode)

    def stat(self, path: StrPath) -> os.stat_result:
        return os.stat(path)

    def lstat(self, path: StrPath) -> os.stat_result:
        return os.lstat(path)

    def listdir(self, path: StrPath) -> list[str]:
        return os.listdir(path)

    def scandir_logs(self, path: StrPath, suffix: str,
                     listed: list[str] | None = None) -> tuple[list[str], Iterator[os.stat_result | OSError]]:
        """The entries of the directory ``path`` named ``*suffix`` (``listed``, when
        the caller has them) and, for each, its ``lstat`` (or why there is none):
        one listing, each stat relative to the open directory (no path joined or
        walked per entry). The stats come one at a time, to be consumed once, in
        order: 100k stat results held together cost ~70 MiB at a first list's peak."""
        if os.stat not in os.supports_dir_fd or os.listdir not in os.supports_fd:
            names = [n for n in os.listdir(path) if n.endswith(suffix)] if listed is None else listed
            return names, (_lstat_or_error(os.path.join(path, n)) for n in names)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
        try:
            names = [n for n in os.listdir(fd) if n.endswith(suffix)] if listed is None else listed
        except BaseException:
            os.close(fd)
            raise
        return names, _stats_at(fd, names)

    def replace(self, src: StrPath, dst: StrPath) -> None:
        os.replace(src, dst)

    def unlink(self, path: StrPath) -> None:
        os.unlink(path)

    def mkdir(self, path: StrPath) -> None:
        os.mkdir(path)

    def rmdir(self, path: StrPath) -> None:
        os.rmdir(path)


def _stats_at(fd: int, names: list[str]) -> Iterator[os.stat_result | OSError]:
    """Each name's ``lstat`` relative to the directory ``fd`` (closed at the end)."""
    try:
        for name in names:
            yield _lstat_or_error(name, fd)
    finally:
        os.close(fd)


def _lstat_or_error(path: str, dir_fd: int | None = None) -> os.stat_result | OSError:
    try:
        return os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as e:
        return e


from session_manager.errors import NotRegular as NotRegular  # noqa: E402 (defined with every other error)


def reason(e: OSError) -> str:
    """An OSError without the path it carries (error texts name files
    relative to data_dir, never absolutely)."""
    return e.strerror or type(e).__name__


def write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    if written == len(data):  # the usual case: one call, no view
        return
    view = memoryview(data)[written:]
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_dir(ops: Ops, path: StrPath) -> None:
    fd = ops.open(path, os.O_RDONLY | _CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_regular(ops: Ops, path: StrPath, flags: int = READ_FLAGS) -> int | None:
    """A descriptor of ``path`` if it is a regular file, ``None`` if it does
    not exist; :class:`NotRegular` for anything else."""
    try:
        fd = ops.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EMLINK, errno.ENXIO, errno.EISDIR):
            raise NotRegular(f"{os.path.basename(path)} is not a regular file") from None
        raise
    try:
        kind = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(kind):
        os.close(fd)
        raise NotRegular(f"{os.path.basename(path)} is not a regular file")
    return fd


def read_fd(fd: int, start: int = 0, end: int | None = None) -> bytes:
    """The bytes of ``fd`` from ``start`` to ``end`` (default: its size now)."""
    if end is None:
        end = os.fstat(fd).st_size
    chunks: list[bytes] = []
    pos = start
    while pos < end:
        chunk = os.pread(fd, min(end - pos, 1 << 24), pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks)


def read_regular(ops: Ops, path: StrPath) -> bytes | None:
    """A regular file's bytes, ``None`` if it does not exist."""
    fd = open_regular(ops, path)
    if fd is None:
        return None
    try:
        return read_fd(fd)
    finally:
        os.close(fd)


def is_symlink(ops: Ops, path: StrPath) -> bool:
    try:
        return stat.S_ISLNK(ops.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def remove_flat_folder(ops: Ops, folder: Path) -> None:
    """Remove a folder of plain files (an attachment folder) without ever
    following a symlink: a link inside is unlinked itself, a link as the
    folder is refused. Missing is fine."""
    try:
        mode = ops.lstat(folder).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        raise NotRegular(f"{folder.name} is not a folder")
    for name in ops.listdir(folder):
        with contextlib.suppress(FileNotFoundError):
            ops.unlink(folder / name)
    with contextlib.suppress(FileNotFoundError):
        ops.rmdir(folder)


def name_max(path: StrPath) -> int:
    """The longest file name the file system under ``path`` takes, in bytes."""
    try:
        return int(os.pathconf(path, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


def pread_file(path: str) -> ReadAt:
    """A :data:`ReadAt` that opens ``path`` for each read (the fallback
    when no descriptor cache is wired in)."""

    def read(offset: int, length: int) -> bytes:
        fd = os.open(path, os.O_RDONLY | _CLOEXEC)
        try:
            return os.pread(fd, length, offset)
        finally:
            os.close(fd)

    return read
