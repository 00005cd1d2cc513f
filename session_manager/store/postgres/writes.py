"""The postgres adapter's write path: a commit's entries and session row
(one round trip), session deletion, attachments. Each runs in the calling
mutation's transaction, or in one of its own under the session's lock."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import psycopg
from psycopg import sql

from ...errors import Conflict
from .._core.cas import check_new_ids, resolve
from ..base import AttachmentMeta, Commit, Entry, SessionStore
from ..sql.keys import check_id, key
from ..sql.values import json_text
from .arrays import TextArray
from .core import PgDatastore
from .plan import apply_params
from .schema import APPLY

__all__ = ["CONFLICT", "PgWrites"]

CONFLICT = "SM409"  # sm_apply's "the state changed" (nothing written)


class PgWrites:
    """Commits, deletions and attachments. ``front`` is the store as its callers
    see it: a commit from outside a mutation opens one and reads the session
    through it (so the optimistic part serves those, as it serves the service)."""

    def __init__(self, db: PgDatastore, front: SessionStore) -> None:
        self.db = db
        self.front = front

    def commit(self, session_id: str, commit: Commit) -> Commit:
        state, front = self.db.local.state, self.front
        if state.tx is not None:
            # Inside a mutation the decision was read in this transaction under
            # the session's advisory lock: it is current, so the compare-and-set
            # check (and an append's re-parenting / derived meta) is a no-op. But for one
            # that must make the session (create: expect_meta None), which reads nothing
            # first: the row BEGIN read under the lock says whether another took the id.
            if commit.expect_meta is None and self._exists(state.tx.conn, state.tx.seen.get(session_id), session_id):
                raise Conflict("the session already exists")
            if commit.append and len(commit.entries) > 1:
                check_new_ids(commit.entries)  # (their absence: sm_apply's, see _write)
            self.encode_and_write(state.tx.conn, session_id, commit)
            return commit
        with front.mutation((session_id,)):
            assert state.tx is not None
            # A commit from outside a mutation is checked against what is
            # stored now, under the lock, like every adapter's (store._cas).
            commit = resolve(commit, front.get_meta(session_id), front.get_leaf(session_id),
                             lambda entry_id: front.get_entry(session_id, entry_id))
            self.encode_and_write(state.tx.conn, session_id, commit)
        return commit

    def _exists(self, conn: psycopg.Connection[Any], seen: tuple[str | None, str | None] | None,
                session_id: str) -> bool:
        """Whether the session is stored: as BEGIN read it (``seen``), else asked (this
        transaction wrote it since, or locked it later)."""
        if seen is not None:
            return seen[0] is not None
        try:
            row = conn.execute("SELECT 1 FROM sessions WHERE session_id = %s", (key(session_id),)).fetchone()
            return row is not None
        except psycopg.Error as e:
            raise self.db.fail(e) from None

    def encode_and_write(self, conn: psycopg.Connection[Any], session_id: str, commit: Commit) -> None:
        """Write ``commit`` on ``conn`` (in the mutation's transaction), encoded first:
        a value that cannot be stored writes nothing."""
        check_id("session_id", session_id)
        for e in commit.entries:
            check_id("entry_id", e["id"])
        bodies = [(e, json_text(e)) for e in commit.entries]
        meta_text = json_text(commit.meta) if commit.meta is not None else None
        self._write(conn, session_id, commit, bodies, meta_text)

    def _write(self, conn: psycopg.Connection[Any], session_id: str, commit: Commit,
               bodies: list[tuple[Entry, str]], meta_text: str | None) -> None:
        # sm_apply with nothing to check (the transaction holds the session's lock)
        # and no events (run_call records them): entries linked server-side, the
        # session row upserted, in one round trip.
        tx = self.db.local.state.tx
        if tx is not None:
            tx.seen.pop(session_id, None)  # what the transaction read of it is stale now
        params = apply_params(session_id, commit, [text for _, text in bodies], meta_text,
                              instance=self.db.instance, schema=self.db.settings.schema)
        if commit.append:
            # An append's entries are new: sm_apply checks each absent (a read of NULL text) in
            # the same statement, as the optimistic path's. Unchecked, it wrote over a stored entry
            # whose id was drawn again (another instance's generator) or named by a stale decision.
            params["read_ids"] = TextArray([key(e["id"]) for e in commit.entries])
            params["read_bodies"] = TextArray([None] * len(commit.entries))
        if not commit.append or tx is None or not tx.shared:
            # Nothing to survive: sm_apply checks nothing here (not an append), or the mutation
            # owns its transaction, which its conflict rolls back (the decision taken again anew).
            try:
                conn.execute(APPLY, params)
            except psycopg.Error as e:
                if e.sqlstate == CONFLICT:  # nothing written; the mutation's transaction is rolled back
                    raise Conflict(f"an entry of session {session_id} is already stored") from None
                raise self.db.fail(e) from None
            return
        # Under a savepoint (in the same round trip): its conflict leaves the transaction usable.
        # The mutation that conflicts does not own it (Tx.shared: a call upgraded mid-mutation,
        # or a call's second mutation), and the service decides again in it; an aborted
        # transaction answered that decision ``session/storage`` (InFailedSqlTransaction), where
        # every other store answers what the decision says.
        try:
            if self.db.pipelines:
                with conn.pipeline():
                    conn.execute("SAVEPOINT sm_write")
                    conn.execute(APPLY, params)
                    conn.execute("RELEASE SAVEPOINT sm_write")
            else:
                conn.execute("SAVEPOINT sm_write")
                conn.execute(APPLY, params)
                conn.execute("RELEASE SAVEPOINT sm_write")
        except psycopg.Error as e:
            if e.sqlstate == CONFLICT:  # nothing of it written; the transaction as it was before it
                try:
                    conn.execute("ROLLBACK TO SAVEPOINT sm_write")
                    conn.execute("RELEASE SAVEPOINT sm_write")
                except psycopg.Error as again:
                    raise self.db.fail(again) from None
                raise Conflict(f"an entry of session {session_id} is already stored") from None
            raise self.db.fail(e) from None

    def delete_session(self, session_id: str) -> bool:
        removed: list[int] = []
        # The session's earlier events stay in the outbox until pruned (outbox_retention_ms):
        # another instance may not have read them yet (an event over NOTIFY's 8000 bytes is
        # read from its row), and deleting them lost its events (test_postgres_instances).

        def run(conn: psycopg.Connection[Any]) -> None:
            tx = self.db.local.state.tx
            if tx is not None:
                tx.seen.pop(session_id, None)
            for table in ("entries", "attachments", "sessions"):
                cur = conn.execute(
                    sql.SQL("DELETE FROM {} WHERE session_id = %s").format(sql.Identifier(table)), (key(session_id),)
                )
                removed.append(cur.rowcount)

        self._in_tx(session_id, run)
        return any(n > 0 for n in removed)

    def _in_tx(self, session_id: str, run: Callable[[psycopg.Connection[Any]], None]) -> None:
        if self.db.local.state.tx is not None:
            with self.db.conn() as conn:
                run(conn)
            return
        with self.front.mutation((session_id,)), self.db.conn() as conn:
            run(conn)

    def put_attachment(self, meta: AttachmentMeta, chunks: Iterable[bytes]) -> None:
        # bytea, not large objects: transactional with the session (deleted
        # with it, no orphans to vacuum), and bounded by max_attachment_bytes.
        data = b"".join(chunks)
        text = json_text(meta)

        def run(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "INSERT INTO attachments (session_id, attachment_id, meta, data) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (session_id, attachment_id) DO UPDATE SET meta = EXCLUDED.meta, data = EXCLUDED.data",
                (key(meta["session_id"]), key(meta["attachment_id"]), text, data),
            )

        self._in_tx(meta["session_id"], run)

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
