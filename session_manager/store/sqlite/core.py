"""The sqlite adapter's datastore, which every part of the store is handed:
the settings, one connection per thread (every connection is closed with the
store), the calling thread's state (the transaction a mutation has open, what
its reads noted for its commit), and the mapping of database failures to
:class:`StoreError`.

Opening checks the file before anything is written: a directory, a file
that is not SQLite, one this process cannot write, a database of a newer
schema version or of another application each get a ``session/storage``
naming the cause.

A read-only open (``SqliteSettings.read_only``) opens the file with
``mode=ro`` and ``PRAGMA query_only``, creates nothing (no directory, no
database file) and checks the schema version instead of migrating
(:func:`.schema.check`). WAL readers need the ``-shm`` shared memory: beside a
live writer they use its ``-wal``/``-shm`` files; with no other connection
open (and those files removed by the last one), SQLite creates both, empty,
for the reader, as any connection would; the database file itself is never
written.
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import threading
import urllib.parse
import uuid
import weakref
from contextlib import suppress
from typing import Any

from ...errors import STORAGE, ReadOnlyStore, SessionError, StoreError, Unavailable
from . import schema
from .settings import Durability, SqliteSettings

# Result codes (the primary code, low byte of the extended one) that say why.
_BUSY, _LOCKED, _READONLY, _CANTOPEN, _NOTADB = 5, 6, 8, 14, 26
_SYNCHRONOUS = {"flush": "NORMAL", "fsync": "FULL"}
_INT64 = 2**63
WAL_PAGES = 8000  # ~32 MiB of 4 KiB pages
# With a sync per commit the WAL's size matters more than the checkpoints': a sync of a WAL
# that grows must also journal the file's new size, one that overwrites frames in place does
# not. A WAL restarted every 1,000 pages (SQLite's default) is overwritten in place after its
# first ~4 MiB; at 8,000 it grows for ~1,800 appends after every open (measured: fsync appends
# +8% over 10,000 in one run, +11% over 400; flush appends lose 8% at 1,000, so they keep 8,000).
_WAL_PAGES = {"NORMAL": WAL_PAGES, "FULL": 1000}
# With durability fsync the WAL file is written to this many frames' size (zeros past its end)
# once, under the write lock: each commit's fsync then overwrites blocks the file holds, and
# need not also journal a new file size (a WAL that grows does, until it first restarts: raw
# FULL inserts 2,800-3,500/s growing, 4,500-5,400/s into a pre-sized WAL on a quiet disk, +12%
# under load). SQLite reads a WAL only up to its last valid frame: zeros are never frames.
_WAL_SIZED_PAGES = _WAL_PAGES["FULL"] + 100  # (a checkpoint restarts it past 1,000 pages)
# With durability flush the WAL is laid ahead of SQLite's writes the same way (zeros, no sync),
# a step at a time: the next step once SQLite wrote past the last (looked at every 8th write
# transaction, one stat), up to the frames it holds before a checkpoint restarts it. A frame
# appended past a file's end costs the file system an extension each time, one written over
# zeros does not (a LangGraph put over a new file: 7 frames, ~35 us less CPU). In steps, not at
# once: a process that writes a few times lays none (size_wal), not the ~33 MB the WAL grows to.
_WAL_STEP = (1 << 20, 4 << 20)  # a step is the WAL's size, within these bounds
_ZEROS = memoryview(bytes(_WAL_STEP[0]))  # (written a slice at a time)
# Connections of ended threads kept for the next new thread (core.conn): LangGraph runs a graph's
# checkpoint writes on a thread pool made per invoke, whose every thread opened a connection of
# its own (kept until the store closed: ~2.8 a turn, each two file descriptors). Past this many
# idle, an ended thread's connection is closed.
_IDLE_MAX = 8
WAL_LIMIT_BYTES = 64 << 20  # cut back only past it: a WAL cut at every checkpoint regrows at a cost
# A session's integer key (``entries.sk``: schema version 7) from its stored text key, the one
# parameter: a constant subquery, run once per statement (one probe of the sessions table).
SK = "(SELECT sk FROM sessions WHERE session_id = ?)"
# The session first in the updated order (the one whose list key may lag: schema.py).
FIRST_LISTED = "SELECT session_id FROM sessions ORDER BY listed_at DESC, session_id DESC LIMIT 1"


@functools.lru_cache(maxsize=256)
def qmark(query: str) -> str:
    """A query written for psycopg (``%s``, ``%(name)s``) in sqlite3's
    placeholders, so the postgres adapter's path reader runs here unchanged."""
    return re.sub(r"%\((\w+)\)s", r":\1", query).replace("%s", "?")


