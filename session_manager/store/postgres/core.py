"""The postgres adapter's datastore, which every part of the store is handed
(as eventsourcing hands its ``PostgresDatastore`` to its recorders): the
settings, the pool, the connection a mutation has bound to the calling
thread, the deadline of the call in progress (every connection in use is
armed with it, see :mod:`.deadline`), and the mapping of database failures
to :class:`StoreError` (password masked)."""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import abc as pg_abc
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.adapt import Transformer
from psycopg.generators import execute as pq_execute
from psycopg.generators import fetch_many, send
from psycopg.pq import DiagnosticField, ExecStatus, TransactionStatus
from psycopg_pool import ConnectionPool

from ...errors import STORAGE, SessionError, StoreError, Unavailable
from . import schema
from .arrays import LENGTH, ONE_HEADER, FixedTextArray, TextArray
from .arrays import encode as encode_array
from .deadline import Armed, Watchdog
from .secrets import redact, safe_dsn
from .settings import PostgresSettings

if TYPE_CHECKING:
    from .plan import Plan


@dataclass
class Tx:
    """One mutation's transaction: its connection and the sessions it has locked."""

    conn: psycopg.Connection[Any]
    locked: set[str] = field(default_factory=set)
    xid: int | None = None  # txid_current(): how a COMMIT whose answer was lost is settled
    pid: int = 0  # its backend
    seen: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # read at BEGIN: meta text, leaf
    # A mutation writes in it that does not own it (a call's second, or one upgraded mid-mutation):
    # its refused write must leave the transaction usable (writes.PgWrites._write's savepoint).
    shared: bool = False


class _State:
    """The calling thread's state (:class:`_Local`'s ``state``): a plain object, reached once per
    function, as each attribute of a ``threading.local`` costs about 480 instructions to reach."""

    __slots__ = ("armed", "deadline", "fresh", "optimistic", "plan", "reading", "sender", "spare", "tx", "window")

    def __init__(self) -> None:
        # The optimistic part's (.optimistic): a call tried optimistically, its plan, the plan's
        # own reads, a retry after a conflict. Here, not in a thread-local of its own: one read
        # of the thread's state serves both parts (each read costs ~600 instructions).
        self.optimistic = False
        self.plan: Plan | None = None
        self.reading = False
        self.fresh = False
        self.tx: Tx | None = None
        self.deadline: float | None = None  # the call in progress must answer by then (time.monotonic())
        # this thread's connection in use, armed with that deadline (or the last one handed back;
        # one used inside another use of the thread keeps that one as its Armed.outer)
        self.armed: Armed | None = None
        self.spare: Armed | None = None  # the Armed PgDatastore.take arms again (this thread's, reused)
        # a path window (last or first) read with its session's meta, for this call's path() (reads.py)
        self.window: Any = None
        # the observed call in progress records its events as this instance (outbox.begin_call)
        self.sender: str | None = None


class _Local(threading.local):
    """Per thread: whether a call defers its mutation's commit (the call runner's), and the rest
    of the thread's state, reached once per function (:class:`_State`)."""

    deferring: bool = False

    def __init__(self) -> None:  # (run in each thread at its first use)
        self.state = _State()


_UNREAD = object()


class _Conn(psycopg.Connection[Any]):
    """A pooled connection, with the cursor :meth:`PgDatastore.execute` runs its statements
    on (a new cursor for each was a sixth of a warm read's client time: ~20 us), and what
    :meth:`PgDatastore.run` keeps per connection (its prepared :class:`Statement` names,
    the rows' decoder)."""

    cursor_in_use: psycopg.Cursor[Any] | None = None
    backend_start: Any = _UNREAD  # PgDatastore.started_at (an attribute: a WeakKeyDictionary's get is Python code)
    statements: set[bytes] | None = None
    decoder: pg_abc.Transformer | None = None


_PLACEHOLDER = re.compile(r"%\((\w+)\)[sb]|%%")
_TUPLES_OK, _COMMAND_OK, _FATAL = ExecStatus.TUPLES_OK, ExecStatus.COMMAND_OK, ExecStatus.FATAL_ERROR


_GONE = b"26000"  # invalid_sql_statement_name: a run of a name the session no longer has
_TAKEN = b"42P05"  # duplicate_prepared_statement: a Parse of a name the session has already
# An exchange, then one more per way its names were found out of step (a pair's: the first's
# Parse taken, then the second's; or its names gone): a bound, not a loop on a real failure.
_ATTEMPTS = 4


