"""The sqlite adapter reads one entry (``get_entry``) as its body's UTF-8 bytes (``CAST(body AS
BLOB)``, as the writes bind it: ``CAST(? AS TEXT)``), decoded once: no ``str`` made of it only to
be encoded again (for a LangGraph checkpoint's latin-1 values, ~9 us of a ~29 us read of 8 KB)."""

from __future__ import annotations

from pathlib import Path

import session_manager

TEXT = "\x00\x7f\x80\xff é ☃ \U0001f600 \"\\\n\u2028"
BIG = 2**70 + 1  # past 64 bits: the exact decoder's


def test_an_entry_read_alone_gives_back_every_value_exactly(tmp_path: Path) -> None:
    # Prevents: the read of an entry's bytes changing what it gives back: text of every range
    # (latin-1, escapes, a character past the BMP), integers past 64 bits, floats, nesting.
    with session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db") as sm:
        sid = sm.create().session_id
        data = {"t": TEXT, "big": BIG, "neg": -BIG, "f": 0.1, "n": [1, [2, {"x": None, "b": True}]],
                "ids": "e_4a2659646718433496769462467e1d80 12345678901234567890123"}
        typed = sm._append_owned(sid, "x", {"v": [TEXT, 3]})
        called = sm.call("session::append", {"session_id": sid, "custom": {"custom_type": "x", "data": data}})
        message = sm.call("session::append", {"session_id": sid, "message": {
            "role": "user", "content": [{"type": "text", "text": TEXT}], "timestamp": 1}})
        store = sm.service.store
        got = store.get_entry(sid, called["entry_id"])
        assert got is not None and got["data"] == data and type(got["data"]["big"]) is int
        assert store.get_entry(sid, typed)["data"] == {"v": [TEXT, 3]}
        assert store.get_entry(sid, message["entry_id"]) == next(
            e for e in store.entries(sid) if e["id"] == message["entry_id"])
        assert store.get_entry(sid, "nope") is None and store.get_entry("nobody", typed) is None


def test_every_entry_read_at_once_gives_back_every_value_exactly(tmp_path: Path) -> None:
    # Prevents: entries() (a LangGraph index derived again reads them all) read as bytes changing
    # a value or the order: append order, each as get_entry gives it.
    with session_manager.open(f"sqlite:///{tmp_path.resolve()}/d.db") as sm:
        sid = sm.create().session_id
        written = [{"t": TEXT * i, "big": BIG + i, "f": i / 3} for i in range(5)]
        ids = [sm.call("session::append", {"session_id": sid, "custom": {"custom_type": "x", "data": d}})["entry_id"]
               for d in written]
        store = sm.service.store
        entries = store.entries(sid)
        assert [e["id"] for e in entries] == ids and [e["data"] for e in entries] == written
        assert entries == [store.get_entry(sid, i) for i in ids] and store.entries("nobody") == []
