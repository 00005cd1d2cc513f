"""The postgres adapter: any number of instances over one database.

Values are stored as their exact JSON text (the same encoder as the fs
store's lines), so they round-trip byte for byte; the only jsonb column is a
derived copy of the session metadata that serves list filters.

Transactions: :meth:`PostgresStore.mutation` (entered by the service around
one mutation) takes a pooled connection, opens a transaction and takes a
transaction-scoped advisory lock per session, then binds the connection to
the calling thread: every store call the mutation makes (its reads, checks
and its commit) runs in that transaction, serialized against every other
process on the same schema. Inside :meth:`run_call` the commit waits until
the call's events are in the outbox, so writes and events commit together.

Reads outside a mutation run in autocommit on a pooled connection. Every
database failure becomes a :class:`StoreError` (``session/storage``) with the
password masked; a broken connection is discarded by the pool, so the next
call reconnects by itself.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from ..._wire.events import Event
from ...errors import STORAGE, SessionError, StoreError, Unavailable, UnstorableValue
from .. import pg_defaults as defaults
from .._cas import resolve
from .._records import _line as encode_json
from .._records import loads
from ..base import AttachmentMeta, Commit, Entry, EventSink, Meta, SessionStore
from ..path import EntryPath
from . import schema
from .keys import key, unkey
from .secrets import redact, safe_dsn

log = logging.getLogger("session_manager.store.postgres")

R = TypeVar("R")

OUTBOX_RETENTION_S = 600.0
LIST_BATCH = 200
# The longest id (UTF-8 bytes of its stored key) an entry may carry: a
# (session_id, entry_id) pair must fit PostgreSQL's btree row limit (2704
# bytes), whatever the id's compressibility.
ID_BYTES = 1024


@dataclass(frozen=True)
class PostgresSettings:
    """How to reach the database (the adapter's ``config``)."""

    dsn: str
    pool_size: int = defaults.POOL_SIZE
    connect_timeout_ms: int = defaults.CONNECT_TIMEOUT_MS
    statement_timeout_ms: int = defaults.STATEMENT_TIMEOUT_MS
    pool_timeout_ms: int = defaults.POOL_TIMEOUT_MS
    schema: str = defaults.SCHEMA
    outbox_retention_s: float = OUTBOX_RETENTION_S

    def conninfo(self) -> str:
        # libpq counts connect_timeout in whole seconds (and treats 1 as 2).
        seconds = max(2, -(-self.connect_timeout_ms // 1000))
        return psycopg.conninfo.make_conninfo(
            self.dsn,
            connect_timeout=seconds,
            options=f"-c statement_timeout={self.statement_timeout_ms} -c search_path={_quote_path(self.schema)}",
            application_name=f"session-manager:{self.schema}"[:63],  # tests find their backends by it
        )


def _quote_path(schema_name: str) -> str:
    # A search_path value inside libpq's options: quoted, backslashes and any
    # whitespace escaped (the server splits options on every isspace()).
    quoted = '"' + schema_name.replace('"', '""') + '"'
    return re.sub(r"([\\ \t\n\r\v\f])", r"\\\1", quoted)


def lock_key_sql() -> str:
    """The advisory-lock key of one session (per schema, so schemas never contend)."""
    return "hashtextextended(current_schema() || ':' || %s, 0)"


def _sanitize(value: Any) -> Any:
    """A jsonb-storable image of a JSON value: NUL (which jsonb refuses) escaped
    in strings and keys as in ids (:func:`.keys.key`, injective, so distinct
    keys stay distinct), integral floats as the exact integer they
    are (so ``2**70`` and ``1.1805916207174113e+21`` meet, as the service's rule
    has it). Applied to stored metadata and to filters alike, so values the
    service calls equal contain each other; the service rechecks the rest."""
    if isinstance(value, str):
        return key(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {_sanitize(k): _sanitize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sanitize(v) for v in value]
    return value


def _text(value: Any) -> str:
    return encode_json(value).decode("utf-8")


@dataclass
class _Tx:
    conn: psycopg.Connection[Any]
    locked: set[str] = field(default_factory=set)


class _Local(threading.local):
    tx: _Tx | None = None
    deferring: bool = False


class PostgresStore(SessionStore):
    """Sessions, entries and attachments in one PostgreSQL schema."""

    shared = True

    def __init__(self, settings: PostgresSettings) -> None:
        self.settings = settings
        self.instance = uuid.uuid4().hex
        self._local = _Local()
        self._closed = False
        problem = schema.name_problem(settings.schema)
        if problem is not None:
            raise StoreError(f"postgres: {problem}")
        try:
            conninfo = settings.conninfo()
            self._conninfo = conninfo
            with psycopg.connect(conninfo, autocommit=True) as conn:
                schema.migrate(conn, settings.schema)
        except psycopg.Error as e:
            raise StoreError(self._say(f"cannot open the database {safe_dsn(settings.dsn)}: {e}")) from None
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=max(1, settings.pool_size),
            kwargs={"autocommit": True},
            timeout=settings.pool_timeout_ms / 1000,
            reconnect_timeout=10.0**9,  # keep trying: the server may come back at any time
            name="session-manager",
            open=False,
        )
        self._pool.open(wait=False)
        from .outbox import Outbox  # the outbox needs a built store

        self.outbox = Outbox(self, settings.outbox_retention_s)

    # -- plumbing -------------------------------------------------------------

    def _say(self, text: str) -> str:
        return redact(text, self.settings.dsn)

    def _fail(self, e: BaseException) -> StoreError:
        # OperationalError: the server is unreachable, went away, or no
        # connection freed up in time (PoolTimeout): retrying may succeed.
        kind = Unavailable if isinstance(e, psycopg.OperationalError) else StoreError
        return kind(self._say(f"postgres: {type(e).__name__}: {e}".strip()))

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        """The mutation's connection on this thread, else a pooled autocommit one."""
        tx = self._local.tx
        if tx is not None:
            try:
                yield tx.conn
            except psycopg.Error as e:
                raise self._fail(e) from None
            return
        if self._closed:
            raise StoreError("postgres: the store is closed")
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as e:
            raise self._fail(e) from None

    def _rows(self, query: str | sql.Composed, params: Any = None) -> list[tuple[Any, ...]]:
        with self._conn() as conn:
            return conn.execute(query, params).fetchall()

    # -- transactions ---------------------------------------------------------------

    @contextmanager
    def mutation(self, session_ids: Collection[str]) -> Iterator[None]:
        tx = self._local.tx
        if tx is not None:  # nested (fork locks its new session inside the source's)
            self._lock(tx, session_ids)
            yield
            return
        tx = self._begin(session_ids)
        try:
            self._local.tx = tx
            yield
        except BaseException:
            self._end(tx, commit=False)
            raise
        if self._local.deferring:
            return  # run_call commits with the call's events
        self._end(tx, commit=True)

    def _begin(self, session_ids: Collection[str] = ()) -> _Tx:
        """A pooled connection in a fresh transaction holding the sessions' locks."""
        if self._closed:
            raise StoreError("postgres: the store is closed")
        try:
            conn = self._pool.getconn()
        except psycopg.Error as e:
            raise self._fail(e) from None
        tx = _Tx(conn)
        try:
            with conn.pipeline():  # BEGIN and the locks: one round trip
                conn.execute("BEGIN")
                self._lock(tx, session_ids)
        except BaseException as e:
            with contextlib.suppress(psycopg.Error):
                if not conn.closed:
                    conn.execute("ROLLBACK")
            self._pool.putconn(conn)
            if isinstance(e, psycopg.Error):
                raise self._fail(e) from None
            raise
        return tx

    def _lock(self, tx: _Tx, session_ids: Collection[str]) -> None:
        # Sorted, so two mutations taking several locks never deadlock.
        for sid in sorted(set(session_ids) - tx.locked):
            try:
                tx.conn.execute(f"SELECT pg_advisory_xact_lock({lock_key_sql()})", (key(sid),))
            except psycopg.Error as e:
                raise self._fail(e) from None
            tx.locked.add(sid)

    def _end(self, tx: _Tx, *, commit: bool) -> None:
        self._local.tx = None
        try:
            tx.conn.execute("COMMIT" if commit else "ROLLBACK")
        except psycopg.Error as e:
            if commit:
                raise self._fail(e) from None
            log.warning("%s", self._say(f"postgres: rollback failed: {e}"))
        finally:
            self._pool.putconn(tx.conn)  # a broken connection is discarded by the pool

    def run_call(self, call: Callable[[], tuple[R, list[Event]]]) -> tuple[R, list[Event]]:
        """Run one call; its mutation commits together with its outbox rows."""
        if self._local.deferring:  # re-entrant: the outer call commits
            return call()
        self._local.deferring = True
        try:
            response, events = call()
        except BaseException:
            self._local.deferring = False
            tx = self._local.tx
            if tx is not None:
                self._end(tx, commit=False)
            raise
        self._local.deferring = False
        tx = self._local.tx
        if tx is None:
            if not events:
                return response, events
            try:
                tx = self._begin()  # events without a mutation (none today): a transaction of their own
            except StoreError as e:
                raise self.storage_error(e) from None
        # Past the service's error mapping: failures here are the caller's session/storage.
        try:
            self.outbox.record(tx.conn, events)
        except psycopg.Error as e:
            self._end(tx, commit=False)
            raise self.storage_error(e) from None
        except BaseException:
            self._end(tx, commit=False)
            raise
        try:
            self._end(tx, commit=True)
        except StoreError as e:
            raise self.storage_error(e) from None
        return response, events

    def subscribe(self, sink: EventSink, wants: Callable[[str], bool] | None = None) -> Callable[[], None]:
        return self.outbox.subscribe(sink, wants)

    # -- sessions and entries ------------------------------------------------------

    def get_meta(self, session_id: str) -> Meta | None:
        rows = self._rows("SELECT meta FROM sessions WHERE session_id = %s AND meta IS NOT NULL", (key(session_id),))
        return loads(rows[0][0].encode("utf-8")) if rows else None

    def list_metas(self) -> list[Meta]:
        rows = self._rows("SELECT meta FROM sessions WHERE meta IS NOT NULL")
        return [loads(r[0].encode("utf-8")) for r in rows]

    def ordered_metas(
        self, order: str, after: tuple[int, str] | None, status: str | None, metadata: Meta | None
    ) -> Iterator[Meta]:
        column = "updated_at" if order == "updated_desc" else "created_at"
        descending = order != "created_asc"
        cmp, direction = ("<", "DESC") if descending else (">", "ASC")
        where = ["meta IS NOT NULL"]
        params: list[Any] = []
        if status is not None:
            where.append("status = %s")
            params.append(status)
        if metadata:
            where.append("metadata @> %s")
            params.append(Jsonb(_sanitize(metadata)))
        base = " AND ".join(where)
        # The caller's cursor names the session by its id; rows compare by stored key.
        cursor = (after[0], key(after[1])) if after is not None else None
        while True:
            query = f"SELECT meta, {column}, session_id FROM sessions WHERE {base}"
            args = list(params)
            if cursor is not None:
                query += f" AND ({column}, session_id) {cmp} (%s, %s)"
                args += [cursor[0], cursor[1]]  # the stored key, as the row gave it
            query += f" ORDER BY {column} {direction}, session_id {direction} LIMIT {LIST_BATCH}"
            rows = self._rows(query, args)
            for text, sort_key, sid in rows:
                yield loads(text.encode("utf-8"))
                cursor = (sort_key, sid)
            if len(rows) < LIST_BATCH:
                return

    def get_entry(self, session_id: str, entry_id: str) -> Entry | None:
        rows = self._rows(
            "SELECT body FROM entries WHERE session_id = %s AND entry_id = %s", (key(session_id), key(entry_id))
        )
        return loads(rows[0][0].encode("utf-8")) if rows else None

    def get_leaf(self, session_id: str) -> str | None:
        rows = self._rows("SELECT leaf FROM sessions WHERE session_id = %s", (key(session_id),))
        return unkey(rows[0][0]) if rows and rows[0][0] is not None else None

    def path(self, session_id: str, leaf: str | None) -> EntryPath:
        if leaf is None:
            return EntryPath([], {})
        rows = self._rows(
            "SELECT depth FROM entries WHERE session_id = %s AND entry_id = %s", (key(session_id), key(leaf))
        )
        if not rows:
            return EntryPath([], {})
        from .path import PgPath

        return PgPath(self, session_id, leaf, rows[0][0])

    def entries(self, session_id: str) -> list[Entry]:
        rows = self._rows("SELECT body FROM entries WHERE session_id = %s ORDER BY seq", (key(session_id),))
        return [loads(r[0].encode("utf-8")) for r in rows]

    def commit(self, session_id: str, commit: Commit) -> Commit:
        if self._local.tx is not None:
            # Inside a mutation the decision was read in this transaction under
            # the session's advisory lock: it is current, so the compare-and-set
            # check (and an append's re-parenting / derived meta) is a no-op.
            self._encode_and_write(self._local.tx.conn, session_id, commit)
            return commit
        with self.mutation((session_id,)):
            assert self._local.tx is not None
            # A commit from outside a mutation is checked against what is
            # stored now, under the lock, like every adapter's (store._cas).
            commit = resolve(commit, self.get_meta(session_id), self.get_leaf(session_id),
                             lambda entry_id: self.get_entry(session_id, entry_id))
            self._encode_and_write(self._local.tx.conn, session_id, commit)
        return commit

    def _encode_and_write(self, conn: psycopg.Connection[Any], session_id: str, commit: Commit) -> None:
        # Encode everything first: a value that cannot be stored writes nothing.
        _check_id("session_id", session_id)
        for e in commit.entries:
            _check_id("entry_id", e["id"])
        bodies = [(e, _text(e)) for e in commit.entries]
        meta_text = _text(commit.meta) if commit.meta is not None else None
        self._write(conn, session_id, commit, bodies, meta_text)

    def _write(self, conn: psycopg.Connection[Any], session_id: str, commit: Commit,
               bodies: list[tuple[Entry, str]], meta_text: str | None) -> None:
        sid = key(session_id)
        try:
            rows = _link(conn, sid, [e for e, _ in bodies]) if bodies else {}
            with conn.pipeline(), conn.cursor() as cur:  # the entries and the session row: one round trip
                if bodies:
                    cur.executemany(
                        "INSERT INTO entries (session_id, entry_id, parent_id, depth, jump_id, jump_depth, body)"
                        " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (session_id, entry_id) DO UPDATE SET"
                        " parent_id = EXCLUDED.parent_id, depth = EXCLUDED.depth, jump_id = EXCLUDED.jump_id,"
                        " jump_depth = EXCLUDED.jump_depth, body = EXCLUDED.body",
                        [
                            (sid, key(e["id"]), _key_or_none(e.get("parent_id")), *rows[key(e["id"])], text)
                            for e, text in bodies
                        ],
                    )
                meta = commit.meta
                metadata = meta.get("metadata") if meta is not None else None
                cur.execute(
                    "INSERT INTO sessions AS s (session_id, meta, status, created_at, updated_at, metadata, leaf)"
                    " VALUES (%(sid)s, %(meta)s, %(status)s, %(created)s, %(updated)s, %(metadata)s, %(leaf)s)"
                    " ON CONFLICT (session_id) DO UPDATE SET"
                    " meta = CASE WHEN %(has_meta)s THEN EXCLUDED.meta ELSE s.meta END,"
                    " status = CASE WHEN %(has_meta)s THEN EXCLUDED.status ELSE s.status END,"
                    " created_at = CASE WHEN %(has_meta)s THEN EXCLUDED.created_at ELSE s.created_at END,"
                    " updated_at = CASE WHEN %(has_meta)s THEN EXCLUDED.updated_at ELSE s.updated_at END,"
                    " metadata = CASE WHEN %(has_meta)s THEN EXCLUDED.metadata ELSE s.metadata END,"
                    " leaf = CASE WHEN %(has_leaf)s THEN EXCLUDED.leaf ELSE s.leaf END",
                    {
                        "sid": key(session_id),
                        "meta": meta_text,
                        "status": meta.get("status") if meta is not None else None,
                        "created": meta.get("created_at") if meta is not None else None,
                        "updated": meta.get("updated_at") if meta is not None else None,
                        "metadata": Jsonb(_sanitize(metadata)) if isinstance(metadata, dict) else None,
                        "leaf": _key_or_none(commit.leaf),
                        "has_meta": meta is not None,
                        "has_leaf": commit.leaf is not None,
                    },
                )
        except psycopg.Error as e:
            raise self._fail(e) from None

    def delete_session(self, session_id: str) -> None:
        def run(conn: psycopg.Connection[Any]) -> None:
            for table in ("entries", "attachments", "sessions"):
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE session_id = %s").format(sql.Identifier(table)), (key(session_id),)
                )

        self._in_tx(session_id, run)

    def _in_tx(self, session_id: str, run: Callable[[psycopg.Connection[Any]], None]) -> None:
        if self._local.tx is not None:
            with self._conn() as conn:
                run(conn)
            return
        with self.mutation((session_id,)), self._conn() as conn:
            run(conn)

    # -- attachments ---------------------------------------------------------------

    def put_attachment(self, meta: AttachmentMeta, chunks: Iterable[bytes]) -> None:
        # bytea, not large objects: transactional with the session (deleted
        # with it, no orphans to vacuum), and bounded by max_attachment_bytes.
        data = b"".join(chunks)
        text = _text(meta)

        def run(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "INSERT INTO attachments (session_id, attachment_id, meta, data) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (session_id, attachment_id) DO UPDATE SET meta = EXCLUDED.meta, data = EXCLUDED.data",
                (key(meta["session_id"]), key(meta["attachment_id"]), text, data),
            )

        self._in_tx(meta["session_id"], run)

    def get_attachment_meta(self, session_id: str, attachment_id: str) -> AttachmentMeta | None:
        rows = self._rows(
            "SELECT meta FROM attachments WHERE session_id = %s AND attachment_id = %s",
            (key(session_id), key(attachment_id)),
        )
        return loads(rows[0][0].encode("utf-8")) if rows else None

    def read_attachment(self, session_id: str, attachment_id: str) -> bytes | None:
        rows = self._rows(
            "SELECT data FROM attachments WHERE session_id = %s AND attachment_id = %s",
            (key(session_id), key(attachment_id)),
        )
        return bytes(rows[0][0]) if rows else None

    def list_attachments(self, session_id: str) -> list[AttachmentMeta]:
        rows = self._rows("SELECT meta FROM attachments WHERE session_id = %s", (key(session_id),))
        return [loads(r[0].encode("utf-8")) for r in rows]

    def delete_attachment(self, session_id: str, attachment_id: str) -> bool:
        found: list[bool] = []

        def run(conn: psycopg.Connection[Any]) -> None:
            cur = conn.execute(
                "DELETE FROM attachments WHERE session_id = %s AND attachment_id = %s",
                (key(session_id), key(attachment_id)),
            )
            found.append(cur.rowcount > 0)

        self._in_tx(session_id, run)
        return found[0]

    # -- lifetime ----------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.outbox.close()
        self._pool.close(timeout=5.0)

    def storage_error(self, e: BaseException) -> SessionError:
        """A lazy read's failure, as callers see it (it happens outside the service's mapping)."""
        return SessionError(STORAGE, str(self._fail(e)) if isinstance(e, psycopg.Error) else str(e))


def _check_id(field: str, value: str) -> None:
    size = len(key(value).encode("utf-8"))
    if size > ID_BYTES:
        raise UnstorableValue(f"{field} is too long: it takes {size} bytes and the postgres adapter "
                              f"allows {ID_BYTES} (PostgreSQL's index row limit)")


def _key_or_none(value: Any) -> str | None:
    return key(value) if isinstance(value, str) else None


def _link(conn: psycopg.Connection[Any], session_id: str, entries: list[Entry]) -> dict[str, tuple[Any, ...]]:
    """``(depth, jump_id, jump_depth)`` per entry: the skew-binary jump pointers
    (Myers' random-access lists) that find any ancestor in O(log depth) probes.
    O(1) rows read per entry: its parent and the parent's jump target."""
    info: dict[str, tuple[int, str, int]] = {}

    def lookup(ids: list[str]) -> None:
        # Each entry with its jump target's pointer: one query serves both probes.
        missing = [i for i in ids if i not in info]
        if missing:
            for eid, depth, jump_id, jump_depth, j_jump_id, j_jump_depth in conn.execute(
                "SELECT p.entry_id, p.depth, p.jump_id, p.jump_depth, j.jump_id, j.jump_depth FROM entries p"
                " LEFT JOIN entries j ON j.session_id = p.session_id AND j.entry_id = p.jump_id"
                " WHERE p.session_id = %s AND p.entry_id = ANY(%s)",
                (session_id, missing),
            ).fetchall():
                info.setdefault(eid, (depth, jump_id, jump_depth))
                if j_jump_id is not None:
                    info.setdefault(jump_id, (jump_depth, j_jump_id, j_jump_depth))

    batch = {key(e["id"]) for e in entries}
    lookup([key(p) for e in entries if isinstance(p := e.get("parent_id"), str) and key(p) not in batch])
    out: dict[str, tuple[Any, ...]] = {}
    for entry in entries:
        eid, parent = key(entry["id"]), _key_or_none(entry.get("parent_id"))
        if not isinstance(parent, str) or parent not in info:
            row = (0, eid, 0)  # a root (or an orphan: its path starts here, as walk_to_root has it)
        else:
            p_depth, p_jump, p_jump_depth = info[parent]
            lookup([p_jump])
            j = info.get(p_jump)
            if j is not None and p_depth - p_jump_depth == p_jump_depth - j[2] and p_jump != parent:
                row = (p_depth + 1, j[1], j[2])
            else:
                row = (p_depth + 1, parent, p_depth)
        info[eid] = row
        out[eid] = row
    return out
