"""Many instances over one database: real separate processes on one schema.

Each worker is ``tests/pg_worker.py`` in its own Python process, with its
own pool, locks and event listener; they share nothing but the database.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager._wire.events import ON_MESSAGE_ADDED
from tests import pg_support
from tests.pg_support import text

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]


class Worker:
    def __init__(self, schema_name: str, job: str, **args: Any) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.pg_worker", schema_name, job, json.dumps(args)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"worker did not start: {line!r} {err}")

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 240) -> tuple[list[str], list[list[Any]]]:
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err
        acks = [line[4:] for line in out.splitlines() if line.startswith("ack ")]
        events = [json.loads(line[7:]) for line in out.splitlines() if line.startswith("events ")]
        return [json.loads(a) for a in acks], events[0] if events else []


def open_sm(schema_name: str, **overrides: Any) -> session_manager.SessionManager:
    return session_manager.open(store=pg_support.open_store(schema_name, **overrides))


def wait_for(predicate: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


def check_linear(sm: session_manager.SessionManager, sid: str) -> list[str]:
    """The session is one chain holding every entry; returns its ids, oldest first."""
    store = sm.service.store
    entries = store.entries(sid)
    parents = Counter(e["parent_id"] for e in entries)
    assert all(n == 1 for n in parents.values()), "two entries share a parent: the chain forked"
    path = [e["id"] for e in store.path(sid, store.get_leaf(sid))]
    assert sorted(path) == sorted(e["id"] for e in entries), "an entry is off the active path"
    meta = store.get_meta(sid)
    assert meta is not None and meta["message_count"] == len(entries)
    return path


def test_four_processes_appending_to_one_session_form_one_chain(schema: str) -> None:
    # Prevents: instances interleaving read-check-write (forked chains, lost or double counts,
    # an entry_id stored twice when two instances retry the same append).
    sm = open_sm(schema)
    try:
        added: list[str] = []
        sm.observe({"function_id": ON_MESSAGE_ADDED}, lambda e: added.append(e["entry_id"]))
        sm.call("session::ensure", {"session_id": "chain"})
        workers = [Worker(schema, "append", session_id="chain", n=250, tag=f"p{k}", shared=25) for k in range(4)]
        for w in workers:
            w.go()
        results = [w.finish() for w in workers]
        for k, (acks, _) in enumerate(results):
            assert acks == [f"p{k}-{i}" for i in range(250)]
        expected = {f"p{k}-{i}" for k in range(4) for i in range(250)} | {f"shared-{i}" for i in range(25)}
        path = check_linear(sm, "chain")
        assert len(path) == 1025 and set(path) == expected
        assert sm.call("session::get", {"session_id": "chain"})["meta"]["message_count"] == 1025
        # This (fifth) instance's observer saw every append exactly once, replays none.
        assert wait_for(lambda: len(added) >= 1025)
        time.sleep(0.3)
        assert Counter(added) == Counter(expected)
    finally:
        sm.close()


def test_set_meta_on_one_instance_while_another_appends(schema: str) -> None:
    # Prevents: a set-meta from one instance overwriting the message_count another just raised.
    sm = open_sm(schema)
    try:
        sm.call("session::ensure", {"session_id": "both"})
        appender = Worker(schema, "append", session_id="both", n=200, tag="a")
        renamer = Worker(schema, "set-meta", session_id="both", n=100)
        appender.go()
        renamer.go()
        appender.finish()
        renamer.finish()
        meta = sm.call("session::get", {"session_id": "both"})["meta"]
        assert meta["message_count"] == 200
        assert meta["title"] == "t99" and meta["metadata"] == {"n": 99}
        assert len(check_linear(sm, "both")) == 200
    finally:
        sm.close()


def test_expected_revision_is_a_compare_and_set_across_instances(schema: str) -> None:
    # Prevents: two instances both "winning" an update from the same revision (a lost update).
    sm = open_sm(schema)
    try:
        updated: list[int] = []
        sm.observe({"function_id": "session::on-message-updated"}, lambda e: updated.append(e["revision"]))
        sm.call("session::ensure", {"session_id": "cas"})
        sm.call("session::append", {"session_id": "cas", "entry_id": "m", "message": text("v0")})
        workers = [Worker(schema, "cas", session_id="cas", entry_id="m", n=60, tag=f"w{k}") for k in range(4)]
        for w in workers:
            w.go()
        wins = [w.finish()[0][0] for w in workers]
        # Each revision k was tried by all four; exactly one moved it (the others were refused).
        assert sum(wins) == 60
        entry = sm.call("session::get-message", {"session_id": "cas", "entry_id": "m"})["entry"]
        assert entry["revision"] == 60 and entry["message"]["content"][0]["text"].endswith("@59")
        # One update event per win, each revision from 1 to 60 exactly once.
        assert wait_for(lambda: len(updated) >= 60)
        time.sleep(0.3)
        assert sorted(updated) == list(range(1, 61))
    finally:
        sm.close()


def test_observers_on_one_instance_see_the_others_mutations_exactly_once(schema: str) -> None:
    # Prevents: events staying inside the instance that made them, arriving twice, or
    # a payload over NOTIFY's 8000 bytes arriving cut.
    a = Worker(schema, "idle", expect_events=14)
    b = Worker(schema, "mix", tag="b", expect_events=14)
    c = Worker(schema, "mix", tag="c", expect_events=14)
    for w in (a, b, c):
        w.go()
    (_, seen_a), (acks_b, seen_b), (acks_c, seen_c) = a.finish(), b.finish(), c.finish()
    sid_b, sid_c = acks_b[0], acks_c[0]

    def of(events: list[list[Any]], sid: str) -> list[list[Any]]:
        return [e for e in events if e[1]["session_id"] == sid]

    assert len(seen_a) == len(seen_b) == len(seen_c) == 14
    for sid in (sid_b, sid_c):
        # B's own events (delivered locally) are exactly what A and C received, in order.
        own = of(seen_b if sid == sid_b else seen_c, sid)
        assert [e[0] for e in own] == [
            "session::on-created", "session::on-message-added", "session::on-message-updated",
            "session::on-status-changed", "session::on-meta-updated", "session::on-message-added",
            "session::on-deleted",
        ]
        assert of(seen_a, sid) == own
        assert of(seen_c if sid == sid_b else seen_b, sid) == own
    big = [e for e in seen_a if e[0] == ON_MESSAGE_ADDED and len(json.dumps(e[1])) > 20000]
    assert len(big) == 2 and all(e[1]["message"]["content"][0]["text"] == "x" * 20000 for e in big)


def test_an_instance_killed_mid_workload_loses_nothing_acknowledged(schema: str) -> None:
    # Prevents: an acknowledged append vanishing, or a half-applied one (count without entry,
    # a held lock) surviving its process's SIGKILL.
    sm = open_sm(schema)
    try:
        sm.call("session::ensure", {"session_id": "k"})
        w = Worker(schema, "append", session_id="k", n=100000, tag="k")
        w.go()
        assert w.proc.stdout is not None
        acked: list[str] = []
        while len(acked) < 60:
            line = w.proc.stdout.readline()
            assert line, "worker ended early"
            if line.startswith("ack "):
                acked.append(json.loads(line[4:]))
        os.kill(w.proc.pid, signal.SIGKILL)
        w.proc.wait(timeout=30)
        acked += [json.loads(x[4:]) for x in w.proc.stdout.read().splitlines() if x.startswith("ack ")]
        # The dead client's backend may still be committing the append in flight: read once it is
        # done (check_linear reads the entries and the meta in two statements; a commit between
        # them counted one entry more than it saw, about 1 run in 10 under load).
        assert wait_for(lambda: busy_backends(schema) == 0)
        path = check_linear(sm, "k")
        assert set(acked) <= set(path)
        assert len(path) - len(acked) <= 1  # at most the append in flight committed unacknowledged
        # The dead instance's lock went with its transaction: this one appends at once.
        out = sm.call("session::append", {"session_id": "k", "entry_id": "after", "message": text("after")})
        assert out["parent_id"] == path[-1]
        assert check_linear(sm, "k")[-1] == "after"
    finally:
        sm.close()


def busy_backends(schema_name: str) -> int:
    """The schema's stores' backends running a statement or inside a transaction (an idle
    pooled connection or a waiting listener is neither)."""
    import psycopg

    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND state <> 'idle'"
            " AND pid <> pg_backend_pid()",
            (f"session-manager:{schema_name}"[:63],),
        ).fetchone()
        return int(row[0]) if row else 0


def terminate_backends(schema_name: str) -> int:
    import psycopg

    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
            (f"session-manager:{schema_name}"[:63],),
        ).fetchone()
        return int(row[0]) if row else 0


def test_terminated_backends_fail_calls_cleanly_then_everything_recovers(schema: str) -> None:
    # Prevents: a dropped connection hanging a call, answering anything but session/storage,
    # half-applying a mutation, or leaving the instance (or its event listener) dead.
    sm = open_sm(schema, pool_size=3, pool_timeout_ms=2000)
    other = open_sm(schema)
    try:
        seen: list[str] = []
        other.observe({"function_id": ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
        sm.call("session::ensure", {"session_id": "t"})
        acked: list[str] = []
        failures: list[str] = []
        unexpected: list[BaseException] = []

        def work() -> None:
            for i in range(400):
                try:
                    sm.call("session::append", {"session_id": "t", "entry_id": f"t-{i}", "message": text(str(i))})
                    acked.append(f"t-{i}")
                except session_manager.SessionError as e:
                    failures.append(e.code)
                except BaseException as e:  # anything else is the bug this test is for
                    unexpected.append(e)

        thread = threading.Thread(target=work)
        thread.start()
        assert wait_for(lambda: len(acked) >= 40)
        assert terminate_backends(schema) >= 1
        assert wait_for(lambda: len(acked) >= 120)
        assert terminate_backends(schema) >= 1
        thread.join(timeout=240)
        assert not thread.is_alive() and unexpected == []
        assert set(failures) <= {"session/storage"}
        assert len(acked) + len(failures) == 400 and len(acked) > 200
        path = check_linear(sm, "t")
        assert set(acked) <= set(path)
        # The other instance's listener came back and replayed what it missed: every
        # acknowledged append reached its observer, none twice.
        assert wait_for(lambda: other.service.store.outbox.listening)
        assert wait_for(lambda: set(acked) <= set(seen))
        assert max(Counter(seen).values()) == 1
        sm.call("session::append", {"session_id": "t", "entry_id": "last", "message": text("last")})
        assert wait_for(lambda: "last" in seen)
    finally:
        sm.close()
        other.close()


def test_a_listener_away_past_the_retention_resyncs(schema: str) -> None:
    # Prevents: an instance that lost events to pruning silently staying stale.
    sm = open_sm(schema)
    other = open_sm(schema, outbox_retention_s=0.05)
    try:
        created: list[str] = []
        other.observe({"function_id": "session::on-created"}, lambda e: created.append(e["session_id"]))
        sm.call("session::ensure", {"session_id": "r"})
        assert wait_for(lambda: created == ["r"])
        before = other.service.store.outbox
        assert terminate_backends(schema) >= 1
        assert wait_for(lambda: not before.listening or created != ["r"], timeout=10)
        time.sleep(0.2)
        assert wait_for(lambda: before.listening)
        # The resync re-announced the session (a duplicate, as the spec allows after a resync).
        assert wait_for(lambda: created.count("r") >= 2)
    finally:
        sm.close()
        other.close()


def test_outbox_rows_are_pruned_after_the_retention(schema: str) -> None:
    # Prevents: the outbox growing without bound.
    import psycopg

    sm = open_sm(schema, outbox_retention_s=0.2)
    try:
        sm.call("session::ensure", {"session_id": "p"})
        sm.call("session::append", {"session_id": "p", "message": text("x")})

        def rows() -> int:
            with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
                row = conn.execute(f'SELECT count(*) FROM "{schema}".outbox').fetchone()
                return int(row[0]) if row else -1

        assert rows() == 1  # the ensure's on-created (an unobserved append records none: schema version 9)
        assert wait_for(lambda: rows() == 0, timeout=20)
        assert sm.call("session::get", {"session_id": "p"})["meta"]["message_count"] == 1
    finally:
        sm.close()


class Proxy:
    """A TCP relay to the test server that can go away and come back on the
    same port: an outage the shared server itself never has to suffer."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._lock = threading.Lock()
        self._sockets: list[Any] = []
        self._listener: Any = None

    def start(self) -> None:
        import socket

        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: Any) -> None:
        import socket

        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: Any, dst: Any) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.close()

    def stop(self) -> None:
        """The server 'goes down': no new connections, every open one cut."""
        import socket

        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked on it
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
                s.close()