def _in_step(ready: set[bytes], new: list[Statement], prepared: list[Any], results: list[Any], pg: Any) -> bool:
    """Bring ``ready`` (a connection's :class:`Statement` names) in step with what an exchange
    showed of the server's (``new`` prepared, then statements run: their results), and say
    whether to send it again: it failed only on our bookkeeping, so nothing of it took effect.

    The names go out of step one way: psycopg sends ``DEALLOCATE ALL`` after a ``ROLLBACK``,
    ``DROP`` or ``ALTER`` on a connection where it prepared statements of its own (a failed
    mutation's ``ROLLBACK``, the pool's reset of a connection returned in a transaction), which
    drops ours too while ``ready`` still lists them. An exchange built on a stale ``ready`` then
    fails: a run of a name gone (26000), or, after a partial record (the code before this rule),
    a Parse of a name the server has (42P05, aborting the rest of its pipeline). Both fail before
    that statement runs, and a pipeline is one implicit transaction (one Sync), rolled back whole
    by any failure (what ran before it too: a pair's first statement); :func:`_serially` sends
    nothing after a failure. So on an idle connection (not inside a transaction block, which the
    failure would have aborted) nothing took effect, and it is sent again once ``ready`` is
    corrected. Any other failure is the statement's own: answered as it is."""
    resend = False
    for stmt, res in zip(new, prepared, strict=False):  # (a pipeline's aborted Parses have results too)
        if res.status == _COMMAND_OK:
            ready.add(stmt.name)
        elif res.status == _FATAL:
            if res.error_field(DiagnosticField.SQLSTATE) != _TAKEN:
                return False  # a statement the server cannot prepare
            # The session has it under that name: a name is its text's hash, so it is this statement.
            ready.add(stmt.name)
            resend = True
    for res in results:
        if res.status == _FATAL:
            if res.error_field(DiagnosticField.SQLSTATE) != _GONE:
                return False
            # Only DEALLOCATE ALL (or DISCARD ALL) drops ours: every one went, before this
            # exchange, whose own Parses (sent before its runs) are the session's now.
            ready.clear()
            for stmt, done in zip(new, prepared, strict=False):
                if done.status == _COMMAND_OK or done.error_field(DiagnosticField.SQLSTATE) == _TAKEN:
                    ready.add(stmt.name)
            resend = True
    return resend and pg.transaction_status == TransactionStatus.IDLE


def _serially(conn: psycopg.Connection[Any], new: list[Statement], sent: Any) -> tuple[list[Any], list[Any]]:
    """:func:`_pipeline`'s work where libpq has no pipeline mode (:meth:`PgDatastore.run`'s one
    statement; :meth:`PgDatastore.run_pair` needs pipelines): each Parse, then the run, each
    answered before the next is sent; a failure sends nothing more."""
    pg = conn.pgconn
    prepared: list[Any] = []
    for stmt in new:
        pg.send_prepare(stmt.name, stmt.sql)
        prepared += conn.wait(pq_execute(pg))
        if prepared[-1].status == _FATAL:
            return prepared, []
    results: list[Any] = []
    for stmt, values, formats in sent:
        pg.send_query_prepared(stmt.name, values, formats, 0)
        results += conn.wait(pq_execute(pg))
        if results[-1].status == _FATAL:
            break
    return prepared, results


class Statement:
    """A hot statement (an append's call, the tail's read) sent through libpq directly by
    :meth:`PgDatastore.run`, prepared once per connection under a name of its own.

    psycopg's cursor works out, on every ``execute``, the query's conversion, a dumper
    per parameter, its prepared-statement cache key and the result's row maker: about
    50,000 instructions a statement, as many as all the rest of a warm tail's store
    side. Here the query is converted once (``%(name)s`` and ``%(name)b`` to ``$n``,
    a repeated name to one ``$n``, their types inferred by the server from the query),
    and each value is passed as bytes: a ``str`` as its UTF-8 (binary format: its length
    is sent, nothing is cut at a NUL), an ``int`` or ``bool`` as its text, a
    :class:`~.arrays.TextArray` in ``text[]``'s binary form; the rows come back as
    psycopg's loaders make them (a cursor's ``fetchall()``)."""

    __slots__ = ("name", "names", "query", "sql", "values")

    def __init__(self, query: str) -> None:
        names: list[str] = []

        def number(m: re.Match[str]) -> str:
            if m.group(1) is None:
                return "%"
            if m.group(1) not in names:
                names.append(m.group(1))
            return f"${names.index(m.group(1)) + 1}"

        text = _PLACEHOLDER.sub(number, query)
        self.query = query
        self.sql = text.encode("utf-8")
        self.names = tuple(names)
        # Named by its text: the same on every connection, never one of psycopg's (_pg3_*).
        self.name = b"sm_" + hashlib.sha1(self.sql).hexdigest()[:20].encode("ascii")
        # The parameters as libpq takes them (each value's bytes, and the formats: 0 text, 1
        # binary), by a function made for these names: a ``str`` (nearly every value) as its
        # UTF-8 in binary format (its length is sent, nothing is cut at a NUL), an ``int`` as
        # its digits (their UTF-8 is their ASCII) in text format, anything else by _encode.
        # Straight-line code, no loop and no call per value: a warm append's two statements
        # took ~550 bytecodes through one loop over the names.
        self.values: Callable[[dict[str, Any]], tuple[list[bytes | None], list[int]]] = _values_of(self)


