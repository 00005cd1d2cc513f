"""The sqlite adapter stores an entry's body as the UTF-8 of its JSON, bound as bytes and kept as
TEXT (``CAST(? AS TEXT)``), with an append's data JSON spliced in when the caller encoded it
(``Commit.data_json``, the typed append's: a LangGraph checkpoint is not encoded twice)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson

import session_manager
from session_manager.store.base import Commit, append_commit
from session_manager.store.sqlite import SqliteStore
from session_manager.testing.contract import meta as session_meta

# Latin-1 text (a serializer's bytes as one character each), an escaped NUL, a character past the BMP.
TEXT = "\x00\x7f\x80\xff é ☃ \U0001f600 \"\\\n"


def _bodies(db: Path) -> list[tuple[str, Any]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT typeof(body), body FROM entries ORDER BY seq").fetchall()
    finally:
        conn.close()


def test_a_typed_append_stores_its_entry_as_text_equal_to_the_entrys_json(tmp_path: Path) -> None:
    # Prevents: a body bound as bytes stored as a BLOB (readers, search and the JSON functions take
    # TEXT), or the spliced data JSON making a body that differs by a byte from the entry's own JSON.
    with session_manager.open(f"sqlite:///{tmp_path / 's.db'}") as sm:
        sid = sm.create().session_id
        data = {"values": [["1", "msgpack", TEXT]], "n": 3, "f": 1.5, "none": None}
        eid = sm._append_owned(sid, "langgraph.checkpoint", data)
        entry = sm.service.store.get_entry(sid, eid)
        assert entry is not None and entry["data"] == data
    kinds = _bodies(tmp_path / "s.db")
    assert [k for k, _ in kinds] == ["text"]
    assert kinds[-1][1].encode("utf-8") == orjson.dumps(entry)


def test_an_append_with_its_data_json_stores_those_bytes(tmp_path: Path) -> None:
    # Prevents: the store encoding an append's data again when the caller handed its JSON over
    # (Commit.data_json): the bytes handed over are the ones stored, as the fs store splices them.
    with session_manager.open(f"sqlite:///{tmp_path / 's.db'}") as sm:
        store = sm.service.store
        assert isinstance(store, SqliteStore)
        data = {"values": [TEXT], "n": 1}
        handed = orjson.dumps(data, option=orjson.OPT_INDENT_2)  # the same value, told apart by its layout
        entry = {"kind": "custom", "id": "e_1", "parent_id": None, "timestamp": 1, "revision": 0,
                 "custom_type": "x", "data": data}
        sid = sm.create().session_id
        meta = store.get_meta(sid)
        assert meta is not None
        store.commit(sid, append_commit(meta, (entry,), chain=False, data_json=handed))
        assert store.get_entry(sid, "e_1") == entry
    (kind, body), = _bodies(tmp_path / "s.db")
    assert kind == "text" and handed.decode("utf-8") in body


def test_entries_written_and_revised_without_data_json_are_text_and_read_back(tmp_path: Path) -> None:
    # Prevents: the bytes binding losing a character on the plain paths (a message appended, an
    # entry revised: UPDATE ... SET body = CAST(? AS TEXT)), or storing either as a BLOB.
    with session_manager.open(f"sqlite:///{tmp_path / 's.db'}") as sm:
        sid = sm.create().session_id
        message: Any = {"role": "user", "content": [{"type": "text", "text": TEXT}], "timestamp": 1}
        sm.append(sid, message=message)
        tail = sm.call("session::messages-tail", {"session_id": sid, "limit": 5})
        assert tail["messages"][-1]["message"]["content"][0]["text"] == TEXT
        store = sm.service.store
        assert isinstance(store, SqliteStore)
        entry = {"kind": "custom", "id": "e_1", "parent_id": None, "timestamp": 1, "revision": 0,
                 "custom_type": "x", "data": {"t": "a"}}
        store.commit("r", Commit(entries=(entry,), leaf="e_1", meta=session_meta("r", message_count=0)))
        revised = {**entry, "revision": 1, "data": {"t": TEXT}}
        store.commit("r", Commit(entries=(revised,), meta=session_meta("r", message_count=0)))
        assert store.get_entry("r", "e_1") == revised
    assert {k for k, _ in _bodies(tmp_path / "s.db")} == {"text"}
