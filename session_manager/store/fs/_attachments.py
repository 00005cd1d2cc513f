"""The fs store's attachment files.

``<data_dir>/attachments/<encoded_session_id>/<encoded_attachment_id>.{bin,json}``,
each file written through a temp file and a rename, bytes first, metadata
last, so a listed attachment always has its bytes. Writes and deletes never
go through a symlink: a symlinked ``attachments/`` or session folder is
refused, files are opened with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from ...errors import StoreError, UnstorableValue
from ..base import AttachmentMeta
from ._datadir import DataDir
from ._encoding import encode_id
from ._fileops import CREATE_FLAGS, NotRegular, fsync_dir, is_symlink, read_regular, reason, write_all

log = logging.getLogger("session_manager.store.fs")

_TMP = ".tmp"
_LONGEST = len(".json" + _TMP)


class Attachments:
    """The fs store's attachment files (its part; :class:`~._datadir.DataDir` is what it reads)."""

    def __init__(self, data: DataDir) -> None:
        self._d = data

    def attachments_dir(self, session_id: str) -> Path:
        stem = self._d.stem(session_id)
        if stem in (".", ".."):
            # These would name attachments/ itself or data_dir, so deleting the
            # session would wipe every session. encode_id never escapes a dot,
            # so the escaped form cannot collide with another id's folder.
            stem = stem.replace(".", "%2E")
        return self._d.dir / "attachments" / stem

    def _attachment_paths(self, session_id: str, attachment_id: str) -> tuple[Path, Path]:
        folder = self.attachments_dir(session_id)
        stem = encode_id(attachment_id)
        if len(stem) + _LONGEST > self._d.name_max:
            raise UnstorableValue(f"attachment_id is too long: it takes {len(stem)} bytes as a file name")
        return folder / f"{stem}.json", folder / f"{stem}.bin"

    def _safe_folder(self, folder: Path) -> None:
        if is_symlink(self._d.ops, folder.parent) or is_symlink(self._d.ops, folder):
            raise StoreError("attachments folder is a symbolic link; refusing to write through it")

    def _write_atomically(self, path: Path, chunks: Iterable[bytes]) -> None:
        tmp = path.with_name(path.name + _TMP)
        fd = self._d.ops.open(tmp, CREATE_FLAGS, 0o644)
        try:
            try:
                for chunk in chunks:
                    write_all(fd, chunk)
                if self._d.durability == "fsync":
                    os.fsync(fd)
            finally:
                os.close(fd)
            self._d.ops.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                self._d.ops.unlink(tmp)
            raise

    def _mkdirs(self, folder: Path) -> None:
        for path in (folder.parent, folder):
            with contextlib.suppress(FileExistsError):
                self._d.ops.mkdir(path)

    def put_attachment(self, meta: AttachmentMeta, chunks: Iterable[bytes]) -> None:
        self._d.writable()
        meta_path, bin_path = self._attachment_paths(meta["session_id"], meta["attachment_id"])
        try:
            self._safe_folder(meta_path.parent)
            self._mkdirs(meta_path.parent)
            self._safe_folder(meta_path.parent)  # nothing swapped a link in meanwhile
            # Bytes first, metadata last: the metadata makes it visible.
            self._write_atomically(bin_path, chunks)
            try:
                body = json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            except UnicodeEncodeError:
                with contextlib.suppress(OSError):
                    self._d.ops.unlink(bin_path)
                raise UnstorableValue("attachment metadata contains an unpaired UTF-16 surrogate") from None
            try:
                self._write_atomically(meta_path, [body])
            except OSError:
                # Unlisted bytes would only leak disk: drop them with the failed upload.
                with contextlib.suppress(OSError):
                    self._d.ops.unlink(bin_path)
                raise
            if self._d.durability == "fsync":
                # The files' names, then the folders' own: either folder may have been made by
                # this call, or by an earlier one in flush mode that synced neither.
                folder = meta_path.parent
                for path in (folder, folder.parent, folder.parent.parent):
                    fsync_dir(self._d.ops, path)
        except OSError as e:
            self._d.writable()  # (a removed data_dir: say so, not just "no such file")
            raise StoreError(f"write attachment {meta['attachment_id']}: {reason(e)}") from None
        self._d.writable()  # before the answer: still in the data_dir this store locked

    def get_attachment_meta(self, session_id: str, attachment_id: str) -> AttachmentMeta | None:
        meta_path, _ = self._attachment_paths(session_id, attachment_id)
        return self._read_meta_file(meta_path)

    def _read_meta_file(self, path: Path) -> AttachmentMeta | None:
        try:
            raw = read_regular(self._d.ops, path)
        except NotRegular:
            log.warning("skipping attachment metadata %s: not a regular file", path.name)
            return None
        except OSError as e:
            raise StoreError(f"read attachment metadata {path.name}: {reason(e)}") from None
        if raw is None:
            return None
        try:
            meta = json.loads(raw)
        except ValueError:
            log.warning("skipping malformed attachment metadata %s", path.name)
            return None
        return meta if isinstance(meta, dict) and isinstance(meta.get("attachment_id"), str) else None

    def read_attachment(self, session_id: str, attachment_id: str) -> bytes | None:
        meta_path, bin_path = self._attachment_paths(session_id, attachment_id)
        if self._read_meta_file(meta_path) is None:
            return None
        try:
            data = read_regular(self._d.ops, bin_path)
        except OSError as e:
            raise StoreError(f"read attachment {attachment_id}: {reason(e)}") from None
        if data is None:
            raise StoreError(f"attachment {attachment_id} has no bytes")
        return data

    def list_attachments(self, session_id: str) -> list[AttachmentMeta]:
        folder = self.attachments_dir(session_id)
        try:
            names = self._d.ops.listdir(folder)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StoreError(f"read the attachments folder: {reason(e)}") from None
        metas = []
        for name in names:
            if name.endswith(".json"):
                meta = self._read_meta_file(folder / name)
                if meta is not None:
                    metas.append(meta)
        return metas

    def delete_attachment(self, session_id: str, attachment_id: str) -> bool:
        self._d.writable()
        meta_path, bin_path = self._attachment_paths(session_id, attachment_id)
        try:
            self._safe_folder(meta_path.parent)
            # Metadata first: once it is gone nothing lists the attachment.
            try:
                self._d.ops.unlink(meta_path)
                existed = True
            except FileNotFoundError:
                existed = False
            with contextlib.suppress(FileNotFoundError):
                self._d.ops.unlink(bin_path)
        except OSError as e:
            raise StoreError(f"remove attachment {attachment_id}: {reason(e)}") from None
        return existed