def _values_of(*statements: Statement) -> Callable[..., Any]:
    """The function that encodes the parameters of ``statements`` (each name once, however many
    of them take it): for one statement, its values and formats (:attr:`Statement.values`); for
    two, what :meth:`PgDatastore.run_pair` sends, ``((first, values, formats), (second, ...))``."""
    names = list(dict.fromkeys(name for stmt in statements for name in stmt.names))
    lines = [f"def values(params, {', '.join(f's{j}' for j in range(len(statements)))}):"
             if len(statements) > 1 else "def values(params):"]
    for i, name in enumerate(names):
        # (no codec named: UTF-8, the default, takes its fast path; a named one is looked up
        # and normalized on every call)
        lines += [f"    v = params[{name!r}]",
                  f"    if type(v) is str: v{i}, f{i} = v.encode(), 1",
                  f"    elif type(v) is int: v{i}, f{i} = str(v).encode(), 0",
                  f"    else: v{i}, f{i} = encode(v, {name!r})"]
    lists = []
    for stmt in statements:
        at = [names.index(name) for name in stmt.names]
        lists.append(f"[{', '.join(f'v{i}' for i in at)}], [{', '.join(f'f{i}' for i in at)}]")
    lines.append(f"    return {lists[0]}" if len(statements) == 1 else
                 "    return " + ", ".join(f"(s{j}, {made})" for j, made in enumerate(lists)))
    scope: dict[str, Any] = {"encode": _encode}
    exec(compile("\n".join(lines), "<Statement.values>", "exec"), scope)  # built from our own SQL's names
    values: Callable[..., Any] = scope["values"]
    return values


# run_pair's encoders, by the pair's names (made once per pair of statements)
_PAIRS: dict[tuple[bytes, bytes], Callable[..., Any]] = {}


def _encode(value: Any, name: str) -> tuple[bytes | None, int]:
    """A parameter that is neither a ``str`` nor an ``int``, as libpq takes it: its bytes and its format."""
    kind = type(value)
    if value is None:
        return None, 0
    if kind is FixedTextArray:
        return value.wire, 1
    if kind is TextArray:
        if len(value) == 1 and value[0] is not None:  # (encode_array's usual case, without the call)
            data = value[0].encode()
            return ONE_HEADER + LENGTH.pack(len(data)) + data, 1
        return encode_array(value), 1
    if kind is bool:
        return b"t" if value else b"f", 0
    raise TypeError(f"{name}: a {kind.__name__} is not a parameter of a direct statement")


# What the pool's fast path reads of psycopg_pool's own state (see _Pool): where a
# release lacks any of it, every call takes psycopg_pool's own getconn and putconn.
_POOL_STATE = ("_lock", "_pool", "_waiting", "_closed", "_nconns_min", "_stats", "_REQUESTS_NUM", "_check",
               "_reset", "_drained_at", "_pool_full_event")
_IDLE = psycopg.pq.TransactionStatus.IDLE

# The pool's maintenance threads (psycopg_pool's default is 3). Each is started, and waited for
# until it runs, at open() before the first connection is even attempted, so every one delays a
# cold store's first call (on a loaded 2-core box, a scheduling round each: open() took ~1 ms at
# its 10th percentile and ~8 ms at its median at load 9). One is enough for what they do here:
# connecting (the first, one at a time when the pool grows), shrinking, and replacing the
# connections a lost server ended (then one after another: a waiting call takes the first).
# No check or reset callback runs in them; connections come back in the caller's thread.
POOL_WORKERS = 1


class _Pool(ConnectionPool[psycopg.Connection[Any]]):
    """The pool, whose health check (:meth:`check`, run by the calling thread
    after a lost connection) answers within that thread's deadline too.

    Its :meth:`getconn` and :meth:`putconn` take a fast path in the common case (a
    connection idle in the pool, nobody waiting, no check or reset callback, the
    connection returned idle and within its lifetime): the same steps as
    psycopg_pool's, under its lock, without its logging calls, statistics objects and
    layers of calls: about 30,000 instructions a call (a warm append's or tail's),
    counted with callgrind, down to a few thousand. Anything else is psycopg_pool's."""

    def __init__(self, core: PgDatastore, conninfo: str, **kwargs: Any) -> None:
        self._core = core
        self._served = False
        super().__init__(conninfo, **kwargs)
        self._fast = all(hasattr(self, name) for name in _POOL_STATE) and not self._check and not self._reset

    def getconn(self, timeout: float | None = None) -> psycopg.Connection[Any]:
        if self._fast:
            with self._lock:
                ready = self._pool
                if ready and not self._closed:
                    conn = ready.popleft()
                    if len(ready) < self._nconns_min:
                        self._nconns_min = len(ready)
                    self._stats[self._REQUESTS_NUM] += 1
                    conn._pool = self  # (as psycopg_pool marks a connection served)
                    self._served = True
                    return conn
        conn = super().getconn(timeout)
        self._served = True
        return conn

    def putconn(self, conn: psycopg.Connection[Any]) -> None:
        if (self._fast and conn._pool is self and conn.pgconn.transaction_status == _IDLE
                and conn._created_at > self._drained_at and conn._expire_at > time.monotonic()):
            conn._pool = None
            with self._lock:
                if not self._closed and not self._waiting and self._pool_full_event is None:
                    self._pool.append(conn)
                    return
            conn._pool = self  # someone waits (or the pool closed): psycopg_pool hands it on
        super().putconn(conn)

    def _maybe_grow_pool(self) -> None:
        # A cold store's first call waits for the connection open() started: growing the
        # pool for it opened a second one racing that one (a second backend started on the
        # server during the call), and the FIFO pool then alternated the next calls between
        # two backends, each preparing and planning every statement anew (a warm tail's
        # first ten calls at 2x). Calls that wait once one was served grow it as before.
        if self._served:
            super()._maybe_grow_pool()

    def check_connection(self, conn: psycopg.Connection[Any]) -> None:  # type: ignore[override]
        armed = self._core.watchdog.arm(conn, self._core.deadline_at())
        try:
            ConnectionPool.check_connection(conn)
        finally:
            self._core.watchdog.disarm(armed)


