"""The write-ahead journal of ``durability="fsync"``: one file overwritten in place.

An fsync-mode append writes its lines to the session's log (the reference's file, as
ever) WITHOUT syncing it, and the same bytes, with a header naming the log, the offset and
a checksum, into ``<data_dir>/.session-manager.journal``: a file laid with zeros once
(:data:`SIZE` bytes), written as a ring and ``fdatasync``-ed. A sync of bytes written over
bytes already there commits no new file size, so it costs what SQLite's WAL sync costs;
an append's ``fsync`` must also commit the log's new size (the inode), ~100-140 us more
on ext4 (docs/langgraph.md, "A sync on every checkpoint: which store").

The journal holds only what the logs may not have on disk yet:

- a **checkpoint** ``fsync``-s every log written since the last one, then writes the
  sequence number of the newest record into one of two header slots (alternating, each
  with its checksum) and syncs it: records up to there never replay again. It runs before
  the ring wraps over records, after a write is undone (a truncated log), and at a clean
  close (a cleanly closed data_dir is the reference's files alone, the journal holding
  nothing to replay);
- a **barrier** record, synced, names a log about to be replaced by a synced file or set
  aside (compaction, delete): no earlier record of that log replays. No record may ever
  name a file changed under it;
- **replay** at open (by the owner, under the data_dir lock, before anything reads a
  log): every valid record newer than the checkpoint, in sequence order, whose bytes are
  not at their offset in their log is written there; the logs are synced and a checkpoint
  written. A record that is torn or fails its checksum is skipped (the scan goes on at
  the next 512-byte boundary); a name that is not a plain ``*.jsonl`` name of data_dir is
  skipped, never followed.

Records start on 4 KiB boundaries after the 4 KiB header (a record's sync then writes only
pages of its own: ``bench/journal_put_io.py`` measured 20-40 us less at the 10th percentile than
records packed back to back). Group sync: the writers
waiting share one ``fdatasync`` (:meth:`Journal.sync_through`). A failed journal sync fails
every writer it was to cover, for good (their writes are undone by the caller, as after a
failed ``fsync``); later writes sync their logs directly. A write too large for the ring
(over a quarter of it) is synced directly as well.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib

from ._encoding import decode_id
from ._fileops import Ops, fsync_dir, reason

log = logging.getLogger("session_manager.store.fs")

NAME = ".session-manager.journal"
# Read when a store opens: False leaves fsync mode syncing each log itself (the tests of that
# path, which is also the fallback: a write too large for the ring, a failed journal).
ENABLED = True
SIZE = 4 << 20  # the ring (SQLite's WAL checkpoints at ~4 MB by default)
BLOCK = 512  # the replay's scan steps over a bad record by this much
ALIGN = 4096  # records start on page boundaries: a record's sync writes only pages of its own
DATA_START = 4096
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# A record: magic, sequence, offset in the log, length of the bytes, length of the name, crc32 of
# the rest of the header + name + bytes; then the log's name (relative) and the bytes.
_RECORD = struct.Struct("<4sQQIHI")
_RECORD_MAGIC = b"SMJ1"
# A barrier (the same header, no bytes): no earlier record of its log replays (:meth:`Journal.forget_log`).
_BARRIER_MAGIC = b"SMJB"
_MAGIC_PREFIX = b"SMJ"
# A checkpoint slot: magic, generation, newest applied sequence, crc32 of the two.
_SLOT = struct.Struct("<4sQQI")
_SLOT_MAGIC = b"SMJC"
_LOG_SUFFIX = ".jsonl"


def _record_crc(seq: int, offset: int, name: bytes, data: bytes) -> int:
    return zlib.crc32(data, zlib.crc32(name, zlib.crc32(struct.pack("<QQI", seq, offset, len(data)))))


def _slot_bytes(generation: int, seq: int) -> bytes:
    body = struct.pack("<QQ", generation, seq)
    return _SLOT.pack(_SLOT_MAGIC, generation, seq, zlib.crc32(body))


def _read_slots(head: bytes) -> tuple[int, int]:
    """(generation, checkpointed sequence) of the newest valid header slot; (0, 0) if none."""
    best = (0, 0)
    for at in (0, BLOCK):
        raw = head[at:at + _SLOT.size]
        if len(raw) < _SLOT.size:
            continue
        magic, generation, seq, crc = _SLOT.unpack(raw)
        if magic == _SLOT_MAGIC and crc == zlib.crc32(struct.pack("<QQ", generation, seq)) and generation > best[0]:
            best = (generation, seq)
    return best


def plain_log_name(name: str) -> bool:
    """A journal record may only name a session log directly inside data_dir."""
    return (name.endswith(_LOG_SUFFIX) and len(name) > len(_LOG_SUFFIX) and "/" not in name and "\\" not in name
            and "\0" not in name and decode_id(name[:-len(_LOG_SUFFIX)]) is not None)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class Journal:
    """The data_dir's write-ahead journal (see the module); its file is made at the first record."""

    def __init__(self, data_dir: str, ops: Ops, size: int | None = None) -> None:
        size = SIZE if size is None else size  # (read at open: tests shrink the ring)
        if size < DATA_START + 4 * ALIGN:
            raise ValueError("journal size too small")
        self.dir = data_dir
        self.path = os.path.join(data_dir, NAME)
        self.size = size
        self._ops = ops
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._fd = -1
        self._pos = DATA_START
        self._seq = 0  # the newest record's sequence
        self._checkpointed = 0  # every record up to here is in its log on disk
        self._generation = 0
        self._dirty: dict[str, None] = {}  # logs written through a record since the last checkpoint
        self._durable = 0  # every record up to here is on disk (in the journal or its log)
        self._running = False
        self._waiting = 0
        self._failed: OSError | None = None
        self.checkpoints = 0  # (tests, status)

    # -- opening: replay --------------------------------------------------------------

    def replay(self) -> int:
        """Apply what an unclean stop left (see the module); the records applied. Called once,
        at open, before anything reads a log; an OSError propagates (the store does not open)."""
        try:
            fd = self._ops.open(self.path, os.O_RDWR | _CLOEXEC)
        except FileNotFoundError:
            return 0
        self._fd = fd
        size = os.fstat(fd).st_size
        raw = os.pread(fd, size, 0) if size else b""
        self._generation, self._checkpointed = _read_slots(raw[:DATA_START])
        records: list[tuple[int, str, int, bytes]] = []
        barriers: dict[str, int] = {}
        newest = self._checkpointed
        pos = DATA_START
        while pos + _RECORD.size <= len(raw):
            magic = raw[pos:pos + 4]
            if magic != _RECORD_MAGIC and magic != _BARRIER_MAGIC:
                # (Zeros, or the middle of a record: the next candidate at a boundary, found at C speed.)
                found = raw.find(_MAGIC_PREFIX, pos + 1)
                if found < 0:
                    break
                pos = -(-found // BLOCK) * BLOCK
                continue
            _, seq, offset, length, name_len, crc = _RECORD.unpack_from(raw, pos)
            end = pos + _RECORD.size + name_len + length
            if end > len(raw) or seq == 0 or (magic == _BARRIER_MAGIC and (length or offset)):
                pos += BLOCK  # (a barrier carries no bytes: one that does is a record's magic damaged)
                continue
            name = raw[pos + _RECORD.size:pos + _RECORD.size + name_len]
            data = raw[pos + _RECORD.size + name_len:end]
            if crc != _record_crc(seq, offset, name, data):
                pos += BLOCK  # torn or corrupt: its length may be too; look at the next boundary
                continue
            newest = max(newest, seq)
            if seq > self._checkpointed:
                decoded = name.decode("utf-8", "replace")
                if magic == _BARRIER_MAGIC:
                    barriers[decoded] = max(barriers.get(decoded, 0), seq)
                else:
                    records.append((seq, decoded, offset, data))
            pos += -(-(end - pos) // BLOCK) * BLOCK
        records = [r for r in records if r[0] > barriers.get(r[1], 0)]
        self._seq = self._durable = newest
        if not records and self._checkpointed == newest and size == self.size:
            return 0
        records.sort()
        applied = self._apply(records)  # (the logs synced: only then may the records go)
        self._checkpointed = newest
        if size != self.size:
            self._lay()  # (a crash while it was laid: zeros again, whole)
        else:
            self._write_slot()
        if applied:
            log.warning("%s: replayed %d journaled write(s) an unclean stop left unsynced in their logs",
                        self.dir, applied)
        return applied

    def _apply(self, records: list[tuple[int, str, int, bytes]]) -> int:
        fds: dict[str, int] = {}
        applied = 0
        try:
            for seq, name, offset, data in records:
                if not plain_log_name(name):
                    log.warning("journal record %d names %r, not a log of data_dir: skipped", seq, name)
                    continue
                fd = fds.get(name)
                if fd is None:
                    try:
                        fd = fds[name] = self._ops.open(os.path.join(self.dir, name), os.O_RDWR | _CLOEXEC)
                    except FileNotFoundError:
                        log.warning("journal record %d names %s, which is not there: skipped", seq, name)
                        continue
                if os.pread(fd, len(data), offset) == data:
                    continue
                end = os.fstat(fd).st_size
                if end < offset:  # (blank lines, which replay skips, rather than a hole of zeros)
                    os.pwrite(fd, b"\n" * (offset - end), end)
                os.pwrite(fd, data, offset)
                applied += 1
            for fd in fds.values():
                os.fsync(fd)
        finally:
            for fd in fds.values():
                os.close(fd)
        return applied

    # -- writing ------------------------------------------------------------------------

    def record(self, name: str, offset: int, data: bytes) -> int:
        """Write ``data`` (just written at ``offset`` of the log ``name``, unsynced) as a record;
        its sequence (wait with :meth:`sync_through`), or 0 when the caller must ``fsync`` the log
        itself (too large for the ring, or the journal failed). OSError: the record is not written
        (a checkpoint before a wrap failed)."""
        encoded = name.encode("utf-8")
        need = _aligned(_RECORD.size + len(encoded) + len(data))
        if need > (self.size - DATA_START) // 4:
            return 0
        with self._lock:
            if self._failed is not None:
                return 0
            if self._fd < 0:
                self._open_new()
            if self._pos + need > self.size:
                self._checkpoint_locked()  # the records about to be overwritten are in their logs
                self._pos = DATA_START
            seq = self._seq + 1
            header = _RECORD.pack(_RECORD_MAGIC, seq, offset, len(data), len(encoded),
                                  _record_crc(seq, offset, encoded, data))
            os.pwrite(self._fd, b"".join((header, encoded, data)), self._pos)
            self._seq = seq
            self._pos += need
            self._dirty[name] = None
            return seq

    def sync_through(self, seq: int) -> None:
        """Return once record ``seq`` is on disk: one ``fdatasync`` for every record written
        before it started (the first waiter syncs, with the GIL released). OSError: it failed
        (now or before: every later wait fails too)."""
        cond = self._cond
        with self._lock:
            while True:
                if self._durable >= seq:
                    return
                if self._failed is not None:
                    raise OSError(self._failed.errno, f"the journal's sync failed: {reason(self._failed)}")
                if not self._running:
                    break
                self._waiting += 1
                try:
                    cond.wait()
                finally:
                    self._waiting -= 1
            self._running = True
            upto, fd = self._seq, self._fd
        error: OSError | None = None
        try:
            os.fdatasync(fd)
        except OSError as e:
            error = e
        except BaseException:
            with self._lock:
                self._running = False
                if self._waiting:
                    cond.notify_all()
            raise
        with self._lock:
            self._running = False
            if error is None:
                self._durable = max(self._durable, upto)
            elif self._durable < seq:
                self._failed = error
                self._abandon_locked()
            if self._waiting:
                cond.notify_all()
            if error is not None and self._durable < seq:
                raise error

    @property
    def failed(self) -> bool:
        return self._failed is not None

    # -- checkpoints -------------------------------------------------------------------

    def forget_log(self, name: str) -> None:
        """Before the log ``name`` is replaced by a synced file or set aside (a compaction, a
        delete): the log synced, then a barrier record, synced, so that no earlier record of it
        replays into whatever bears the name next. Two syncs, where a checkpoint syncs every log
        written since the last. OSError: not done (the caller must not go on)."""
        with self._lock:
            if self._fd < 0 or name not in self._dirty or self._failed is not None:
                return  # no record of it since the last checkpoint (or none may replay: abandoned)
            encoded = name.encode("utf-8")
            need = _aligned(_RECORD.size + len(encoded))
            if self._pos + need > self.size:
                self._checkpoint_locked()  # (the ring is full: a checkpoint covers it)
                return
            # Its bytes synced first: if the rename or set-aside does not survive a power loss, the
            # log that comes back holds every write acknowledged through it.
            self._sync_log(name)
            seq = self._seq + 1
            header = _RECORD.pack(_BARRIER_MAGIC, seq, 0, 0, len(encoded), _record_crc(seq, 0, encoded, b""))
            os.pwrite(self._fd, header + encoded, self._pos)
            self._seq = seq
            self._pos += need
            del self._dirty[name]
        self.sync_through(seq)

    def _sync_log(self, name: str) -> None:
        try:
            fd = self._ops.open(os.path.join(self.dir, name), os.O_RDONLY | _CLOEXEC)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def checkpoint(self) -> None:
        """Sync every log written through a record since the last checkpoint, then mark
        every record so far applied (none replays). OSError: not done (the records stay)."""
        with self._lock:
            self._checkpoint_locked()

    def _checkpoint_locked(self) -> None:
        if self._fd < 0 or (self._checkpointed == self._seq and not self._dirty):
            return
        upto = self._seq
        for name in list(self._dirty):
            self._sync_log(name)  # (gone: a barrier ran before its removal)
            self._dirty.pop(name, None)
        self._checkpointed = upto
        self._write_slot()
        self._pos = DATA_START  # (what lies behind is checkpointed: the ring starts over)
        self._durable = max(self._durable, upto)
        self.checkpoints += 1
        if self._waiting:
            self._cond.notify_all()

    def _abandon_locked(self) -> None:
        """The journal's sync failed: every writer it was to cover hears so and has its write
        undone (as after a failed ``fsync``), so no record so far may replay: the logs are synced
        as far as they can be and the checkpoint moved past every record, each step tried even if
        another fails (what it leaves is at least in the page cache, as the undo's truncation is).
        Later writes sync their logs themselves (:meth:`record` returns 0)."""
        for name in list(self._dirty):
            try:
                fd = self._ops.open(os.path.join(self.dir, name), os.O_RDONLY | _CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as e:
                log.warning("%s: %s not synced after the journal's sync failed: %s", self.dir, name, reason(e))
        self._dirty.clear()
        self._checkpointed = self._seq
        try:
            self._write_slot()
        except OSError as e:
            log.warning("%s: the journal's checkpoint after its failed sync: %s", self.dir, reason(e))

    def _write_slot(self) -> None:
        self._generation += 1
        os.pwrite(self._fd, _slot_bytes(self._generation, self._checkpointed), (self._generation % 2) * BLOCK)
        os.fdatasync(self._fd)

    def _open_new(self) -> None:
        """Make (or lay again) the journal file: zeros over its whole size, synced, its name too."""
        self._fd = self._ops.open(self.path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)
        self._lay()
        fsync_dir(self._ops, self.dir)

    def _lay(self) -> None:
        chunk = bytes(1 << 20)
        os.ftruncate(self._fd, 0)
        at = 0
        while at < self.size:
            at += os.pwrite(self._fd, chunk[:self.size - at], at)
        os.pwrite(self._fd, _slot_bytes(self._generation + 1, self._checkpointed), ((self._generation + 1) % 2) * BLOCK)
        self._generation += 1
        os.fsync(self._fd)
        self._pos = DATA_START

    def close(self) -> None:
        """A clean close: checkpoint (nothing left to replay), close the file. Errors are logged
        (the records then replay at the next open)."""
        with self._lock:
            if self._fd < 0:
                return
            try:
                self._checkpoint_locked()
            except OSError as e:
                log.warning("%s: the journal's closing checkpoint failed (%s); its records replay at the next open",
                            self.dir, reason(e))
            os.close(self._fd)
            self._fd = -1

