"""``SessionStore.created_and_leaf``: a session's ``(meta created_at, active leaf)`` (what an
adapter's index of it is derived at), the same on every store as ``meta_and_leaf`` gives it,
read without the meta where a store can (sqlite: two columns, no JSON decoded)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import session_manager
from tests.unit.store_openers import Opener, opener_fixture  # noqa: F401 (the fixture "opener")


def token(store: Any, session_id: str) -> Any:
    meta, leaf = store.meta_and_leaf(session_id)
    return None if meta is None else (meta.get("created_at"), leaf)


def test_created_and_leaf_is_what_meta_and_leaf_says_through_a_sessions_life(opener: Opener) -> None:
    # Prevents: an index token read another way (sqlite's columns) disagreeing with the meta's,
    # which a checked append compares with: every write would then be refused as stale.
    with opener() as sm:
        store = sm.service.store
        seen = [store.created_and_leaf("s")]
        sm.call("session::ensure", {"session_id": "s"})
        seen.append(store.created_and_leaf("s"))
        for i in range(3):
            sm.call("session::append", {"session_id": "s", "custom": {"custom_type": "x", "data": i}})
            assert store.created_and_leaf("s") == token(store, "s")
        sm.call("session::set-meta", {"session_id": "s", "title": "t"})
        seen.append(store.created_and_leaf("s"))
        assert seen[-1] == token(store, "s")
        sm.call("session::delete", {"session_id": "s"})
        seen.append(store.created_and_leaf("s"))
    assert seen[0] is None and seen[-1] is None
    assert seen[1] is not None and seen[1][1] is None and isinstance(seen[1][0], int)


def test_sqlite_created_and_leaf_falls_back_to_the_meta_when_its_column_cannot_say(tmp_path: Path) -> None:
    # Prevents: a row whose created_at column is not the meta's exact integer (a NULL from a file
    # an older writer made, a value past 64 bits the column holds as its nearest float) giving a
    # token the meta does not.
    uri = f"sqlite:///{tmp_path.resolve()}/d.db"
    with session_manager.open(uri) as sm:
        for sid in ("null", "float"):
            sm.call("session::ensure", {"session_id": sid})
            sm.call("session::append", {"session_id": sid, "custom": {"custom_type": "x", "data": 1}})
        store = sm.service.store
        conn = sqlite3.connect(tmp_path / "d.db")
        conn.execute("UPDATE sessions SET created_at = NULL WHERE session_id = 'null'")
        conn.execute("UPDATE sessions SET created_at = 1.5 WHERE session_id = 'float'")
        conn.commit()
        conn.close()
        assert [store.created_and_leaf(s) for s in ("null", "float")] == [token(store, s) for s in ("null", "float")]


def test_a_sqlite_session_row_without_meta_has_no_token(tmp_path: Path) -> None:
    # Prevents: a session mid-way (a row, entries maybe, no meta yet: the contract allows it)
    # read as present, as meta_and_leaf does not.
    with session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db") as sm:
        conn = sqlite3.connect(tmp_path / "d.db")
        conn.execute("INSERT INTO sessions (session_id, leaf, created_at) VALUES ('mid', 'e', 5)")
        conn.commit()
        conn.close()
        store = sm.service.store
        assert store.meta_and_leaf("mid")[0] is None and store.created_and_leaf("mid") is None


def test_session_token_never_comes_back_after_a_write_and_own_commits_are_foretold(opener: Opener) -> None:
    # Prevents (review 13's ABA): a token an adapter's index was derived at coming back after
    # writes of the session (a leaf set back by session::set-active-leaf, a meta change, the
    # session deleted and made again), so the index would be taken as current; and a store's
    # version_after naming a version its commits did not leave (an adapter's own writes would
    # then hide another's, or derive their index again at every read).
    with opener() as sm:
        store = sm.service.store
        sm.call("session::ensure", {"session_id": "s"})
        first = sm.call("session::append", {"session_id": "s", "custom": {"custom_type": "x", "data": 0}})
        seen = [store.session_token("s")]
        assert seen[0][:2] == token(store, "s")
        sm.call("session::append", {"session_id": "s", "custom": {"custom_type": "x", "data": 1}})
        after_one = store.session_token("s")
        foretold = store.version_after(seen[0][2], 1)
        assert foretold is None or foretold == after_one[2]
        assert store.version_after(seen[0][2], 2) != after_one[2] or foretold is None
        seen.append(after_one)
        sm.call("session::set-active-leaf", {"session_id": "s", "entry_id": first["entry_id"]})
        seen.append(store.session_token("s"))
        assert seen[-1][:2] == seen[0][:2]  # (the leaf is back: only the version tells)
        sm.call("session::set-meta", {"session_id": "s", "title": "t"})
        seen.append(store.session_token("s"))
        assert store.session_token("s", seen[-1][2]) == seen[-1]  # (a known version answers the same)
        sm.call("session::delete", {"session_id": "s"})
        assert store.session_token("s") is None
        sm.call("session::ensure", {"session_id": "s"})
        seen.append(store.session_token("s"))
    versions = [t[2] for t in seen]
    if versions[0] is not None:  # (a store naming versions: none of them twice)
        assert len(set(versions)) == len(versions)