def sortable(value: Any) -> Any:
    """A sort column's value (or a cursor's): an integer SQLite holds exactly (64-bit),
    else its nearest float (values past 64 bits that round alike then order by session id;
    the exact value stays in the meta's JSON text)."""
    if isinstance(value, int) and not -_INT64 <= value < _INT64:
        return float(value)
    return value


Memo = tuple[str, int, int, str, str, dict[str, tuple[int, str, int]], Any, str, tuple[Any, int]]


class _State:
    """The calling thread's state (:class:`_Local`'s ``state``): a plain object, as an attribute of
    a ``threading.local`` costs about 500 instructions to reach, ~45 of them per append."""

    __slots__ = ("__weakref__", "conn", "cur", "erased", "in_tx", "leaf_depth", "links", "listed", "memo", "position",
                 "staged", "synchronous", "version")

    def __init__(self) -> None:
        self.conn: sqlite3.Connection | None = None
        # A cursor of conn kept for the append's statements: conn.execute makes a cursor (and its
        # weak reference) per statement, ~1.3k instructions each (callgrind).
        self.cur: sqlite3.Cursor | None = None
        self.synchronous = ""  # the level last set on conn
        self.in_tx = False
        self.erased = False  # this transaction deleted a session: checkpoint the WAL after its commit
        self.leaf_depth: tuple[str, str, int | None] | None = None  # get_leaf's last answer, for path()
        # (session key, its sessions.sk, entry key -> depth, jump_id, jump_depth) read in this
        # transaction, for its commit
        self.links: tuple[str, int, dict[str, tuple[int, str, int]]] | None = None
        # The outbox's (last sequence, another store follows) read in this transaction, for its events
        self.position: tuple[int | None, int] | None = None
        # (session key, its listed_at, the key of the session first in the list order) read in this transaction
        self.listed: tuple[str, Any, str | None] | None = None
        # The connection's ``PRAGMA data_version`` read by this transaction's append read: it changes
        # when another connection committed, never with this connection's own commits.
        self.version: int | None = None
        # What the append read would find after this connection's last commit, when that commit was an
        # append whose outcome this process knows whole (writes.py): (session key, data_version, its
        # sk, meta text, leaf key, leaf links, listed_at, first listed, outbox position). Staged by
        # the append's write, kept by its COMMIT; the next append to the session takes it instead of
        # its read while data_version says nobody else committed since (reads.py).
        self.staged: Memo | None = None
        self.memo: Memo | None = None


class _Local(threading.local):
    """Per thread: whether a call defers its mutation's commit (the call runner's), and the rest
    of the thread's state, reached once per function (:class:`_State`)."""

    deferring: bool = False

    def __init__(self) -> None:  # (run in each thread at its first use)
        self.state = _State()


