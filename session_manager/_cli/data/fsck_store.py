"""``data fsck`` of a database store (``sqlite:///``): the database's own
check (``PRAGMA integrity_check``) plus the storage contract's invariants,
read through the store interface: every session has a meta, its active
leaf and every entry's parent are stored entries, and ``message_count``
is the number of its message entries."""

from __future__ import annotations

from ...store.base import SessionStore
from ...store.sqlite import SqliteStore
from .fsck import Problem, Report


def check(store: SessionStore, where: str) -> Report:
    """Every problem found, as the fs fsck reports them (``file``: the session id)."""
    report = Report(data_dir=where)
    if isinstance(store, SqliteStore):
        for line in store.integrity_check():
            report.problems.append(Problem("error", "integrity", "(database)", line))
        for sid in store.sessions_without_meta():
            report.problems.append(Problem("error", "no_meta", sid,
                                           "entries without a session meta: invisible to list and get"))
    for meta in store.list_metas():
        sid = meta["session_id"]
        report.sessions += 1
        report.problems += check_session(store, sid, meta.get("message_count"))
    return report


def check_session(store: SessionStore, sid: str, message_count: object) -> list[Problem]:
    entries = {e["id"]: e for e in store.entries(sid)}
    problems: list[Problem] = []
    leaf = store.get_leaf(sid)
    if leaf is not None and leaf not in entries:
        problems.append(Problem("error", "dangling_leaf", sid, f"the active leaf {leaf!r} is no stored entry"))
    for eid, entry in entries.items():
        parent = entry.get("parent_id")
        if parent is not None and parent not in entries:
            problems.append(Problem("error", "dangling_parent", sid,
                                    f"entry {eid!r} has parent {parent!r}, which is no stored entry"))
    messages = sum(1 for e in entries.values() if e.get("kind") == "message")
    if message_count != messages:
        problems.append(Problem("error", "count_mismatch", sid,
                                f"message_count is {message_count!r} but {messages} message entries are stored"))
    return problems
