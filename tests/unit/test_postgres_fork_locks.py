"""A fork over postgres, whose new session shares a lock stripe with its source,
while another thread of the same instance mutates the source.

Within one call the postgres adapter keeps the call's transaction (and the
advisory locks it took) open until the call's events are in the outbox, so
a fork still holds its source's advisory lock when it takes the service's
lock of the new session. A thread holding that stripe and waiting on the
source's advisory lock must not be left waiting on it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import session_manager
from session_manager._service.core import stripe  # the service's own rule: the ids chosen do share a stripe
from session_manager._wire import events as ev
from session_manager.ids import UuidIds
from session_manager.store.postgres import PostgresStore
from tests import pg_support
from tests.pg_support import text

pytestmark = pytest.mark.postgres

TIMEOUT_MS = 3000


class SameStripeIds(UuidIds):
    """New sessions land on the stripe of ``source`` (a 1-in-1024 chance with random ids)."""

    def __init__(self, source: str) -> None:
        self.source = source

    def session_id(self) -> str:
        while stripe(sid := super().session_id()) != stripe(self.source):
            pass
        return sid


class PausingStore(PostgresStore):
    """Pauses the forking thread right after its source's block (``settle`` runs
    once the service let go of the source's lock) until the other thread waits."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.forking: threading.Thread | None = None
        self.between = threading.Event()
        self.resume = threading.Event()
        self.forker_backend: int | None = None  # the backend of the fork's still-open transaction

    def settle(self) -> None:
        # Only on the transactional path: the optimistic attempt a call makes first
        # (store/postgres/optimistic.py) holds no lock, and a fork falls back from it.
        tx = self.db.local.state.tx
        if threading.current_thread() is self.forking and not self.between.is_set() and tx is not None:
            self.forker_backend = tx.conn.info.backend_pid
            self.between.set()
            self.resume.wait(10)


def waits_on(backend: int) -> bool:
    """Whether some backend waits for an advisory lock that ``backend`` holds."""
    import psycopg

    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                           " AND %s = ANY(pg_blocking_pids(pid))", (backend,)).fetchone()
    return bool(row and row[0])


def test_a_fork_onto_its_source_s_stripe_does_not_deadlock_a_writer_of_the_source(schema: str) -> None:
    # Prevents: fork holding its source's advisory lock (the call's transaction is
    # still open) while it waits for the new session's stripe, held by a writer of
    # the source that waits for that advisory lock: both stall until the statement
    # timeout, and the writer fails with session/storage.
    store = PausingStore(pg_support.settings(schema, statement_timeout_ms=TIMEOUT_MS))
    sm = session_manager.open(store=store, ids=SameStripeIds("src"))
    try:
        sm.call("session::ensure", {"session_id": "src"})
        first = sm.call("session::append", {"session_id": "src", "entry_id": "m1", "message": text("one")})
        seen: list[tuple[str, dict[str, Any]]] = []
        for fid in (ev.ON_CREATED, ev.ON_MESSAGE_ADDED):
            sm.observe({"function_id": fid}, lambda e, fid=fid: seen.append((fid, e)))
        results: dict[str, Any] = {}

        def fork() -> None:
            try:
                results["fork"] = sm.call("session::fork", {"session_id": "src", "entry_id": first["entry_id"]})
            except BaseException as e:
                results["fork"] = e

        def append() -> None:
            try:
                results["append"] = sm.call("session::append", {"session_id": "src", "entry_id": "m2",
                                                                 "message": text("two")})
            except BaseException as e:
                results["append"] = e

        forker = threading.Thread(target=fork)
        store.forking = forker
        forker.start()
        assert store.between.wait(10)
        backend = store.forker_backend
        assert backend is not None, "the fork's transaction is no longer open at settle()"
        writer = threading.Thread(target=append)
        writer.start()
        # Not a sleep: on a loaded box the writer may not reach the lock in any fixed time, and the
        # fork resumed before it takes the stripe passes without the deadlock being possible.
        deadline = time.monotonic() + 10
        while not waits_on(backend):  # the writer holds the source's stripe and waits on its advisory lock
            assert writer.is_alive() and time.monotonic() < deadline, "the writer never waited on the fork's lock"
            time.sleep(0.01)
        store.resume.set()
        forker.join(30)
        writer.join(30)

        assert not isinstance(results["append"], BaseException), results["append"]
        assert not isinstance(results["fork"], BaseException), results["fork"]
        new_id = results["fork"]["session_id"]
        assert stripe(new_id) == stripe("src")
        # Read back: the fork holds the prefix up to m1, the source both messages.
        fork_tail = sm.call("session::messages-tail", {"session_id": new_id, "limit": 10})["messages"]
        assert [m["message"]["content"][0]["text"] for m in fork_tail] == ["one"]
        src_tail = sm.call("session::messages-tail", {"session_id": "src", "limit": 10})["messages"]
        assert [m["entry_id"] for m in src_tail] == ["m1", "m2"]
        assert sm.call("session::get", {"session_id": "src"})["meta"]["message_count"] == 2
        assert sm.call("session::get", {"session_id": new_id})["meta"]["message_count"] == 1
        # Events: one creation (the fork), one message (the append), nothing else.
        assert [(f, e.get("session_id")) for f, e in seen if f == ev.ON_CREATED] == [(ev.ON_CREATED, new_id)]
        assert [e["entry_id"] for f, e in seen if f == ev.ON_MESSAGE_ADDED] == ["m2"]
    finally:
        store.resume.set()
        sm.close()
