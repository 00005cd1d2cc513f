"""Review 22's attacks on the search cursor's request binding (``q``, 71d575e) and the page
memo's shape bound (ebc2847), over the stores that need no server.

A search cursor names its request by a digest of the folded query terms and the filters; the
attacks try the spellings the filter treats alike (which must page on) and the ones it treats
apart (which must be refused), a cursor stripped of ``q`` (accepted, as the previous release's:
it must still never answer a hit outside the request's own scope), and the largest query."""

from __future__ import annotations

import base64
import json
import string
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_manager import SessionManager
from session_manager._service import page_memo
from session_manager._service.listing import metadata_matches
from session_manager._service.page_memo import PageMemo
from session_manager._service.search import _binding
from session_manager._wire.search_api import SearchRequest
from session_manager.errors import INVALID_CURSOR, SessionError
from session_manager.store.search_text import parse_query
from tests.unit.store_openers import manager

KINDS = ["fs", "memory", "sqlite"]


@pytest.fixture(params=KINDS)
def sm(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionManager]:
    with manager(str(request.param), tmp_path) as opened:
        yield opened


def _text(text: str, ts: int) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}


def _seed(sm: SessionManager, metadata: dict[str, Any], n: int = 4, word: str = "alpha") -> list[tuple[str, str]]:
    found = []
    for i in range(n):
        sid = sm.call("session::create", {"title": f"s{i}", "metadata": metadata})["session_id"]
        eid = sm.call("session::append", {"session_id": sid, "message": _text(word, i)})["entry_id"]
        found.append((sid, eid))
    return found


def _ids(page: dict[str, Any]) -> list[tuple[str, str]]:
    return [(h["session_id"], h["entry_id"]) for h in page["hits"]]


def _payload(cursor: str) -> dict[str, Any]:
    value = json.loads(base64.b64decode(cursor))
    assert isinstance(value, dict)
    return value


def _encode(payload: dict[str, Any]) -> str:
    return base64.b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode()


@pytest.mark.parametrize(("stored", "first", "again"), [
    ({"n": 1}, {"n": 1}, {"n": 1.0}),
    ({"n": 1}, {"n": 1.0}, {"n": 1}),
    ({"z": 0}, {"z": 0}, {"z": -0.0}),
    ({"big": 100}, {"big": 100}, {"big": 1e2}),
    ({"nest": {"b": [2, 3]}}, {"nest": {"b": [2.0, 3]}}, {"nest": {"b": [2, 3.0]}}),
])
def test_a_cursor_pages_on_when_a_filter_number_is_spelled_another_way(
        sm: SessionManager, stored: dict[str, Any], first: dict[str, Any], again: dict[str, Any]) -> None:
    # Prevents: the cursor's digest spelling a filter's numbers as written (1 and 1.0 apart) while
    # the filter compares them as JSON numbers (1 matches 1.0): the same result set's cursor was
    # refused with session/invalid_cursor when the caller's encoder wrote the number otherwise.
    found = _seed(sm, stored)
    assert metadata_matches(again, stored) and metadata_matches(first, stored)
    page = sm.call("session::search", {"query": "alpha", "limit": 2, "metadata": first})
    assert page.get("next_cursor"), "the scope must hold more than a page"
    shown = _ids(page)
    cursor: str | None = page["next_cursor"]
    while cursor is not None:
        page = sm.call("session::search", {"query": "alpha", "limit": 2, "metadata": again, "cursor": cursor})
        shown += _ids(page)
        cursor = page.get("next_cursor")
    assert sorted(shown) == sorted(found)


@pytest.mark.parametrize("again", [
    {"metadata": {"n": True}},  # (true is not 1: another scope, here an empty one)
    {"metadata": {"n": "1"}},
    {"metadata": {"n": [1]}},
    {"metadata": {"n": 1.5}},
    {"roles": []},  # (no role at all: not "every role")
    {"query": "alpha alpha"},  # (a repeated word is one more term: another df, another score)
])
def test_a_cursor_presented_with_a_filter_the_store_treats_apart_is_refused(
        sm: SessionManager, again: dict[str, Any]) -> None:
    _seed(sm, {"n": 1})
    page = sm.call("session::search", {"query": "alpha", "limit": 2, "metadata": {"n": 1}})
    request = {"query": "alpha", "limit": 2, "metadata": {"n": 1}, "cursor": page["next_cursor"], **again}
    with pytest.raises(SessionError) as e:
        sm.call("session::search", request)
    assert e.value.code == INVALID_CURSOR and "cursor" in str(e.value)


def test_session_id_absent_or_null_and_metadata_absent_or_empty_name_one_request(sm: SessionManager) -> None:
    found = _seed(sm, {})
    page = sm.call("session::search", {"query": "alpha", "limit": 2, "metadata": {}, "session_id": None})
    rest = sm.call("session::search", {"query": "alpha", "limit": 10, "cursor": page["next_cursor"]})
    assert sorted(_ids(page) + _ids(rest)) == sorted(found)
    assert "next_cursor" not in rest or rest["next_cursor"] is None


