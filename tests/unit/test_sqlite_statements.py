"""How many statements the sqlite adapter runs for a messages-tail page and an append
(counted, never timed): the regression guard of issue 23's per-call work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
        append = _statements(store, lambda: sm.append(sid, message=_user("one more")))
        assert [s.split()[0] for s in append] == ["BEGIN", "SELECT", "INSERT", "UPDATE", "COMMIT"], \
            append
        # The session's row was read first: the entry names it by the key read (no subquery), the
        # row is updated (no insert tried first).
        assert append[2].startswith("INSERT INTO entries") and "SELECT" not in append[2], append[2]
        assert append[3].startswith("UPDATE sessions SET rev = rev + 1"), append[3]
