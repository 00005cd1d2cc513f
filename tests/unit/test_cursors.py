"""Pagination cursors: exact reference encodings, strict decoding.

A cursor is standard base64 (with padding) of compact JSON, so a cursor
issued by the reference worker reads back here and the other way round.
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_manager._wire import cursors
from session_manager.errors import INVALID_CURSOR, SessionError

ORDERS = ("created_asc", "created_desc", "updated_desc")


def b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def test_list_cursor_matches_the_reference_bytes() -> None:
    # Prevents: a cursor the reference cannot resume (key order, spacing or padding drift).
    raw = cursors.list_cursor("created_asc", 1_000_000, "s_002")
    assert raw == "eyJvIjoiY3JlYXRlZF9hc2MiLCJrIjoxMDAwMDAwLCJpZCI6InNfMDAyIn0="
    assert base64.b64decode(raw) == b'{"o":"created_asc","k":1000000,"id":"s_002"}'
    assert cursors.decode_list_cursor(raw, "created_asc") == (1_000_000, "s_002")


def test_entry_cursor_matches_the_reference_bytes() -> None:
    # Prevents: messages / messages-range cursors drifting from {"id": ...}.
    raw = cursors.entry_cursor("e_002")
    assert raw == "eyJpZCI6ImVfMDAyIn0="
    assert cursors.decode_entry_cursor(raw) == "e_002"


def test_padding_is_kept() -> None:
    # Prevents: unpadded (url-safe style) output the reference's decoder rejects.
    raw = cursors.entry_cursor("e_01")  # 13 JSON bytes: two padding characters
    assert raw == b64('{"id":"e_01"}') and raw.endswith("==")
    assert len(raw) % 4 == 0


@given(order=st.sampled_from(ORDERS), key=st.integers(0, 2**63 - 1), session_id=st.text(min_size=1))
def test_list_cursor_round_trip(order: str, key: int, session_id: str) -> None:
    # Prevents: a list page whose cursor does not resume at the same (key, id).
    assert cursors.decode_list_cursor(cursors.list_cursor(order, key, session_id), order) == (key, session_id)


@given(st.text(min_size=1))
def test_entry_cursor_round_trip(entry_id: str) -> None:
    # Prevents: caller-chosen entry ids (any text) breaking message paging.
    assert cursors.decode_entry_cursor(cursors.entry_cursor(entry_id)) == entry_id


def test_reference_cursor_with_raw_utf8_reads_back() -> None:
    # Prevents: rejecting a reference cursor whose JSON carries non-ASCII text unescaped.
    assert cursors.decode_entry_cursor(b64('{"id":"entrée"}')) == "entrée"
    assert cursors.decode_list_cursor(b64('{"o":"updated_desc","k":5,"id":"chat-ü"}'), "updated_desc") == (
        5,
        "chat-ü",
    )


def test_cursor_bound_to_its_order() -> None:
    # Prevents: resuming a created_asc walk with created_desc (silently skipping sessions).
    raw = cursors.list_cursor("created_asc", 1_000_000, "s_002")
    with pytest.raises(SessionError) as info:
        cursors.decode_list_cursor(raw, "created_desc")
    assert info.value.code == INVALID_CURSOR
    assert str(info.value) == (
        "session/invalid_cursor: cursor was issued for order created_asc but the request asks for created_desc"
    )


@pytest.mark.parametrize("raw", ["!!garbage!!", "eyJpZCI6ImVfMDAyIn0", "e yJ=", "ünï", "===="])
def test_not_base64(raw: str) -> None:
    # Prevents: garbage cursors crashing instead of failing with the cursor code.
    with pytest.raises(SessionError) as info:
        cursors.decode_entry_cursor(raw)
    assert info.value.code == INVALID_CURSOR
    assert info.value.detail.startswith("cursor is not valid base64: ")


@pytest.mark.parametrize("payload", ["not json", "[1,2]", '"e_1"', "null", "{", "\xff"])
def test_payload_not_an_object(payload: str) -> None:
    # Prevents: valid base64 of something else being mistaken for a cursor.
    raw = base64.b64encode(payload.encode("latin-1")).decode("ascii")
    with pytest.raises(SessionError) as info:
        cursors.decode_entry_cursor(raw)
    assert info.value.code == INVALID_CURSOR
    assert info.value.detail.startswith("cursor payload is malformed: ")


@pytest.mark.parametrize(
    "payload",
    [
        "{}",
        '{"id":7}',
        '{"o":"created_asc","k":"1","id":"s_1"}',
        '{"o":"created_asc","k":true,"id":"s_1"}',
        '{"o":"created_asc","k":1}',
        '{"k":1,"id":"s_1"}',
    ],
)
def test_list_cursor_shape_is_checked(payload: str) -> None:
    # Prevents: a cursor with a missing or mistyped field resuming from a bogus position.
    with pytest.raises(SessionError) as info:
        cursors.decode_list_cursor(b64(payload), "created_asc")
    assert info.value.code == INVALID_CURSOR
    assert info.value.detail.startswith("cursor payload is malformed: ")


def test_entry_cursor_needs_a_string_id() -> None:
    # Prevents: {"id": 7} being looked up as an entry id.
    for payload in ("{}", '{"id":7}', '{"id":null}'):
        with pytest.raises(SessionError) as info:
            cursors.decode_entry_cursor(b64(payload))
        assert info.value.detail.startswith("cursor payload is malformed: ")


def test_extra_keys_are_tolerated() -> None:
    # Prevents: a list cursor fed to messages failing as malformed (it must fail later, off-path).
    list_raw = cursors.list_cursor("created_asc", 1, "s_001")
    assert cursors.decode_entry_cursor(list_raw) == "s_001"
    assert cursors.decode_list_cursor(b64('{"o":"created_asc","k":1,"id":"s_1","x":[]}'), "created_asc") == (1, "s_1")


def test_non_ascii_ids_are_raw_utf8_inside_the_cursor() -> None:
    # Prevents: cursors that differ from the reference's bytes for non-ASCII ids (serde_json
    # writes raw UTF-8, not \u escapes).
    raw = cursors.list_cursor("created_asc", 5, "réunion")
    assert base64.b64decode(raw) == '{"o":"created_asc","k":5,"id":"réunion"}'.encode()
    assert cursors.decode_list_cursor(raw, "created_asc") == (5, "réunion")
