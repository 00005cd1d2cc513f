"""How many statements the sqlite adapter runs for a messages-tail page and an append
(counted, never timed): the regression guard of issue 23's per-call work."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager.store.sqlite import SqliteStore


def _user(text: str) -> Any:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _statements(store: SqliteStore, work: Any) -> list[str]:
    """The top-level statements ``work`` runs on this thread's connection. What SQLite runs
    inside one is traced too: FTS5's statements with a leading ``--``, a trigger's program as
    its statement's text again; both are left out."""
    seen: list[str] = []
    conn = store.db.conn()

    def note(sql: str) -> None:
        if not sql.startswith("--") and (not seen or seen[-1] != sql):
            seen.append(sql)

    conn.set_trace_callback(note)
    try:
        work()
    finally:
        conn.set_trace_callback(None)
    return seen


def test_a_tail_page_is_two_reads_and_an_append_one_transaction_of_six(tmp_path: Path) -> None:
    # Prevents: a tail page growing back a separate depth probe of the leaf (three reads), an
    # explicit BEGIN/COMMIT around a read, or an append taking more statements than its
    # transaction needs (read with links, entry, session row, outbox position), the search
    # index's row among them again (it is caught up before a query, issue 26).
    with session_manager.open(f"sqlite:///{tmp_path / 's.db'}") as sm:
        store = sm.service.store
        assert isinstance(store, SqliteStore)
        sid = sm.create().session_id
        for i in range(80):
            sm.append(sid, message=_user(f"m{i}"))
        tail = _statements(store, lambda: sm.call("session::messages-tail", {"session_id": sid, "limit": 50}))
        assert len(tail) == 2, tail
        assert tail[0].startswith("SELECT s.meta, s.leaf, e.depth") and "depth BETWEEN" in tail[1]
        # The connection's last commit was an append to this session, and nobody else committed
        # since: what it left stands for the read (data_version alone is read).
        append = _statements(store, lambda: sm.append(sid, message=_user("one more")))
        assert [s.split()[0] for s in append] == ["BEGIN", "PRAGMA", "INSERT", "UPDATE", "COMMIT"], \
            append
        # Another connection's commit since: the session's row is read, then the entry names it by
        # the key read (no subquery), the row is updated (no insert tried first).
        with session_manager.open(f"sqlite:///{tmp_path / 's.db'}") as other:
            other.append(sid, message=_user("theirs"))
        append = _statements(store, lambda: sm.append(sid, message=_user("and one more")))
        assert [s.split()[0] for s in append] == ["BEGIN", "PRAGMA", "SELECT", "INSERT", "UPDATE", "COMMIT"], \
            append
        assert append[3].startswith("INSERT INTO entries") and "SELECT" not in append[3], append[3]
        assert append[4].startswith("UPDATE sessions SET rev = rev + 1"), append[4]


def _chain(sm: Any, sid: str) -> list[str]:
    """The session's active path (entry ids, root first), checked as one chain of every entry."""
    store = sm.service.store
    path = [e["id"] for e in store.path(sid, store.get_leaf(sid))]
    got = sm.get(sid)
    assert got is not None and len(path) == len(store.entries(sid)) == got.meta.message_count
    return path


def test_an_append_after_anything_but_its_own_append_reads_the_session(tmp_path: Path) -> None:
    # Prevents: an append taking its connection's memo of its last append (no read) after a write
    # it does not cover: another connection's append to the session, this connection's write of
    # another kind (an update, a fork, a delete and recreate), an append to another session, a
    # rolled-back append. Each append must name the true leaf as its parent, and the jump
    # pointers must stay right (the path is read back whole).
    path = tmp_path / "s.db"
    with session_manager.open(f"sqlite:///{path}") as sm, session_manager.open(f"sqlite:///{path}") as other:
        store = sm.service.store
        assert isinstance(store, SqliteStore)
        sid = sm.create().session_id
        ids: list[str] = []

        def ours(text: str) -> str:
            """How the append found the session: "read" (its row read), "memo" (not read)."""
            statements = _statements(store, lambda: ids.append(sm.append(sid, message=_user(text)).entry_id))
            return "read" if any(s.startswith("SELECT s.meta, s.leaf, p.depth") for s in statements) else "memo"

        for i in range(40):
            ours(f"m{i}")
        assert ours("memo") == "memo"
        ids.append(other.append(sid, message=_user("theirs")).entry_id)  # another connection
        assert ours("after theirs") == "read"
        assert ours("memo again") == "memo"
        sm.update_message(sid, entry_id=ids[-1], content="revised")  # this connection, not an append
        assert ours("after an update") == "read"
        # (Each sleep puts the next write's updated_at past the last: the list order is by time.)
        time.sleep(0.01)
        other_sid = sm.create().session_id
        sm.append(other_sid, message=_user("elsewhere"))  # this connection, another session: first now
        time.sleep(0.01)
        assert ours("after elsewhere") == "read"
        assert ours("first in the list again") == "read"  # (the last one wrote its list key)
        assert ours("memo once more") == "memo"
        with pytest.raises(session_manager.SessionError):  # a rolled-back append: no such parent
            sm.append(sid, message=_user("refused"), parent_id="e_nope")
        assert ours("after a refusal") == "read"
        for i in range(70):  # past several jump pointers' spans, each probe of an older entry once
            ours(f"n{i}")
        assert _chain(sm, sid) == ids
        assert _chain(other, sid) == ids
        sm.delete(sid)
        sm.ensure(sid)
        ids.clear()
        assert ours("recreated") == "read"
        assert ours("recreated memo") == "memo"
        assert _chain(sm, sid) == ids