# A backend start no backend has (see PgDatastore.started_at).
NO_BACKEND = datetime(1, 1, 1, tzinfo=timezone.utc)


def _no_guard() -> None:
    return None


def _kind(value: Any) -> Any:
    """What psycopg's choice of a parameter's type depends on (its prepared statements
    are per query and types): an int's size, a list's first element's type."""
    t = type(value)
    if t is int:
        return next((size for size in (2, 4, 8) if -(2 ** (8 * size - 1)) <= value < 2 ** (8 * size - 1)), 0)
    if t is list:
        return list, type(next((v for v in value if v is not None), None))
    return t


def _shape(params: Any) -> tuple[Any, ...]:
    values = params.values() if isinstance(params, dict) else () if params is None else params
    types = tuple(map(type, values))  # (checked on every statement run: the types at C speed)
    if int not in types and list not in types:
        return types
    # _kind where the type alone does not say it, beside the types (which still place them).
    return types, tuple([_kind(v) for v in values if type(v) is int or type(v) is list])



def _pipeline(conn: psycopg.Connection[Any], new: list[Statement],
              sent: list[tuple[Statement, list[bytes | None], list[int]]] | tuple[Any, ...],
              meanwhile: Callable[[], None] | None = None) -> tuple[list[Any], list[Any]]:
    """Prepare ``new`` and run ``sent`` in one libpq pipeline with one Sync (one round trip):
    the prepares' results and the runs' results. ``meanwhile`` runs once all is sent, before
    the answer is read (see :meth:`PgDatastore.run_pair`)."""
    pg = conn.pgconn
    pg.enter_pipeline_mode()
    try:
        for stmt in new:
            pg.send_prepare(stmt.name, stmt.sql)
        for stmt, values, formats in sent:
            pg.send_query_prepared(stmt.name, values, formats, 0)
        pg.pipeline_sync()
        # Flushed here first: almost always all of it goes at once (a few hundred bytes), and the
        # wait (psycopg's send generator, its wait loop, a poll) is needed only for a remainder.
        if pg.flush():
            conn.wait(send(pg))
        if meanwhile is not None:
            meanwhile()
        # (loops, not comprehensions: no frame of their own; a warm run prepares nothing)
        prepared: list[Any] = []
        for _ in new:
            prepared += conn.wait(fetch_many(pg))
        results: list[Any] = []
        for _ in sent:
            results += conn.wait(fetch_many(pg))
        conn.wait(fetch_many(pg))  # the Sync's
    except BaseException:
        with contextlib.suppress(psycopg.Error):  # (a lost connection: the pool discards it)
            pg.exit_pipeline_mode()
        raise
    pg.exit_pipeline_mode()
    return prepared, results