def test_a_cursor_stripped_of_its_binding_never_answers_a_hit_outside_the_request_s_scope(
        sm: SessionManager) -> None:
    # A client can strip q (a cursor is not signed: its place and counts are the client's word
    # too), and then the cursor is taken as the previous release's, for any query. That is no
    # hole: the scope is the request's own filters, never the cursor's, so the worst answer is
    # a page of the caller's own scope ranked with other counts (as the previous release did).
    mine = _seed(sm, {"tenant": "A"})
    theirs = _seed(sm, {"tenant": "B"})
    page = sm.call("session::search", {"query": "alpha", "limit": 1, "metadata": {"tenant": "B"}})
    stripped = _encode({k: v for k, v in _payload(page["next_cursor"]).items() if k != "q"})
    shown: list[tuple[str, str]] = []
    cursor: str | None = stripped
    while cursor is not None:
        got = sm.call("session::search", {"query": "alpha", "limit": 1, "metadata": {"tenant": "A"},
                                          "cursor": cursor})
        shown += _ids(got)
        cursor = got.get("next_cursor")
        if cursor is not None:
            assert "q" in _payload(cursor)  # (the next one names the request it was answered for)
    assert shown and set(shown) <= set(mine)
    assert not set(shown) & set(theirs)


def test_the_longest_query_s_cursor_reads_back(sm: SessionManager) -> None:
    # The cursor grows with the query (one count per term, and q): the longest query (256
    # characters, 128 one-letter words) still issues a cursor the next page accepts.
    letters = string.ascii_lowercase
    words = [letters[i % 26] for i in range(128)]
    text = " ".join(words)
    assert len(text) <= 256
    found = []
    for i in range(3):
        sid = sm.call("session::create", {"title": f"s{i}"})["session_id"]
        found.append((sid, sm.call("session::append", {"session_id": sid, "message": _text(text, i)})["entry_id"]))
    query = " ".join(words)[:255]
    first = sm.call("session::search", {"query": query, "limit": 2})
    assert first.get("next_cursor")
    rest = sm.call("session::search", {"query": query, "limit": 2, "cursor": first["next_cursor"]})
    assert sorted(_ids(first) + _ids(rest)) == sorted(found)


# -- the digest alone, over generated filters ------------------------------------------------

_scalars = st.one_of(st.booleans(), st.integers(-(2**60), 2**60), st.none(),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)), max_leaves=8)
_filters = st.dictionaries(st.text(min_size=1, max_size=3), _values, max_size=3)


def _respell(value: Any, data: st.DataObject) -> Any:
    """``value`` as another client may write it: whole numbers as floats (where a float holds
    them exactly), keys in another order."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return float(value) if float(value) == value and data.draw(st.booleans()) else value
    if isinstance(value, float):
        return int(value) if value.is_integer() and data.draw(st.booleans()) else value
    if isinstance(value, list):
        return [_respell(v, data) for v in value]
    keys = data.draw(st.permutations(list(value)))
    return {k: _respell(value[k], data) for k in keys}


def _req(metadata: dict[str, Any], query: str = "alpha") -> tuple[Any, SearchRequest]:
    parsed = parse_query(query)
    assert parsed is not None
    return parsed, SearchRequest(query=query, metadata=metadata)


@settings(max_examples=300, deadline=None)
@given(_filters, st.data())
def test_a_filter_respelled_names_the_same_request(metadata: dict[str, Any], data: st.DataObject) -> None:
    again = _respell(metadata, data)
    assert metadata_matches(metadata, again) and metadata_matches(again, metadata)
    assert _binding(*_req(metadata)) == _binding(*_req(again))


@settings(max_examples=300, deadline=None)
@given(_filters, _filters)
def test_filters_matching_apart_name_other_requests(a: dict[str, Any], b: dict[str, Any]) -> None:
    # (two filters one of which matches a session the other does not: their digests differ)
    if metadata_matches(a, b) and metadata_matches(b, a):
        return  # (alike; the other test's)
    assert _binding(*_req(a)) != _binding(*_req(b))


# -- the page memo's shape bound, under threads ------------------------------------------------

def test_pages_planned_while_other_threads_replace_and_evict_them_answer_exactly_and_count_their_bytes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A page's plan is made outside the memo's lock (its shapes compiled, the bound checked again
    # under the shapes' lock) while other threads keep new versions of its key and evict it
    # (three pages kept at most): every answer must be the page as built for the version read,
    # no shape kept past MAX_SHAPES, and the bytes counted those of the pages still kept.
    monkeypatch.setattr(page_memo, "_SHAPES", {})
    monkeypatch.setattr(page_memo, "MAX_SHAPES", 6)
    memo = PageMemo(max_pages=3)
    threads, rounds = 6, 60
    barrier = threading.Barrier(threads, timeout=5)
    errors: list[BaseException] = []

    def built(key: int, version: int) -> dict[str, Any]:
        # (a structure per key and version parity: more structures than MAX_SHAPES holds)
        return {"messages": [{f"k{key}v{version % 2}": [version, {"x": key}]}], "has_more": False}

    def work(t: int) -> None:
        try:
            barrier.wait()
            for r in range(rounds):
                key = (t + r) % 5
                memo.keep(key, r, built(key, r))
                for _ in range(page_memo.PLAN_AFTER + 1):
                    kept = memo.get(key)
                    if kept is None:
                        continue  # (evicted by another thread)
                    version = kept[0]
                    assert isinstance(version, int)
                    assert memo.page(kept) == built(key, version)
        except BaseException as e:  # (reported on the main thread)
            errors.append(e)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(20)
    assert not any(w.is_alive() for w in workers)
    assert not errors, errors[:3]
    assert len(page_memo._SHAPES) <= 6
    pages = memo._pages
    assert len(pages) <= 3
    assert memo._bytes == sum(len(line) + state[1] for _, line, state in pages.values())
