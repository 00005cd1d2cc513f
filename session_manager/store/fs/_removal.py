"""Deleting a session whole or not at all.

Steps, for log ``<stem>.jsonl`` and attachment folder ``attachments/<stem>``:

1. rename the attachment folder aside to ``attachments/<stem>~deleted``;
2. rename the log aside to ``<stem>.jsonl~deleted`` -- **the commit point**:
   from here the session is gone for every reader (only ``*.jsonl`` files
   are logs), and (durability ``fsync``) the directory is synced;
3. remove the folder aside and the session's sidecar ``.index/<stem>.idx``
   (it holds the session's meta), then the log aside (last: it marks the delete).

A failure before the commit point undoes step 1 and answers
``session/storage``: the session is fully readable, nothing was removed.
So does a failed directory sync of step 2 (``fsync``), which undoes step 2 first. A
failure after it is logged; the delete stands. The next writable open
finishes whatever it finds (:func:`recover`): a log aside means the delete
committed, so both asides go; a folder aside without a log aside means it
did not, so the folder goes back. ``encode_id`` never emits ``~``, so no id's
log or folder can be mistaken for an aside.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from ...errors import StoreError
from ._fileops import Ops, fsync_dir, is_symlink, reason, remove_flat_folder
from ._opener import LOG_SUFFIX
from ._sidecar import index_path

log = logging.getLogger("session_manager.store.fs")

ASIDE = "~deleted"


def _aside(path: Path) -> Path:
    return path.with_name(path.name + ASIDE)


def _exists(ops: Ops, path: Path) -> bool:
    try:
        ops.lstat(path)
    except FileNotFoundError:
        return False
    return True


def delete(ops: Ops, log_path: Path, folder: Path, *, sync: bool, index: str | None = None) -> bool:
    """Delete one session's log and attachment folder (see the module doc), and its
    sidecar ``index`` once committed; whether there was a log or a folder to delete."""
    if is_symlink(ops, folder.parent) or is_symlink(ops, folder):
        raise StoreError("attachments folder is a symbolic link; refusing to delete through it")
    _finish(ops, log_path, folder)  # an earlier delete of this id that stopped half way
    moved = renamed = False
    try:
        if _exists(ops, folder):
            ops.replace(folder, _aside(folder))
            moved = True
        # The commit point; no log (e.g. a meta-less probe) means nothing to commit.
        with contextlib.suppress(FileNotFoundError):
            ops.replace(log_path, _aside(log_path))
            renamed = True
        if sync:
            fsync_dir(ops, log_path.parent)
    except OSError as e:
        if renamed:
            # The directory sync failed (e.g. EMFILE opening it): the delete is not durable, so it is
            # answered as failed, and then the log must be back (left aside, the next open would
            # finish the delete, losing the session and every write the store still accepts).
            try:
                ops.replace(_aside(log_path), log_path)
            except OSError as undo:
                log.error("delete of %s could not be synced nor undone (%s); it stands", log_path.name,
                          reason(undo))
                _finish_quietly(ops, log_path, folder, index)
                return True
        if moved:
            try:
                ops.replace(_aside(folder), folder)
            except OSError as undo:
                log.error("delete of %s failed and its attachments could not be put back (%s); "
                          "the next open restores them", log_path.name, reason(undo))
        raise StoreError(f"delete {log_path.name}: {reason(e)}") from None
    _finish_quietly(ops, log_path, folder, index)
    return renamed or moved


def _finish_quietly(ops: Ops, log_path: Path, folder: Path, index: str | None) -> None:
    """:func:`_finish` of a delete that stands: a failure is logged (the next open finishes it)."""
    try:
        _finish(ops, log_path, folder, index)
    except (OSError, StoreError) as e:
        log.warning("%s is deleted; removing its files failed (%s), the next open finishes it",
                    log_path.name, e if isinstance(e, StoreError) else reason(e))


def _finish(ops: Ops, log_path: Path, folder: Path, index: str | None = None) -> None:
    """Complete a delete that passed its commit point; undo one that did not. ``index``: the
    session's sidecar, removed before the log aside (which marks the delete unfinished until
    then: a kill in between leaves the aside, and the next open removes the sidecar)."""
    log_aside, folder_aside = _aside(log_path), _aside(folder)
    if _exists(ops, log_aside):
        remove_flat_folder(ops, folder_aside)
        if index is not None:
            with contextlib.suppress(FileNotFoundError):
                ops.unlink(index)
        ops.unlink(log_aside)
    elif _exists(ops, folder_aside) and not _exists(ops, folder):
        ops.replace(folder_aside, folder)


def _joined(names: list[str]) -> str:
    # Searched as one string: nearly always there is nothing to find, and 10k
    # names tested one by one cost an open ~2 ms.
    return "\n" + "\n".join(names) + "\n"


def _half_done(text: str, temp_suffix: str) -> tuple[bool, bool]:
    """Whether data_dir's names (:func:`_joined`) hold rewrite temps, log asides."""
    return (LOG_SUFFIX + temp_suffix + "\n") in text, (LOG_SUFFIX + ASIDE + "\n") in text


def holds_leftovers(names: list[str], temp_suffix: str) -> bool:
    """Whether data_dir's names hold anything :func:`recover` would act on there."""
    return any(_half_done(_joined(names), temp_suffix))


def recover(ops: Ops, data_dir: Path, names: list[str] | None, folder_for: Callable[[str], Path],
            temp_suffix: str) -> bool:
    """At a writable open: finish or undo every delete left half done, and remove
    the rewrite temps (``<log><temp_suffix>``) a killed owner left: the new owner
    has no rewrite in flight, and nothing else ever truncates a deleted log's temp.
    ``names``: data_dir's entries, listed by the open (``None``: known to hold
    neither temps nor log asides; attachments/ is still looked at); ``folder_for``
    maps a log stem to its attachment folder. Whether there was anything to recover."""
    if names is None:  # vouched for by the sessions index: only attachments/ may hold asides
        names, temps, asides, has_attachments = [], False, False, True
    else:
        text = _joined(names)
        temps, asides = _half_done(text, temp_suffix)
        has_attachments = "\nattachments\n" in text
    if temps:
        for n in names:
            if n.endswith(LOG_SUFFIX + temp_suffix):
                try:
                    ops.unlink(data_dir / n)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    log.warning("%s: cannot remove a rewrite temp left by an earlier owner (%s)", n, reason(e))
    attachments = data_dir / "attachments"
    stems = {n[: -len(LOG_SUFFIX + ASIDE)] for n in names if n.endswith(LOG_SUFFIX + ASIDE)} if asides else set()
    if has_attachments and not is_symlink(ops, attachments):
        with contextlib.suppress(OSError):
            for n in ops.listdir(attachments):
                if n.endswith(ASIDE):
                    stem = n[: -len(ASIDE)]
                    stems.add(stem.replace("%2E", ".") if stem in ("%2E", "%2E%2E") else stem)
    for stem in stems:
        log_path = data_dir / f"{stem}{LOG_SUFFIX}"
        try:
            _finish(ops, log_path, folder_for(stem), index_path(data_dir, stem))
        except (OSError, StoreError) as e:
            log.warning("%s: cannot finish an earlier delete (%s)", log_path.name,
                        e if isinstance(e, StoreError) else reason(e))
    return temps or bool(stems)