class SqliteDatastore:
    """One database file and this process's connections to it."""

    def __init__(self, settings: SqliteSettings) -> None:
        self.settings = settings
        self.file = settings.path
        self.read_only = settings.read_only
        self.instance = uuid.uuid4().hex
        self.local = _Local()
        self._conns: list[sqlite3.Connection] = []
        self._idle: list[sqlite3.Connection] = []  # of ended threads, for the next new one (conn)
        # The process whose threads handed the idle ones back: a forked child takes none of them
        # (each is its parent's, maybe in use there: one SQLite connection in two processes).
        self._idle_pid = os.getpid()
        self._conns_lock = threading.Lock()
        self._closed = False
        self._synchronous = _SYNCHRONOUS[settings.durability]
        self.wal_short = True  # the WAL still to be sized (size_wal)
        self.wal_ahead = False  # flush: the WAL laid ahead so far, SQLite may write past it (begin)
        self._wal_mark = 0  # the WAL's size once last laid ahead (bytes)
        self._writes = 0  # write transactions begun (every 8th looks at the WAL's size)
        # The WAL SQLite opened (it resolves the path when it opens the file, as here: not
        # after a chdir, where the relative path would name another database's WAL).
        self._wal_file = os.path.abspath(self.file) + "-wal"
        self.retention_ms = int(settings.outbox_retention_s * 1000)  # the outbox's (outbox.py)
        # A delete's old pages still sit in the WAL: set until a TRUNCATE checkpoint got through
        # (a reader on an older snapshot holds it off; the follower's next checkpoint retries).
        self.erase_pending = False
        self._identity: tuple[int, int] | None = None
        self._lost: str | None = None  # why the path no longer names the file opened: for good
        if os.path.isdir(self.file):
            raise StoreError(f"sqlite: {self.file} is a directory, not a database file")
        if self.read_only:
            if not os.path.isfile(self.file):
                raise StoreError(f"sqlite: {self.file}: no such database file (a read-only open creates nothing)")
        else:
            parent = os.path.dirname(os.path.abspath(self.file))
            try:
                os.makedirs(parent, exist_ok=True)
            except OSError as e:
                raise StoreError(f"sqlite: cannot create the directory {parent}: {e.strerror}") from None
        left_over = not self.read_only and _holds_frames(self.file + "-wal")  # (before this open writes)
        try:
            conn = self.connect(opening=True)
            if self.read_only:
                schema.check(conn, self.file)
            else:
                schema.migrate(conn, self.file)
                if left_over:
                    self._erase_left_over(conn)
            self._adopt(conn)  # the opening thread's connection from now on
            self._identity = _identity(self.file)  # the file opened: see still_ours
        except sqlite3.Error as e:
            self.release()
            raise self.fail(e, opening=True) from None
        except StoreError:
            self.release()
            raise

    def connect(self, *, opening: bool = False) -> sqlite3.Connection:
        if self.read_only:
            return self._connect_read_only()
        conn = sqlite3.connect(self.file, isolation_level=None, check_same_thread=False,
                               timeout=self.settings.busy_timeout_ms / 1000)
        with self._conns_lock:
            self._conns.append(conn)
        if opening:  # a file the open refuses is refused before WAL mode is asked for (it rewrites the header)
            schema.refuse(conn, self.file)
        # WAL: readers never block the writer nor each other; one writer at a
        # time across every process (BEGIN IMMEDIATE). The mode is the file's:
        # asking again is a no-op, and it fails on a file that is not SQLite.
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"sqlite: {self.file} cannot use WAL mode (journal mode {mode})")
        # Checkpoints run on the follower's thread once a second (outbox.py), off the
        # writers' path: a writer checkpoints itself only past this many WAL pages (a
        # store nobody follows), and the WAL file is cut back to the limit after one.
        conn.execute(f"PRAGMA wal_autocheckpoint={_WAL_PAGES[self._synchronous]}")
        conn.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
        conn.execute("PRAGMA secure_delete=ON")  # erasure: deleted content is overwritten with zeros
        # The file is not mapped (mmap_size stays 0): mapped, SQLite looks every page a statement
        # touches up in the WAL index first, even one in its cache, and the WAL index's chain for
        # a page every append rewrites grows with the WAL (79k of an append's 476k instructions,
        # 1,300 appends into the WAL; callgrind). Searches (100k messages, 20 or 200 hits) were no
        # faster mapped, and slower once other connections' writes had emptied the cache.
        return conn

    def _connect_read_only(self) -> sqlite3.Connection:
        """A connection that cannot write the file (``mode=ro``) nor try (``query_only``);
        the journal mode is the file's (a WAL database is read as WAL), never set here."""
        uri = "file:" + urllib.parse.quote(os.path.abspath(self.file)) + "?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False,
                               timeout=self.settings.busy_timeout_ms / 1000)
        with self._conns_lock:
            self._conns.append(conn)
        conn.execute("PRAGMA query_only = ON")
        return conn

    def writable(self) -> None:
        """Refuse a write transaction of a read-only store (as :meth:`..sql.store.SqlStore.writable`)."""
        if self.read_only:
            raise ReadOnlyStore()

    @property
    def durability(self) -> Durability:
        """``flush`` (``synchronous=NORMAL``) or ``fsync`` (``FULL``); settable
        (a worker's reload): each connection takes it before its next write."""
        return "fsync" if self._synchronous == "FULL" else "flush"

    @durability.setter
    def durability(self, value: Durability) -> None:
        self._synchronous = _SYNCHRONOUS[value]
        self.wal_short = True

    def conn(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use)."""
        conn = self.local.state.conn
        if conn is None:
            if self._closed:
                raise StoreError("sqlite: the store is closed")
            with self._conns_lock:
                if self._idle_pid != os.getpid():  # (a forked child: its parent's, left alone)
                    self._idle, self._idle_pid = [], os.getpid()
                idle = self._idle.pop() if self._idle else None
            try:
                conn = self._adopt(idle) if idle is not None else self._adopt(self.connect())
            except sqlite3.Error as e:
                raise self.fail(e) from None
        return conn

    def _adopt(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        """``conn`` (new, or an ended thread's) as this thread's connection, at the store's
        durability; handed back (:meth:`_take_back`) when the thread ends."""
        level = self._synchronous  # (read once: a reload meanwhile must not be noted as set here)
        if not self.read_only:
            conn.execute(f"PRAGMA synchronous={level}")
            conn.execute(f"PRAGMA wal_autocheckpoint={_WAL_PAGES[level]}")
        state = self.local.state
        state.conn, state.cur, state.synchronous = conn, conn.cursor(), level
        weakref.finalize(state, _hand_back, weakref.ref(self), conn, os.getpid()).atexit = False
        return conn

    def _take_back(self, conn: sqlite3.Connection, pid: int) -> None:
        """An ended thread's connection: kept for the next new thread (:meth:`conn`), out of any
        transaction, or closed past :data:`_IDLE_MAX` idle (or when it cannot be rolled back).
        Not when this process is not ``pid``, the one whose thread used it: a forked child clears
        its parent's other threads' states, whose threads still run in the parent; rolled back
        here, a transaction the parent's thread has open dropped the shared WAL index's entries
        for its spilled frames and its COMMIT left a malformed database (review 21)."""
        if os.getpid() != pid:
            return  # (left alone: the parent's)
        try:
            if conn.in_transaction:  # (a thread ends inside a transaction only by a bug: none is kept)
                conn.execute("ROLLBACK")
            keep = True
        except sqlite3.Error:  # (closed with the store meanwhile, or the rollback failed)
            keep = False
        with self._conns_lock:
            if self._closed or not any(c is conn for c in self._conns):
                return  # (the store closed it)
            if self._idle_pid != pid:  # (a forked child's first: its parent's are not its own)
                self._idle, self._idle_pid = [], pid
            if keep and len(self._idle) < _IDLE_MAX:
                self._idle.append(conn)
                return
            self._conns = [c for c in self._conns if c is not conn]
        with suppress(sqlite3.Error):
            conn.close()

    def fail(self, e: sqlite3.Error, *, opening: bool = False) -> StoreError:
        """A database failure as the :class:`StoreError` (or :class:`Unavailable`) that says why."""
        code = (getattr(e, "sqlite_errorcode", None) or 0) & 0xFF
        if code == _NOTADB:
            return StoreError(f"sqlite: {self.file} is not a SQLite database (nothing was written)")
        if code == _READONLY or (opening and code == _CANTOPEN):
            why = "cannot be written" if code == _READONLY else "cannot be opened"
            return StoreError(f"sqlite: {self.file} {why} by this process (check its permissions and its "
                              f"directory's: WAL mode needs the -wal and -shm files beside it): {e}")
        if code in (_BUSY, _LOCKED):  # another process held the write lock past busy_timeout_ms
            return Unavailable(f"sqlite: {self.file}: {e} (waited {self.settings.busy_timeout_ms} ms)")
        return StoreError(f"sqlite: {self.file}: {type(e).__name__}: {e}")

    def rows(self, query: str, params: Any = ()) -> list[tuple[Any, ...]]:
        """A statement's rows, on this thread's connection (in its transaction, if one is open)."""
        try:
            return self.conn().execute(qmark(query), params).fetchall()
        except sqlite3.Error as e:
            raise self.fail(e) from None

    def begin(self) -> sqlite3.Connection:
        """``BEGIN IMMEDIATE`` on this thread's connection (waits up to busy_timeout_ms for the lock)."""
        self.writable()
        state = self.local.state
        conn = state.conn or self.conn()
        cur = state.cur or conn
        try:
            level = self._synchronous  # (read once, as in _adopt)
            if state.synchronous != level:  # set outside a transaction, where it applies
                conn.execute(f"PRAGMA synchronous={level}")
                conn.execute(f"PRAGMA wal_autocheckpoint={_WAL_PAGES[level]}")
                state.synchronous = level
            cur.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise self.fail(e) from None
        if self.wal_short:  # (under the write lock now: nobody writes the WAL meanwhile)
            self.size_wal(conn)
        elif self.wal_ahead:
            self._writes += 1
            if not self._writes & 7 and self._wal_passed():
                self.size_wal(conn)
        state.in_tx = True
        state.position = state.listed = state.staged = None
        return conn

    def size_wal(self, conn: sqlite3.Connection) -> None:
        """Under the write lock: zeros written past the WAL file's end. With durability fsync up
        to :data:`_WAL_SIZED_PAGES` frames, and synced, once; with flush one step (:data:`_WAL_STEP`),
        and another each time SQLite wrote past it (:meth:`begin`), up to the frames the WAL holds
        before a checkpoint (see there). Only past its end: what it holds (frames of other
        connections' snapshots) is never touched. On a file system short of room for the whole WAL
        past the step, or a file that cannot be grown, it is left as it is: the commits only cost more."""
        self.wal_short = self.wal_ahead = False
        full = self._synchronous == "FULL"
        try:
            page = int(conn.execute("PRAGMA page_size").fetchone()[0])
            fd = os.open(self._wal_file, os.O_WRONLY)  # (never created here: SQLite made it)
        except (OSError, sqlite3.Error):
            return
        try:
            # The WAL beside the file opened, not another database's (one moved in under the path
            # meanwhile: its writers hold their own lock; this commit is then refused, still_ours).
            if self._lost is not None or _identity(self._wal_file[:-4]) != self._identity:
                return
            size = at = os.fstat(fd).st_size
            # the WAL header, then frames (header and page)
            most = 32 + (_WAL_SIZED_PAGES if full else _WAL_PAGES["NORMAL"] + 100) * (24 + page)
            # SQLite extends the WAL a whole frame at a time: a size that is not a whole number of
            # frames past the header ends in zeros a step laid (this store's or another's) that
            # SQLite has not written past yet: no step until it has (else each store of the file
            # takes the others' steps for SQLite's writes and lays its own past them, to the bound).
            laid = size > 32 and (size - 32) % (24 + page) != 0
            # Nor before SQLite's own frames hold a quarter step (~60 frames): a step's zeros cost
            # about what ~40 frames' extensions do, more than a WAL that each erasure cuts to
            # nothing (TRUNCATE) refills between them, or a process that writes a few times.
            early = size < _WAL_STEP[0] // 4
            step = min(max(size, _WAL_STEP[0]), _WAL_STEP[1])
            want = most if full else size if laid or early else min(most, size + step)
            # Zeros must never take the room the database file needs when a checkpoint copies the
            # WAL back (a full disk: checkpoints fail, appends that fit are refused): laid only
            # while the file system keeps room for the whole WAL past the step.
            if want > size:
                fs = os.fstatvfs(fd)
                if fs.f_bavail * fs.f_frsize < want - size + most:
                    want = size
            try:
                while at < want:
                    at += os.pwrite(fd, _ZEROS[:want - at], at)
            finally:
                self._wal_mark, self.wal_ahead = at, not full and at < most
            if full and at > size:
                os.fdatasync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    def _wal_passed(self) -> bool:
        """Whether the WAL file's size is no longer the one it was laid ahead to (SQLite wrote
        past it, or another process laid it further, or truncated it): :meth:`size_wal` again."""
        try:
            return os.stat(self._wal_file).st_size != self._wal_mark
        except OSError:
            return False

    def still_ours(self) -> None:
        """Raise unless the path still names the database file this store opened: one removed
        (``rm``) or replaced under it takes the commits through the kept connections, where
        nobody will find them again. Asked before each COMMIT (one ``stat``), so such a write
        is rolled back and refused, never acknowledged (as an fs store checks its data_dir)."""
        if self._lost is None:
            try:
                st = os.stat(self.file)  # (not _identity: one Python call fewer per commit)
                now: tuple[int, int] | None = (st.st_dev, st.st_ino)
            except FileNotFoundError:
                now = None
            except OSError as e:
                raise StoreError(f"sqlite: {self.file}: cannot check the database file: {e.strerror}") from None
            if now == self._identity:
                return
            why = "it is gone" if now is None else "it is another file now"
            self._lost = (f"sqlite: {self.file} is no longer the database file this store opened ({why}: "
                          "removed or replaced while open); every write is refused, reopen it")
        raise StoreError(self._lost)

    def end(self, conn: sqlite3.Connection, *, commit: bool) -> None:
        """COMMIT (or ROLLBACK); after a commit that deleted a session, checkpoint the WAL.
        A commit into a database file removed or replaced meanwhile is rolled back (:meth:`still_ours`)."""
        state = self.local.state
        state.in_tx = False
        erased, state.erased = state.erased, False
        state.links = state.position = state.listed = None
        # An append's outcome is known only once it committed (anything else: read again).
        staged, state.staged, state.memo = state.staged, None, None
        try:
            if commit:
                try:
                    self.still_ours()
                except StoreError:
                    conn.execute("ROLLBACK")
                    raise
            (state.cur if conn is state.conn and state.cur is not None else conn).execute(
                "COMMIT" if commit else "ROLLBACK")
        except sqlite3.Error as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if commit:
                raise self.fail(e) from None
            return
        if commit:
            state.memo = staged
        if commit and erased:
            self.erase_pending = True
            self.checkpoint_erased(conn, wait=False)

    def _erase_left_over(self, conn: sqlite3.Connection) -> None:
        """At a writable open over a WAL an earlier process left holding frames: one TRUNCATE
        checkpoint, waiting for nobody. A process killed between a delete's commit and its
        checkpoint left the deleted rows' old pages in the database file (the WAL holds them
        zeroed) and its pending erasure in its memory; nothing else checkpoints a store nobody
        observes until its WAL holds 1,000 pages or it closes. Busy (another process reads or
        writes): theirs to do, their follower's checkpoints copy the WAL back."""
        self.checkpoint_erased(conn, wait=False)
        self.erase_pending = False  # (busy: not this open's to retry)

    def checkpoint_erased(self, conn: sqlite3.Connection, *, wait: bool) -> None:
        """Erasure: copy the WAL back (its pages now zeroed where rows were deleted) and
        truncate it, so a deleted session's old page images leave the WAL file too. A reader
        still on an older snapshot makes it busy; then (``wait`` false: at once, the deleting
        call is not held up) the follower's next checkpoint tries again."""
        if not wait:
            conn.execute("PRAGMA busy_timeout = 0")
        try:
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        except sqlite3.Error:
            busy = 1
        finally:
            if not wait:
                conn.execute(f"PRAGMA busy_timeout = {self.settings.busy_timeout_ms}")
        if not busy:
            self.erase_pending = False
            self.wal_short = True  # truncated: sized again at the next write

    def release(self) -> None:
        """Close every connection this store opened."""
        with self._conns_lock:
            conns, self._conns, self._idle = self._conns, [], []
        for conn in conns:
            with suppress(sqlite3.Error):
                conn.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Refuse new connections (the store then stops its outbox and calls :meth:`release`)."""
        self._closed = True

    def storage_error(self, e: BaseException) -> SessionError:
        """A lazy read's failure, as callers see it (it happens outside the service's mapping)."""
        return SessionError(STORAGE, str(self.fail(e)) if isinstance(e, sqlite3.Error) else str(e))


def _hand_back(store: weakref.ref[SqliteDatastore], conn: sqlite3.Connection, pid: int) -> None:
    """A thread's state is gone (the thread ended, or a fork left it behind): its connection
    back to its store, if open."""
    db = store()
    if db is not None:
        db._take_back(conn, pid)


def _identity(path: str) -> tuple[int, int]:
    """The file ``path`` names now: (device, inode)."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _holds_frames(wal: str) -> bool:
    """Whether the WAL file ``wal`` exists and is longer than nothing."""
    try:
        return os.path.getsize(wal) > 0
    except OSError:
        return False
