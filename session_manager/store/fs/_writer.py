"""The fs store's write of one commit: its lines appended through the kept
descriptor (a torn or unterminated tail fixed first), and the log budget that
decides compaction (a part of :class:`~._store.FsStore`)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading

from ...errors import StoreError
from ..base import Commit
from . import _rewrite
from ._datadir import DataDir
from ._fileops import NotRegular, fsync_dir, reason, write_all
from ._group_commit import GroupCommit
from ._sizes import Sizes
from ._tail import inspect_tail

log = logging.getLogger("session_manager.store.fs")


class Writer:
    """The fs store's appends (its part): each commit's lines, written through the kept
    descriptor, synced (or owed to ``group``'s settle), and charged to the log's budget."""

    def __init__(self, data: DataDir, group: GroupCommit) -> None:
        self._d = data
        self._group = group
        # A log name in data_dir changed (created, or renamed over by a rewrite) with no directory
        # fsync after it: in flush mode, or its sync failed. A write in fsync mode syncs the directory
        # before its own bytes go in (:meth:`_sync_names`): the commit it acknowledges lives in a file
        # whose name must survive a power loss too, also after durability switched from flush to fsync.
        # Up at open: a flush-mode owner before this one may have left names unsynced.
        self._names_unsynced = not data.read_only
        self._names_lock = threading.Lock()

    def account(self, session_id: str, commit: Commit, data: bytes, sizes: Sizes) -> _rewrite.LogBudget:
        """Charge a commit just written to its log's budget; returns the budget."""
        budget = self._d.budgets.get(session_id)
        if budget is None:
            budget = self._d.budgets[session_id] = _rewrite.LogBudget()
        entry_sizes, meta_bytes = sizes
        entries = commit.entries
        budget.charge(len(data), ((entries[0]["id"], entry_sizes[0]),) if len(entries) == 1  # (no generator)
                      else zip((e["id"] for e in entries), entry_sizes, strict=True), meta_bytes)
        return budget

    def _sync_names(self) -> None:
        """Make every log name changed without a directory sync durable (fsync mode, before a
        write): the OSError of a failed sync propagates and the flag stays up, so the next write
        tries again. Under ``_names_lock`` for the whole sync: a writer that finds the flag up
        while another's sync runs waits for its outcome instead of trusting a flag cleared early."""
        with self._names_lock:
            if self._names_unsynced:
                fsync_dir(self._d.ops, self._d.dir)
                self._names_unsynced = False

    def _name_changed(self) -> None:
        """A log name changed with no directory sync yet (taken after the change: a sync that
        runs meanwhile may not cover it, so the flag goes up once that sync is over)."""
        with self._names_lock:
            self._names_unsynced = True

    def renamed(self, path: str, sync: bool) -> None:
        """A rewrite renamed its file over the log at ``path``: with ``sync`` (fsync mode) sync the
        directory now; without, or if that sync fails (logged: past the rename the new file is the
        log, and failing the commit would leave its caller on the replaced one), the next
        fsync-mode write does. Nothing acknowledged rests on the name until then: the replaced
        log held the same state, every byte its durability promised on disk."""
        self._name_changed()
        if sync:
            try:
                self._sync_names()
            except OSError as e:
                log.warning("%s: the directory entry of a compacted log may not be on disk yet (%s); the next "
                            "write syncs it", os.path.basename(path), reason(e))

    def _name_durable(self, path: str) -> None:
        """A log just created (fsync mode): sync its name before any line goes in. If that
        fails, the caller hears so; the empty file is removed, so nothing of its mutation
        replays and the next write creates (and syncs) the name again."""
        try:
            fsync_dir(self._d.ops, self._d.dir)
        except OSError:
            self._d.fds.forget(path)  # closed once the caller releases it
            with contextlib.suppress(OSError):
                self._d.ops.unlink(path)
            raise

    def append(self, session_id: str, data: bytes) -> int:
        """Write one commit's lines through the kept descriptor; returns the
        log offset they start at."""
        d = self._d
        path = d.files.files(session_id).log  # (:meth:`log_path`, one call fewer: every write)
        tail_fix = d.tail_fix
        fix = tail_fix.pop(session_id, None) if tail_fix else None  # (none to fix, nearly always: no call)
        fsync = d.durability == "fsync"
        try:
            # Read access too: the tail check after a failed write preads the file.
            if self._names_unsynced and fsync:
                self._sync_names()
            fds = d.fds
            slot, created = fds.acquire(path)
            fd, owed = slot.fd, False
            try:
                if created:  # (opened by its path only while data_dir is ours: the opener asks)
                    if fsync:
                        self._name_durable(path)
                    else:
                        self._name_changed()
                lead = 0
                if fix is None and slot.end is not None:  # (nothing to fix, nearly always: no test of each)
                    start = slot.end  # the kept end saves an fstat per write
                else:
                    if fix == "check":
                        fix = inspect_tail(fd, session_id)
                    if isinstance(fix, int):
                        os.ftruncate(fd, fix)
                    # A tail fix asks the file.
                    start = slot.end if slot.end is not None and fix is None else os.fstat(fd).st_size
                    if fix == "newline":
                        data, lead = b"\n" + data, 1
                slot.end = None  # unknown until this write is whole
                try:
                    write_all(fd, data)
                    if fsync:
                        slot.flushed = False  # (its fsync covers whatever flush mode wrote before)
                        owed = self._group._sync_write(session_id, path, slot, start, start + len(data))
                    else:
                        slot.flushed = True
                except OSError:
                    # The caller hears "failed", so no part of it may replay later,
                    # not even a whole record that only lacks its newline.
                    os.ftruncate(fd, start)
                    self._group._failed_write(session_id, path, slot)
                    raise
                slot.end = start + len(data)
                # Before the answer: a log whose data_dir was removed or replaced took these
                # bytes through its kept descriptor, where nobody will find them again (an
                # fstat of the held lock file, its path looked up at most every 0.1 s: _lock).
                owner = d.owner  # (:meth:`still_ours_after_write`, inline: every write)
                if owner is not None:
                    owner.check()
            finally:
                if not owed:  # an owed fsync keeps the descriptor pinned until settle()
                    fds.release(path, slot)
        except NotRegular:
            raise StoreError(f"the log of session {os.path.basename(path)} is not a regular file") from None
        except OSError as e:
            # The write may have left a torn line: look again before the next one.
            self._d.tail_fix[session_id] = "check"
            self._d.still_ours()  # (a removed data_dir: say so, not just "no such file")
            raise StoreError(f"append to {os.path.basename(path)}: {reason(e)}") from None
        return start + lead