class PgDatastore:
    """One schema of one database, and this instance's pool of connections to it."""

    def __init__(self, settings: PostgresSettings) -> None:
        self.settings = settings
        self.instance = uuid.uuid4().hex
        self.local = _Local()
        self.closed = False
        # Run before every statement a part sends through conn() and rows(): the
        # optimistic part turns a mutation it cannot serve into a transaction there.
        self.guard: Callable[[], None] = _no_guard
        self.watchdog = Watchdog("session-manager-deadline")
        self._started: weakref.WeakKeyDictionary[psycopg.Connection[Any], Any] = weakref.WeakKeyDictionary()
        # The statements each pooled connection has prepared (see execute()).
        self._prepared: weakref.WeakKeyDictionary[psycopg.Connection[Any], set[Any]] = weakref.WeakKeyDictionary()
        # The Statement names another connection has prepared (run(); a pooled one keeps its own).
        self._statements: weakref.WeakKeyDictionary[psycopg.Connection[Any], set[bytes]] = weakref.WeakKeyDictionary()
        self._pipelines = psycopg.Pipeline.is_supported()
        problem = schema.name_problem(settings.schema)
        if problem is not None:
            raise StoreError(f"postgres: {problem}")
        try:
            conninfo = settings.conninfo()
        except psycopg.Error as e:
            self.watchdog.close()
            raise StoreError(self.say(f"cannot open the database {safe_dsn(settings.dsn)}: {e}")) from None
        self.conninfo = conninfo
        if (conninfo, settings.schema) not in schema.CHECKED:  # once per process (see schema.CHECKED)
            self._migrate()
        self.pool = _Pool(
            self,
            conninfo,
            min_size=1,
            max_size=max(1, settings.pool_size),
            kwargs={"autocommit": True},
            connection_class=_Conn,
            timeout=settings.pool_timeout_ms / 1000,
            reconnect_timeout=10.0**9,  # keep trying: the server may come back at any time
            name="session-manager",
            num_workers=POOL_WORKERS,
            open=False,
        )
        self.pool.open(wait=False)
        # take()'s fast path: the pool's (getconn's wait, min(pool_timeout_ms, what is left), is then > 0)
        self._takes = self.pool._fast and settings.pool_timeout_ms > 0
        self.watchdog.start()  # while the pool connects

    def say(self, text: str) -> str:
        """``text`` with the DSN's password masked."""
        return redact(text, self.settings.dsn)

    def _migrate(self) -> None:
        try:
            with psycopg.connect(self.conninfo, autocommit=True) as conn:
                armed = self.watchdog.arm(conn, self.deadline_at())  # a silent peer cannot hang the boot
                try:
                    if self.settings.read_only:
                        schema.check(conn, self.settings.schema)
                    else:
                        schema.migrate(conn, self.settings.schema)
                finally:
                    self.watchdog.disarm(armed)
        except psycopg.Error as e:
            self.watchdog.close()
            raise StoreError(self.say(f"cannot open the database {safe_dsn(self.settings.dsn)}: {e}")) from None
        except BaseException:
            self.watchdog.close()
            raise
        schema.CHECKED.add((self.conninfo, self.settings.schema))

    def started_at(self, conn: psycopg.Connection[Any]) -> Any:
        """When ``conn``'s backend started: with its pid, what names that backend for good
        (a pid alone may be reused), to end it after a lost answer. Read on first need
        (a connection's first append), not when the pool connects (a round trip that a
        cold store's first read waited for). A connection that cannot answer is dead: its
        backend runs nothing more of ours, and :data:`NO_BACKEND` matches no backend."""
        pooled = type(conn) is _Conn
        found = conn.backend_start if pooled else self._started.get(conn, _UNREAD)  # type: ignore[attr-defined]
        if found is _UNREAD:
            try:
                row = conn.execute("SELECT backend_start FROM pg_stat_get_activity(pg_backend_pid())").fetchone()
            except psycopg.Error:
                return NO_BACKEND if conn.broken or conn.closed else None
            found = row[0] if row else None
            if pooled:
                conn.backend_start = found  # type: ignore[attr-defined]
            else:
                self._started[conn] = found
        return found

    def fail(self, e: BaseException) -> StoreError:
        armed = self.local.state.armed
        if armed is not None and armed.fired:  # the watchdog ended the connection at the call's deadline
            return self.late("no answer")
        # OperationalError: the server is unreachable, went away, or no
        # connection freed up in time (PoolTimeout): retrying may succeed.
        kind = Unavailable if isinstance(e, psycopg.OperationalError) else StoreError
        return kind(self.say(f"postgres: {type(e).__name__}: {e}".strip()))

    def late(self, what: str) -> Unavailable:
        return Unavailable(f"postgres: {what} within timeout_ms={self.settings.timeout_ms}"
                           " (the connection, if any, was discarded)")

    # -- the deadline --------------------------------------------------------------

    def deadline_at(self) -> float:
        """When the call in progress must have answered (a call of its own outside one)."""
        deadline = self.local.state.deadline
        return deadline if deadline is not None else time.monotonic() + self.settings.timeout_ms / 1000

    @contextmanager
    def deadline(self) -> Iterator[None]:
        """Every exchange inside shares one deadline, ``timeout_ms`` from now (kept if already set).
        (:meth:`.optimistic.Optimistic.run_call`, every call's way in, does the same inline.)"""
        state = self.local.state
        if state.deadline is not None:
            yield
            return
        state.deadline = time.monotonic() + self.settings.timeout_ms / 1000
        try:
            yield
        finally:
            state.deadline = None
            state.window = None  # read for this call only

    def getconn(self, deadline: float | None = None) -> psycopg.Connection[Any]:
        """A pooled connection armed with ``deadline`` (None: :meth:`deadline_at`'s); the wait
        for it counts against it too. Taken inside another use of this thread (a store call made
        while a call waits: a signal handler, a finalizer), that use's armed connection is kept
        (:attr:`~.deadline.Armed.outer`) and is the thread's again once this one is handed back."""
        state = self.local.state
        outer = state.armed
        if outer is not None and not outer.held:
            outer = None  # (the last one handed back, not one in use)
        state.armed = None
        try:
            conn = self._getconn(state, deadline)
        except BaseException:
            state.armed = outer
            raise
        armed = state.armed
        assert armed is not None
        armed.held, armed.outer = True, outer
        return conn

    def _getconn(self, state: _State, deadline: float | None) -> psycopg.Connection[Any]:
        if deadline is None:  # (deadline_at's answer, from the thread's state read here anyway)
            deadline = state.deadline if state.deadline is not None else self.deadline_at()
        if self.closed:
            raise StoreError("postgres: the store is closed")
        left = deadline - time.monotonic()
        wait = min(self.settings.pool_timeout_ms / 1000, left)
        if wait <= 0:
            raise self.late("no connection")
        try:
            conn = self.pool.getconn(timeout=wait)
        except psycopg.Error as e:
            if wait < self.settings.pool_timeout_ms / 1000 and time.monotonic() >= deadline:
                raise self.late("no connection") from None
            raise self.fail(e) from None
        try:
            state.armed = self.watchdog.arm(conn, deadline)
        except psycopg.Error as e:
            self.pool.putconn(conn)  # closed already: the pool discards it
            raise self.fail(e) from None
        return conn

    def putconn(self, conn: psycopg.Connection[Any]) -> None:
        """Back to the pool, unless the deadline ended it (then it is closed and discarded)."""
        state = self.local.state
        armed = state.armed
        if armed is not None:
            if self.watchdog.disarm(armed):
                conn.close()
            armed.held = False
            if armed.outer is not None:  # (a use inside another: the thread's is the outer one again)
                state.armed, armed.outer = armed.outer, None
        self.pool.putconn(conn)  # a broken or closed connection is discarded by the pool

    def take(self, state: _State) -> psycopg.Connection[Any]:
        """:meth:`getconn` for the call in progress (``state``: the thread's, read by the caller;
        its deadline set) in the common case, in one call: a connection idle in the pool (the
        pool's fast path, :class:`_Pool`), armed with the call's deadline by the thread's own
        :class:`~.deadline.Armed`, used again (no object made: :meth:`give` disarms it, and
        the watchdog touches only what is armed, under its lock). Anything else is
        :meth:`getconn`'s (same errors). Returned with :meth:`give` (or :meth:`putconn`)."""
        deadline, pool = state.deadline, self.pool
        if deadline is None or self.closed or not self._takes or deadline <= time.monotonic():
            return self.getconn(deadline)
        conn = None
        with pool._lock:  # (_Pool.getconn's fast path)
            ready = pool._pool
            if ready and not pool._closed:
                conn = ready.popleft()
                if len(ready) < pool._nconns_min:
                    pool._nconns_min = len(ready)
                pool._stats[pool._REQUESTS_NUM] += 1
                conn._pool = pool
                pool._served = True
        if conn is None:
            return self.getconn(deadline)
        outer = state.armed  # (in use: a call inside a call on this thread, see getconn)
        if outer is not None and not outer.held:
            outer = None
        try:
            fd = conn.pgconn.socket
        except psycopg.Error as e:
            state.armed = None
            pool.putconn(conn)  # closed already: the pool discards it
            failure = self.fail(e)
            state.armed = outer
            raise failure from None
        watchdog = self.watchdog  # (Watchdog.arm's steps, on the thread's spare Armed)
        with watchdog._lock:
            armed = state.spare
            # (still armed, or in use: never given back, or the outer use's own; a new one)
            if armed is None or armed.held or armed.key in watchdog._armed:
                armed = state.spare = Armed(next(watchdog._keys), deadline, fd)
            else:
                armed.deadline, armed.fd, armed.fired = deadline, fd, False
            armed.held, armed.outer = True, outer
            watchdog._armed[armed.key] = armed
            if watchdog._thread is None:
                watchdog._start()
            if deadline < watchdog._wake_at:
                watchdog._cond.notify()
        state.armed = armed
        return conn

    def give(self, conn: psycopg.Connection[Any], state: _State) -> None:
        """:meth:`putconn` (``state``: the thread's), the disarm and the pool's fast path inline."""
        armed = state.armed
        if armed is not None:
            watchdog = self.watchdog
            with watchdog._lock:  # (Watchdog.disarm: after this, the watchdog never touches it again)
                watchdog._armed.pop(armed.key, None)
            if armed.fired:
                conn.close()
            armed.held = False
            if armed.outer is not None:  # (a use inside another: the thread's is the outer one again)
                state.armed, armed.outer = armed.outer, None
        pool = self.pool
        if (pool._fast and conn._pool is pool and conn.pgconn.transaction_status == _IDLE  # (_Pool.putconn's)
                and conn._created_at > pool._drained_at and conn._expire_at > time.monotonic()):
            conn._pool = None
            with pool._lock:
                if not pool._closed and not pool._waiting and pool._pool_full_event is None:
                    pool._pool.append(conn)
                    return
            conn._pool = pool
        pool.putconn(conn)

    # -- running statements ---------------------------------------------------------

    def execute(
        self, conn: psycopg.Connection[Any], query: str | sql.Composed, params: Any = None
    ) -> psycopg.Cursor[Any]:
        """``query`` on a pooled (autocommit) connection, prepared: its first use on
        that connection (with these parameter types) sends the Parse in one pipeline
        with the execution (psycopg otherwise waits for a prepare on its own, an extra
        round trip); later uses send the Bind and Execute only. Returns the cursor."""
        done = self._prepared.get(conn)
        if done is None:
            done = self._prepared.setdefault(conn, set())
        shape = (query, _shape(params))
        # One cursor per connection (the caller fetches its rows before the connection's next statement).
        cursor = conn.cursor_in_use if type(conn) is _Conn else None
        if cursor is None or cursor.closed:
            cursor = conn.cursor()
            if type(conn) is _Conn:
                conn.cursor_in_use = cursor
        if shape in done or not self._pipelines:
            return cursor.execute(query, params, prepare=True)
        with conn.pipeline():
            cursor.execute(query, params, prepare=True)
        done.add(shape)
        return cursor

    def run(self, conn: psycopg.Connection[Any], stmt: Statement, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """``stmt`` on a pooled (autocommit) connection, straight through libpq (see
        :class:`Statement`): its first run on that connection sends the Parse in one
        pipeline with the execution (one round trip, as :meth:`execute`), later runs
        the Bind and Execute only; a name found out of step with the server's (psycopg's
        ``DEALLOCATE ALL``) is corrected and the statement sent again (:func:`_in_step`).
        Returns its rows; a failure raises psycopg's error."""
        values, formats = stmt.values(params)
        pg = conn.pgconn
        ready = self._ready(conn)
        if stmt.name in ready:
            pg.send_query_prepared(stmt.name, values, formats, 0)
            results = conn.wait(pq_execute(pg))
            if results[0].status == _FATAL:
                sent = ((stmt, values, formats),)
                if _in_step(ready, [], [], results, pg):  # (its name was gone: see _in_step)
                    results = self._exchange(conn, sent, ready)
        else:
            results = self._exchange(conn, ((stmt, values, formats),), ready)
        return self._rows(conn, stmt, results)

    def _ready(self, conn: psycopg.Connection[Any]) -> set[bytes]:
        """The names of the :class:`Statement` s prepared on ``conn``."""
        ready = conn.statements if isinstance(conn, _Conn) else self._statements.get(conn)
        if ready is None:
            ready = set()
            if isinstance(conn, _Conn):
                conn.statements = ready
            else:
                self._statements[conn] = ready
        return ready

    def _rows(self, conn: psycopg.Connection[Any], stmt: Statement, results: list[Any]) -> list[tuple[Any, ...]]:
        """The last result's rows (the first failure among ``results`` raised as psycopg's error)."""
        for res in results:
            if res.status == _FATAL:
                raise pg_errors.error_from_result(res, encoding=conn.info.encoding)
        res = results[-1]
        if res.status != _TUPLES_OK:
            if res.status == _COMMAND_OK:
                return []
            raise pg_errors.InternalError(f"unexpected result {ExecStatus(res.status).name} from {stmt.name!r}")
        decoder = conn.decoder if isinstance(conn, _Conn) else None
        if decoder is None:
            decoder = Transformer(conn)
            if isinstance(conn, _Conn):
                conn.decoder = decoder
        decoder.set_pgresult(res)
        try:
            return decoder.load_rows(0, res.ntuples, tuple)
        finally:
            decoder.set_pgresult(None)  # (the result's memory is not kept past the call)

    def run_pair(self, conn: psycopg.Connection[Any], first: Statement, second: Statement,
                 params: dict[str, Any], meanwhile: Callable[[], None] | None = None) -> list[tuple[Any, ...]]:
        """``first`` then ``second`` (each taking its parameters from ``params``) on a pooled
        (autocommit) connection, in one pipeline with one Sync: one round trip and one
        implicit transaction, committed at the Sync, or rolled back whole if either fails.
        ``second``'s snapshot is taken once ``first`` has run (the locks it took are held).
        Each is prepared in the same pipeline on its first use on ``conn`` (and sent again,
        as :meth:`run`, after names found out of step with the server's). Returns
        ``second``'s rows; a failure raises psycopg's error. Needs libpq's pipeline mode
        (:attr:`pipelines`).

        ``meanwhile`` (once, whatever the answer) is the caller's work that does not need the
        answer, run once everything is sent and before the answer is read: while the server
        executes and commits (mostly while its backend waits for the commit's WAL flush: woken
        by the send, it usually takes the caller's core until then). It must not raise (a
        failure there would leave the exchange half read)."""
        pooled = type(conn) is _Conn
        ready = conn.statements if pooled else None  # type: ignore[attr-defined]
        if ready is None:
            ready = self._ready(conn)
        pair = _PAIRS.get((first.name, second.name))
        if pair is None:
            pair = _PAIRS[first.name, second.name] = _values_of(first, second)
        sent = pair(params, first, second)  # (a name both take encoded once)
        if first.name not in ready or second.name not in ready:
            return self._rows(conn, second, self._exchange(conn, sent, ready, meanwhile))
        # The warm case, both prepared: _pipeline's steps for two runs and nothing to prepare, inline.
        pg = conn.pgconn
        pg.enter_pipeline_mode()
        try:
            (stmt0, values0, formats0), (stmt1, values1, formats1) = sent
            pg.send_query_prepared(stmt0.name, values0, formats0, 0)
            pg.send_query_prepared(stmt1.name, values1, formats1, 0)
            pg.pipeline_sync()
            if pg.flush():
                conn.wait(send(pg))
            if meanwhile is not None:
                meanwhile()
            results = conn.wait(fetch_many(pg))
            results += conn.wait(fetch_many(pg))
            conn.wait(fetch_many(pg))  # the Sync's
        except BaseException:
            with contextlib.suppress(psycopg.Error):  # (a lost connection: the pool discards it)
                pg.exit_pipeline_mode()
            raise
        pg.exit_pipeline_mode()
        for res in results:  # (a loop: a comprehension is a frame of its own, every warm append)
            if res.status == _FATAL:
                if _in_step(ready, [], [], results, conn.pgconn):  # (names gone: see _in_step)
                    results = self._exchange(conn, sent, ready)
                return self._rows(conn, second, results)
        # (_rows' common case inline: no failure, rows, the connection's decoder made already)
        res = results[-1]
        decoder = conn.decoder if pooled else None  # type: ignore[attr-defined]
        if decoder is None or res.status != _TUPLES_OK:
            return self._rows(conn, second, results)
        decoder.set_pgresult(res)
        try:
            return decoder.load_rows(0, res.ntuples, tuple)  # type: ignore[no-any-return]
        finally:
            decoder.set_pgresult(None)  # (the result's memory is not kept past the call)

    @property
    def pipelines(self) -> bool:
        """Whether libpq has pipeline mode (:meth:`run_pair` needs it)."""
        return self._pipelines

    def _exchange(self, conn: psycopg.Connection[Any], sent: Any, ready: set[bytes],
                  meanwhile: Callable[[], None] | None = None) -> list[Any]:
        """``sent`` (statements with their values) in one round trip, each statement that
        ``ready`` lacks prepared in it; sent again (a round trip each) while it failed only
        because ``ready`` was out of step with the server (:func:`_in_step`, which corrects
        it): the prepares' results, then the runs'. ``meanwhile``: see :meth:`run_pair`."""
        pg = conn.pgconn
        for _ in range(_ATTEMPTS):
            new: list[Statement] = []
            for stmt, _values, _formats in sent:
                if stmt.name not in ready and all(stmt.name != other.name for other in new):
                    new.append(stmt)
            if self._pipelines:
                prepared, results = _pipeline(conn, new, sent, meanwhile)
            else:
                prepared, results = _serially(conn, new, sent)
            meanwhile = None  # (run once: the exchange sent again does not need it)
            if not _in_step(ready, new, prepared, results, pg):
                break
        return [*prepared, *results]

    @contextmanager
    def conn(self) -> Iterator[psycopg.Connection[Any]]:
        """The mutation's connection on this thread, else a pooled autocommit one."""
        self.guard()
        tx = self.local.state.tx
        if tx is not None:
            try:
                yield tx.conn
            except psycopg.Error as e:
                raise self.fail(e) from None
            return
        conn = self.getconn(self.deadline_at())
        try:
            yield conn
        except psycopg.Error as e:
            raise self.fail(e) from None
        finally:
            self.putconn(conn)

    def rows(self, query: str | sql.Composed | Statement, params: Any = None) -> list[tuple[Any, ...]]:
        """A statement's rows: in the mutation's transaction, else on a pooled connection
        (a read that found its idle connection lost runs again on a live one)."""
        state = self.local.state
        if state.plan is None and state.tx is None and state.deadline is not None and not self.closed:
            # A call's read outside any mutation (every warm read: a tail, a get), with the thread's
            # state read once: no plan, so the guard has nothing to do (the optimistic part's acts
            # on a plan only); the connection taken and given back by take/give (the pool's fast
            # path, the thread's own Armed); the same retry on a connection found lost.
            for attempt in (1, 2):
                conn = self.take(state)
                try:
                    if isinstance(query, Statement):
                        ready = conn.statements if type(conn) is _Conn else None
                        decoder = conn.decoder if ready is not None else None  # type: ignore[attr-defined]
                        if decoder is None or query.name not in ready:  # type: ignore[operator]
                            return self.run(conn, query, params)
                        # (run's warm case inline, and _rows': prepared on this connection, its
                        # decoder made, one result with rows)
                        values, formats = query.values(params)
                        pg = conn.pgconn
                        pg.send_query_prepared(query.name, values, formats, 0)
                        results = conn.wait(pq_execute(pg))
                        res = results[-1]
                        if len(results) != 1 or res.status != _TUPLES_OK:
                            if results[0].status == _FATAL and _in_step(ready, [], [], results, pg):  # type: ignore[arg-type]
                                results = self._exchange(conn, ((query, values, formats),), ready)  # type: ignore[arg-type]
                            return self._rows(conn, query, results)
                        decoder.set_pgresult(res)
                        try:
                            return decoder.load_rows(0, res.ntuples, tuple)  # type: ignore[no-any-return]
                        finally:
                            decoder.set_pgresult(None)  # (the result's memory is not kept past the call)
                    return self.execute(conn, query, params).fetchall()
                except psycopg.Error as e:
                    failure = self.fail(e)
                finally:
                    self.give(conn, state)
                armed = state.armed
                if attempt == 1 and not (armed is not None and armed.fired) and self.stale(conn):
                    continue  # a read: run it again on a live connection
                raise failure
        self.guard()
        if self.local.state.tx is not None or self.closed:
            with self.conn() as conn:
                return conn.execute(query.query if isinstance(query, Statement) else query, params).fetchall()
        deadline = self.deadline_at()
        for attempt in (1, 2):
            conn = self.getconn(deadline)
            try:
                if isinstance(query, Statement):
                    return self.run(conn, query, params)
                return self.execute(conn, query, params).fetchall()
            except psycopg.Error as e:
                failure = self.fail(e)
            finally:
                self.putconn(conn)
            armed = self.local.state.armed
            if attempt == 1 and not (armed is not None and armed.fired) and self.stale(conn):
                continue  # a read: run it again on a live connection
            raise failure
        raise AssertionError("unreachable")

    def stale(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether a statement failed because ``conn`` was lost (the server ended
        it, or it went away, while it sat idle in the pool). Then every idle
        connection is checked (within the call's deadline), so the pool drops
        those lost with it (a restart or failover ends them all) and the retry
        gets a live one, instead of the next pool_size calls failing one by one
        on the dead ones."""
        if not conn.broken:
            return False
        self.pool.check()
        return True

    def close(self) -> None:
        """Refuse new connections (the store stops its outbox next, then :meth:`release`)."""
        self.closed = True

    def release(self) -> None:
        """Close the pool and the watchdog."""
        self.pool.close(timeout=5.0)
        self.watchdog.close()

    def storage_error(self, e: BaseException) -> SessionError:
        """A lazy read's failure, as callers see it (it happens outside the service's mapping)."""
        return SessionError(STORAGE, str(self.fail(e)) if isinstance(e, psycopg.Error) else str(e))
