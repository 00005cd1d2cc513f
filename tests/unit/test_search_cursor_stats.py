"""A search cursor stays sound while other writers append and delete (review17's cursor defect).

A cursor used to name its place by score alone, and every score depends on the scope's
statistics (document count, lengths, each term's document count): after any append or delete in
the scope, even of an entry without a hit, every score moved and the next page repeated the first
or came back empty, skipping every remaining hit. The cursor now carries the statistics page 1
was ranked with, and later pages are ranked with them (each store's page statement), so a hit
that existed throughout is shown exactly once. Over fs, memory, sqlite and postgres.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import SessionManager
from session_manager.errors import INVALID_CURSOR, SessionError
from session_manager.store import MemoryStore
from tests.unit.store_openers import manager

KINDS = ["fs", "memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def _text(text: str, ts: int = 1) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}


@pytest.fixture(params=KINDS)
def sm(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionManager]:
    with manager(str(request.param), tmp_path) as opened:
        yield opened


def _six(sm: SessionManager, **metadata: Any) -> tuple[list[tuple[str, str]], str]:
    """Six entries of equal text (one session each) and a session holding no hit."""
    found = []
    for i in range(6):
        sid = sm.call("session::create", {"title": f"s{i}", "metadata": metadata})["session_id"]
        eid = sm.call("session::append", {"session_id": sid, "message": _text("alpha beta", ts=i)})["entry_id"]
        found.append((sid, eid))
    other = sm.call("session::create", {"title": "other", "metadata": metadata})["session_id"]
    sm.call("session::append", {"session_id": other, "message": _text("gamma delta epsilon")})
    return found, other


def _search(sm: SessionManager, cursor: str | None = None, **extra: Any) -> dict[str, Any]:
    return sm.call("session::search", {"query": "alpha", "limit": 2, **extra,
                                       **({"cursor": cursor} if cursor else {})})


def _ids(page: dict[str, Any]) -> list[tuple[str, str]]:
    return [(h["session_id"], h["entry_id"]) for h in page["hits"]]


def _rest(sm: SessionManager, cursor: str | None, **extra: Any) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for _ in range(50):
        if cursor is None:
            return out
        page = _search(sm, cursor, **extra)
        out.extend(_ids(page))
        cursor = page.get("next_cursor")
    raise AssertionError("pages never ended")


@pytest.mark.parametrize("scoped", [False, True])
def test_a_delete_of_a_session_without_hits_between_pages_neither_repeats_nor_skips(
        sm: SessionManager, scoped: bool) -> None:
    # Regression: page 2 was page 1 again (the delete raised every score past the cursor's).
    extra: dict[str, Any] = {"metadata": {"owner": "A"}} if scoped else {}
    found, other = _six(sm, owner="A")
    first = _search(sm, **extra)
    assert len(first["hits"]) == 2 and first.get("next_cursor")
    sm.call("session::delete", {"session_id": other})
    rest = _rest(sm, first["next_cursor"], **extra)
    seen = _ids(first) + rest
    assert len(seen) == len(set(seen)) == 6
    assert set(seen) == set(found)


@pytest.mark.parametrize("scoped", [False, True])
def test_an_append_between_pages_neither_repeats_nor_skips(sm: SessionManager, scoped: bool) -> None:
    # Regression: page 2 was empty (the append lowered every score below the cursor's).
    extra: dict[str, Any] = {"metadata": {"owner": "A"}} if scoped else {}
    found, other = _six(sm, owner="A")
    first = _search(sm, **extra)
    sm.call("session::append", {"session_id": other, "message": _text("zeta eta theta iota kappa lambda")})
    second = _search(sm, first["next_cursor"], **extra)
    assert len(second["hits"]) == 2  # (a page holds limit hits while more remain)
    seen = _ids(first) + _ids(second) + _rest(sm, second.get("next_cursor"), **extra)
    assert len(seen) == len(set(seen)) == 6
    assert set(seen) == set(found)


def test_hits_appended_or_deleted_between_pages_leave_the_others_shown_once(sm: SessionManager) -> None:
    found, _ = _six(sm)
    first = _search(sm)
    gone = next(f for f in found if f not in _ids(first))
    sm.call("session::delete", {"session_id": gone[0]})
    new = sm.call("session::create", {"title": "new"})["session_id"]
    sm.call("session::append", {"session_id": new, "message": _text("alpha alpha alpha", ts=99)})
    seen = _ids(first) + _rest(sm, first["next_cursor"])
    assert len(seen) == len(set(seen))
    assert gone not in seen
    assert set(found) - {gone} <= set(seen)


def test_later_pages_show_the_scores_of_page_one(sm: SessionManager) -> None:
    # The scores a user pages through stay one ranking (those page 1 was ranked with).
    _, other = _six(sm)
    first = _search(sm)
    sm.call("session::append", {"session_id": other, "message": _text("one two three four five six")})
    second = _search(sm, first["next_cursor"])
    assert {h["score"] for h in first["hits"] + second["hits"]} == {first["hits"][0]["score"]}


def _encode(payload: dict[str, Any]) -> str:
    return base64.b64encode(json.dumps(payload).encode()).decode()


def _payload(cursor: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(base64.b64decode(cursor))
    return value


def test_a_previous_release_cursor_without_statistics_is_accepted_as_before(sm: SessionManager) -> None:
    found, _ = _six(sm)
    first = _search(sm)
    old = {k: v for k, v in _payload(first["next_cursor"]).items() if k in ("s", "t", "sid", "id")}
    seen = _ids(first) + _rest(sm, _encode(old))
    assert sorted(seen) == sorted(found)


@pytest.mark.parametrize("forge", [
    {"n": -1}, {"n": "6"}, {"n": True}, {"n": 2**80}, {"l": -3}, {"l": 1.5}, {"df": [1, 2]}, {"df": "1"},
    {"df": [2**53]}, {"df": [-1]}, {"df": [True]}, {"n": None}, {"df": None},
])
def test_a_forged_cursor_answers_invalid_cursor(sm: SessionManager, forge: dict[str, Any]) -> None:
    _six(sm)
    first = _search(sm)
    payload = _payload(first["next_cursor"])
    assert {"n", "l", "df"} <= set(payload)
    payload.update(forge)
    with pytest.raises(SessionError) as e:
        _search(sm, _encode(payload))
    assert e.value.code == INVALID_CURSOR


def test_a_store_overriding_search_page_without_stats_still_pages() -> None:
    # A store of another package written against the previous signature (no ``stats``, a plain
    # list): its pages still walk (no TypeError), its cursors carry no statistics, as before.
    from session_manager.store.search_index import SortKey

    class Older(MemoryStore):
        def search_page(self, query: Any, sessions: Any, roles: Any, limit: int,  # type: ignore[override]
                        after: SortKey | None) -> list[Any]:
            return list(MemoryStore.search_page(self, query, sessions, roles, limit, after))

    sm = session_manager.open(store=Older())
    found, _ = _six(sm)
    first = _search(sm)
    assert not {"n", "l", "df"} & set(_payload(first["next_cursor"]))
    assert sorted(_ids(first) + _rest(sm, first["next_cursor"])) == sorted(found)


@pytest.mark.parametrize("other", [
    {"query": "beta"},  # (as many terms: its df was accepted, and ranked this scope with alpha's counts)
    {"query": "alpha beta"},
    {"query": "alph"},  # (the same word as a prefix: another result set)
    {"metadata": {}},  # (every session: the cursor's place and counts were the owner's)
    {"metadata": {"owner": "B"}},
    {"roles": ["user"]},
    {"session_id": "s-none"},
])
def test_a_cursor_presented_with_another_query_or_filters_answers_invalid_cursor(
        sm: SessionManager, other: dict[str, Any]) -> None:
    # Prevents: a cursor issued for one query and scope accepted for another, answering a page of
    # another result set (its place and frozen statistics were the first query's).
    _six(sm, owner="A")
    first = _search(sm, metadata={"owner": "A"})
    assert first.get("next_cursor")
    request = {"query": "alpha", "limit": 2, "metadata": {"owner": "A"}, "cursor": first["next_cursor"], **other}
    with pytest.raises(SessionError) as e:
        sm.call("session::search", {k: v for k, v in request.items() if v != {}})
    assert e.value.code == INVALID_CURSOR and "cursor" in str(e.value)


def test_a_cursor_pages_on_when_its_query_and_filters_are_sent_again_in_another_form(sm: SessionManager) -> None:
    # The same result set: the query's words as the search folds them, the filter's keys in
    # another order, the roles repeated or reordered, another limit.
    found, _ = _six(sm, owner="A", team="x")
    first = sm.call("session::search", {"query": "Alpha", "limit": 2, "metadata": {"owner": "A", "team": "x"},
                                        "roles": ["user", "assistant"]})
    again = {"query": "ALPHA", "metadata": {"team": "x", "owner": "A"}, "roles": ["assistant", "user", "user"]}
    rest = _rest(sm, first["next_cursor"], **again)
    assert sorted(_ids(first) + rest) == sorted(found)


def test_a_cursor_with_statistics_but_no_query_binding_is_accepted() -> None:
    # A cursor issued by this release before cursors named their query (``n``, ``l``, ``df``
    # only): accepted for any query as before (it cannot be checked); its next cursor names it.
    sm = session_manager.open(store=MemoryStore())
    found, _ = _six(sm)
    first = _search(sm)
    unbound = {k: v for k, v in _payload(first["next_cursor"]).items() if k != "q"}
    second = _search(sm, _encode(unbound))
    assert "q" in _payload(second["next_cursor"])
    assert sorted(_ids(first) + _ids(second) + _rest(sm, second["next_cursor"])) == sorted(found)
