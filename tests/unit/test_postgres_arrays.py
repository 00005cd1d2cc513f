"""The ``text[]`` parameters the write path encodes itself (store/postgres/arrays.py):
the server reads back exactly the list sent, whatever its length, nulls and characters."""

from __future__ import annotations

from typing import Any

import pytest

from session_manager.store.base import Commit
from session_manager.store.postgres.arrays import FixedTextArray, TextArray, encode
from session_manager.store.postgres.plan import apply_params

pytestmark = pytest.mark.postgres

CASES: list[list[str | None]] = [
    [],
    [None],
    [""],
    ["a"],
    ["é\u0001x", None, "", "\U0001f600", "a,b", '"q"', "{}", "NULL", "x" * 70_000],
    [None, None],
]


@pytest.mark.parametrize("items", CASES, ids=range(len(CASES)))
def test_a_text_array_reaches_the_server_as_the_list_sent(items: list[str | None]) -> None:
    # Prevents: the hand-made binary array differing from what psycopg would send (a wrong
    # length or null flag, an empty list's form, a character the server reads differently).
    import psycopg

    from tests import pg_support

    pg_support.require()  # skips, saying why, where no server answers (a fresh clone)
    with psycopg.connect(pg_support.DSN, autocommit=True) as conn:
        for value in (TextArray(items), FixedTextArray(items)):
            row = conn.execute("SELECT %b::text[], cardinality(%b::text[])", (value, value),
                               prepare=True).fetchone()
            assert row == (items, len(items))
        # The same bytes psycopg's own binary list dumper makes for the server to read.
        sent = conn.execute("SELECT array_send(%b::text[])", (TextArray(items),)).fetchone()
        plain = conn.execute("SELECT array_send(%b::text[])", (items or ["x"],)).fetchone()
        assert sent is not None and plain is not None
        if items:
            assert sent[0] == encode(items) == plain[0]


def test_the_write_path_sends_its_lists_as_text_arrays() -> None:
    # Prevents: a list parameter of sm_apply / sm_append_call left to psycopg's slower
    # list dumper (a third of an append's client time), or a TextArray that is not a list
    # (the settle path reads params["ids"][0] and params["payloads"][0]).
    entry: dict[str, Any] = {"kind": "message", "id": "e1", "parent_id": None, "timestamp": 1, "revision": 0,
                             "message": {"role": "user", "content": []}}
    params = apply_params("s1", Commit(entries=(entry,), leaf="e1"), ["{}"], None, instance="i", schema="public")
    lists = {k: v for k, v in params.items() if isinstance(v, list)}
    assert set(lists) == {"read_ids", "read_bodies", "ids", "parents", "bodies", "fids", "payloads", "all"}
    assert all(isinstance(v, TextArray) for v in lists.values())
    assert params["ids"][0] == "e1" and params["parents"] == [None]


def test_the_append_call_gets_every_argument_it_names_as_sm_apply_would_send_it() -> None:
    # Prevents: sm_append_call's parameters (built directly, not picked from sm_apply's)
    # missing one the statement names, carrying one it does not, or differing from the
    # value sm_apply would get for the same commit.
    import re

    from session_manager._wire.events import Event
    from session_manager.store.postgres.at_leaf import APPEND_CALL, HOLE_JSON, AtLeaf
    from session_manager.store.postgres.plan import Plan, append_call_params

    entry: dict[str, Any] = {"kind": "message", "id": "e\u00012", "parent_id": "e1", "timestamp": 5, "revision": 0,
                             "message": {"role": "user", "content": []}}
    meta = {"session_id": "s", "title": "", "created_at": 1, "updated_at": 5, "message_count": 2,
            "metadata": {"k": "v"}}
    commit = Commit(entries=(entry,), leaf=entry["id"], meta=meta, append=True)
    plan = Plan("s")
    plan.reads[entry["id"]] = None
    events = [Event("session::on-message-added", {"session_id": "s", "entry_id": entry["id"]})]
    cut = AtLeaf('{"session_id":"s","title":"","created_at":1,"updated_at":', ',"message_count":',
                 ',"metadata":{"k":"v"}}', True, 1)
    got = append_call_params("s", commit, ["{}"], cut, instance="i", schema="public", events=events, plan=plan)
    assert set(got) == set(re.findall(r"%\((\w+)\)b", APPEND_CALL))
    full = apply_params("s", commit, ["{}"], None, instance="i", schema="public", events=events, plan=plan)
    assert {k: v for k, v in got.items() if k in full} == {k: full[k] for k in got if k in full}
    assert (got["s0"], got["s1"], got["s2"], got["updated_first"], got["added"]) == (cut.s0, cut.s1, cut.s2, True, 1)
    assert got["updated_text"] == "5" and got["hole"] == HOLE_JSON and got["ids"] == ["e\u0001\u00022"]