def test_a_server_outage_fails_calls_within_the_timeout_then_recovers_by_itself(schema: str) -> None:
    # Prevents: calls hanging while the database is unreachable, a half-applied mutation, or an
    # instance (pool or event listener) that stays broken after the server returns.
    import psycopg

    parts = psycopg.conninfo.conninfo_to_dict(pg_support.DSN)
    proxy = Proxy(str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432))
    proxy.start()
    dsn = psycopg.conninfo.make_conninfo(pg_support.DSN, host="127.0.0.1", port=str(proxy.port))
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    sm = session_manager.open(store=PostgresStore(PostgresSettings(
        dsn=dsn, schema=schema, pool_timeout_ms=1500, connect_timeout_ms=1000, statement_timeout_ms=5000)))
    direct = open_sm(schema)
    try:
        seen: list[str] = []
        sm.observe({"function_id": ON_MESSAGE_ADDED}, lambda e: seen.append(e["entry_id"]))
        sm.call("session::ensure", {"session_id": "o"})
        sm.call("session::append", {"session_id": "o", "entry_id": "before", "message": text("before")})
        proxy.stop()
        outcomes: list[Any] = []

        def attempt() -> None:
            for call, payload in (
                ("session::append", {"session_id": "o", "entry_id": "during", "message": text("during")}),
                ("session::get", {"session_id": "o"}),
            ):
                try:
                    outcomes.append(sm.call(call, payload))
                except session_manager.SessionError as e:
                    outcomes.append(e.code)
                except BaseException as e:
                    outcomes.append(e)

        worker = threading.Thread(target=attempt)
        worker.start()
        worker.join(timeout=60)  # bounded by connect/pool timeouts, never a hang
        assert not worker.is_alive()
        assert outcomes == ["session/storage", "session/storage"]
        proxy.start()  # the server is back, on the same address

        def append_after() -> bool:
            try:
                sm.call("session::append", {"session_id": "o", "entry_id": "after", "message": text("after")})
                return True
            except session_manager.SessionError as e:
                assert e.code == "session/storage"
                return False

        assert wait_for(append_after, timeout=60)
        assert check_linear(sm, "o") == ["before", "after"]  # nothing of the failed append was applied
        # The listener reconnected too: another instance's append reaches this one's observer.
        assert wait_for(lambda: sm.service.store.outbox.listening, timeout=60)
        direct.call("session::append", {"session_id": "o", "entry_id": "theirs", "message": text("x")})
        assert wait_for(lambda: "theirs" in seen)
        assert seen.count("theirs") == 1 and "during" not in seen
    finally:
        sm.close()
        direct.close()
        proxy.stop()
