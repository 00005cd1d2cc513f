"""The filesystem adapter: one append-only JSONL file per session.

``<data_dir>/<encoded_session_id>.jsonl`` holds the session's records (see
:mod:`.records`); a data_dir moves between this worker and the reference in
both directions. One mutation is one ``write`` of whole lines to a file
opened in append mode; replay is last-wins per key and skips, with a
warning, any line that is not a valid record, so a torn tail or one corrupt
line never hides the lines after it. Deleting a session removes its file.

Attachments live beside the logs, under
``<data_dir>/attachments/<encoded_session_id>/<encoded_attachment_id>.{bin,json}``,
each file written through a temp file and a rename, bytes first, metadata
last, so a listed attachment always has its bytes.

A session is replayed on first access and kept in memory, write-through,
afterwards. This worker is the single writer of its data_dir.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from ..errors import StoreError, UnstorableValue
from ._encoding import decode_id, encode_id
from ._records import committed_records, decode_record, encode_commit, encode_snapshot, last_meta
from ._state import SessionState, StateBackedStore
from .base import AttachmentMeta, Commit, Meta

log = logging.getLogger("session_manager.store.fs")

Durability = Literal["flush", "fsync"]

# What the next write must do first about a file's last line:
# an int truncates a torn tail to that length, "newline" terminates a valid
# but unterminated last record, "check" re-reads the tail after a failed write.
_TailFix = int | Literal["newline", "check"]

# A log is rewritten as its live state on load once it holds more than
# COMPACT_RATIO lines per live record (plus some slack for small sessions).
COMPACT_RATIO = 4
COMPACT_SLACK = 256


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FsStore(StateBackedStore):
    """JSONL-per-session storage under ``data_dir``.

    ``durability="flush"`` (default): every acknowledged mutation has been
    handed to the OS, so it survives a crash of this process.
    ``durability="fsync"``: it has also been forced to the disk, so it
    survives power loss.
    """

    def __init__(self, data_dir: str | os.PathLike[str], durability: Durability = "flush") -> None:
        if durability not in ("flush", "fsync"):
            raise ValueError(f"durability must be 'flush' or 'fsync', not {durability!r}")
        self.dir = Path(data_dir)
        self.durability: Durability = durability
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"create data_dir {self.dir}: {e}") from e
        if not self.dir.is_dir():
            raise StoreError(f"data_dir {self.dir} is not a directory")
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionState] = {}
        self._tail_fix: dict[str, _TailFix] = {}
        self._metas: dict[str, Meta] | None = None  # filled by the first list

    # -- paths -----------------------------------------------------------------

    def file_path(self, session_id: str) -> Path:
        return self.dir / f"{encode_id(session_id)}.jsonl"

    def attachments_dir(self, session_id: str) -> Path:
        stem = encode_id(session_id)
        if stem in (".", ".."):
            # These would name attachments/ itself or data_dir, so deleting the
            # session would wipe every session. encode_id never escapes a dot,
            # so the escaped form cannot collide with another id's folder.
            stem = stem.replace(".", "%2E")
        return self.dir / "attachments" / stem

    def _attachment_paths(self, session_id: str, attachment_id: str) -> tuple[Path, Path]:
        folder = self.attachments_dir(session_id)
        stem = encode_id(attachment_id)
        return folder / f"{stem}.json", folder / f"{stem}.bin"

    # -- loading -----------------------------------------------------------------

    def _replay(self, session_id: str, state: SessionState) -> None:
        path = self.file_path(session_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as e:
            raise StoreError(f"read {path}: {e}") from e
        lines = data.split(b"\n")

        def skip(number: int, why: str) -> None:
            log.warning("%s line %d: %s", path, number, why)

        for record in committed_records(lines, session_id, skip):
            state.apply_record(record)
        if data and not data.endswith(b"\n"):
            tail = lines[-1]
            valid = decode_record(tail, session_id) is not None
            self._tail_fix[session_id] = "newline" if valid else len(data) - len(tail)
        live = len(state.entries) + (state.meta is not None) + (state.leaf is not None)
        if len(lines) > COMPACT_RATIO * live + COMPACT_SLACK:
            self._compact(session_id, state)

    def _compact(self, session_id: str, state: SessionState) -> None:
        """Rewrite a log that is mostly superseded records (a streamed reply
        leaves one entry snapshot per update) as its live state. Temp file,
        fsync, rename: a crash leaves either the old log or the new one, and a
        failure only means the log stays long."""
        path = self.file_path(session_id)
        tmp = path.with_name(path.name + ".compact.tmp")
        try:
            body = encode_snapshot(state.meta, state.entries.values(), state.leaf)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                _write_all(fd, body)
                os.fsync(fd)  # always: a rename over the log must never expose an empty file
            finally:
                os.close(fd)
            os.replace(tmp, path)
            if self.durability == "fsync":
                _fsync_dir(self.dir)
        except (OSError, StoreError) as e:
            log.warning("%s: compaction skipped (%s); the log stays as it is", path, e)
            with contextlib.suppress(OSError):
                tmp.unlink()
            return
        self._tail_fix.pop(session_id, None)
        log.info("%s: compacted to %d live records", path, body.count(b"\n"))

    def _state(self, session_id: str, create: bool = False) -> SessionState | None:
        """The loaded state of a session, replayed on first access.

        Replay runs under the session's own lock, so loading one large
        session never stalls the others. A probe of an unknown id caches
        nothing (the file stays the truth, so dropping an empty state is safe).
        """
        with self._lock:
            state = self._sessions.get(session_id)
            if state is None:
                if (
                    not create
                    and self._metas is not None
                    and session_id not in self._metas
                    and not self.file_path(session_id).exists()
                ):
                    return None
                state = self._sessions[session_id] = SessionState()
        if not state.loaded:
            with state.lock:
                if not state.loaded:
                    self._replay(session_id, state)
                    state.loaded = True
        if not create and state.is_empty:
            with state.lock, self._lock:
                if state.is_empty and self._sessions.get(session_id) is state:
                    del self._sessions[session_id]
            return None
        return state

    # -- reads -----------------------------------------------------------------

    def list_metas(self) -> list[Meta]:
        with self._lock:
            if self._metas is None:
                self._metas = self._scan_metas()
            return list(self._metas.values())

    def _scan_metas(self) -> dict[str, Meta]:
        metas: dict[str, Meta] = {}
        try:
            names = os.listdir(self.dir)
        except OSError as e:
            raise StoreError(f"read data_dir {self.dir}: {e}") from e
        for name in names:
            if not name.endswith(".jsonl"):
                continue
            session_id = decode_id(name[: -len(".jsonl")])
            if session_id is None:
                log.warning("skipping %s: not an encoded session id", name)
                continue
            state = self._sessions.get(session_id)
            # A state still replaying (another thread, under its own lock) holds
            # a partial meta: only a loaded one is the truth, else the file is.
            loaded = state is not None and state.loaded
            meta = state.meta if state is not None and loaded else self._peek_meta(session_id)
            if meta is not None:
                metas[session_id] = meta
        return metas

    def _peek_meta(self, session_id: str) -> Meta | None:
        """The newest committed meta a file holds: the file is read whole and
        scanned from its last line back; listing never applies the entries."""
        path = self.file_path(session_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreError(f"read {path}: {e}") from e
        return last_meta(data.split(b"\n"), session_id)

    # -- writes ------------------------------------------------------------------

    def commit(self, session_id: str, commit: Commit) -> None:
        data = encode_commit(commit)
        state = self._state(session_id, create=True)
        assert state is not None
        with state.lock:
            self._append(session_id, data)
            state.apply(commit)
            if commit.meta is not None:
                with self._lock:
                    if self._metas is not None:
                        self._metas[session_id] = commit.meta

    def _append(self, session_id: str, data: bytes) -> None:
        path = self.file_path(session_id)
        fix = self._tail_fix.pop(session_id, None)
        try:
            created = not path.exists()
            # Read access too: the tail check after a failed write preads the file.
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                if fix == "check":
                    fix = self._inspect_tail(fd, session_id)
                if isinstance(fix, int):
                    os.ftruncate(fd, fix)
                elif fix == "newline":
                    data = b"\n" + data
                start = os.fstat(fd).st_size
                try:
                    _write_all(fd, data)
                    if self.durability == "fsync":
                        os.fsync(fd)
                except OSError:
                    # The caller hears "failed", so no part of it may replay later,
                    # not even a whole record that only lacks its newline.
                    os.ftruncate(fd, start)
                    raise
            finally:
                os.close(fd)
            if created and self.durability == "fsync":
                _fsync_dir(self.dir)
        except OSError as e:
            # The write may have left a torn line: look again before the next one.
            self._tail_fix[session_id] = "check"
            raise StoreError(f"append to {path}: {e}") from e

    def _inspect_tail(self, fd: int, session_id: str) -> _TailFix | None:
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return None
        end, buf = size, b""
        while True:
            start = max(0, end - 65536)
            buf = os.pread(fd, end - start, start) + buf
            cut = buf.rfind(b"\n")
            if cut >= 0 or start == 0:
                tail = buf[cut + 1 :]
                return "newline" if decode_record(tail, session_id) is not None else size - len(tail)
            end = start

    def delete_session(self, session_id: str) -> None:
        state = self._state(session_id, create=True)
        assert state is not None
        with state.lock:
            path = self.file_path(session_id)
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as e:
                raise StoreError(f"remove {path}: {e}") from e
            self._remove_tree(self.attachments_dir(session_id))
            if self.durability == "fsync":
                with contextlib.suppress(OSError):
                    _fsync_dir(self.dir)
            with self._lock:
                self._sessions.pop(session_id, None)
                self._tail_fix.pop(session_id, None)
                if self._metas is not None:
                    self._metas.pop(session_id, None)

    @staticmethod
    def _remove_tree(folder: Path) -> None:
        try:
            shutil.rmtree(folder)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StoreError(f"remove {folder}: {e}") from e

    # -- attachments ---------------------------------------------------------------

    def _write_atomically(self, path: Path, chunks: Iterable[bytes]) -> None:
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            try:
                for chunk in chunks:
                    _write_all(fd, chunk)
                if self.durability == "fsync":
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    def put_attachment(self, meta: AttachmentMeta, chunks: Iterable[bytes]) -> None:
        meta_path, bin_path = self._attachment_paths(meta["session_id"], meta["attachment_id"])
        try:
            meta_path.parent.mkdir(parents=True, exist_ok=True)
            # Bytes first, metadata last: the metadata makes it visible.
            self._write_atomically(bin_path, chunks)
            try:
                body = json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            except UnicodeEncodeError:
                with contextlib.suppress(OSError):
                    bin_path.unlink()
                raise UnstorableValue("attachment metadata contains an unpaired UTF-16 surrogate") from None
            try:
                self._write_atomically(meta_path, [body])
            except OSError:
                # Unlisted bytes would only leak disk: drop them with the failed upload.
                with contextlib.suppress(OSError):
                    bin_path.unlink()
                raise
            if self.durability == "fsync":
                _fsync_dir(meta_path.parent)
        except OSError as e:
            raise StoreError(f"write attachment {meta['attachment_id']}: {e}") from e

    def get_attachment_meta(self, session_id: str, attachment_id: str) -> AttachmentMeta | None:
        meta_path, _ = self._attachment_paths(session_id, attachment_id)
        return self._read_meta_file(meta_path)

    @staticmethod
    def _read_meta_file(path: Path) -> AttachmentMeta | None:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreError(f"read {path}: {e}") from e
        try:
            meta = json.loads(raw)
        except ValueError:
            log.warning("skipping malformed attachment metadata %s", path)
            return None
        return meta if isinstance(meta, dict) and isinstance(meta.get("attachment_id"), str) else None

    def read_attachment(self, session_id: str, attachment_id: str) -> bytes | None:
        meta_path, bin_path = self._attachment_paths(session_id, attachment_id)
        if not meta_path.exists():
            return None
        try:
            return bin_path.read_bytes()
        except FileNotFoundError:
            raise StoreError(f"attachment {attachment_id} of session {session_id} has no bytes") from None
        except OSError as e:
            raise StoreError(f"read {bin_path}: {e}") from e

    def list_attachments(self, session_id: str) -> list[AttachmentMeta]:
        folder = self.attachments_dir(session_id)
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StoreError(f"read {folder}: {e}") from e
        metas = []
        for name in names:
            if name.endswith(".json"):
                meta = self._read_meta_file(folder / name)
                if meta is not None:
                    metas.append(meta)
        return metas

    def delete_attachment(self, session_id: str, attachment_id: str) -> bool:
        meta_path, bin_path = self._attachment_paths(session_id, attachment_id)
        try:
            # Metadata first: once it is gone nothing lists the attachment.
            try:
                meta_path.unlink()
                existed = True
            except FileNotFoundError:
                existed = False
            with contextlib.suppress(FileNotFoundError):
                bin_path.unlink()
        except OSError as e:
            raise StoreError(f"remove attachment {attachment_id}: {e}") from e
        return existed
