"""``session-manager data import`` admits a file as the API admits a request
(issue 25 #5): the same exact-value rules and admission, referential checks the
API makes (a parent must exist, attachment bytes must match their record),
``message_count`` and ``updated_at`` derived as the store derives them, a clear
``{"error": ...}`` naming the line and session, and nothing written of a
refused file. Every test reads the data_dir back afterwards."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from session_manager._cli.data import main
from session_manager.store.fs import FsStore

SID = "s_imp"


def entry(eid: str, parent: str | None, text: str = "hi", ts: int = 1_000) -> dict[str, Any]:
    return {"kind": "message", "id": eid, "parent_id": parent, "timestamp": ts, "revision": 0,
            "message": {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}}


def document(sid: str = SID, **changes: Any) -> dict[str, Any]:
    meta = {"session_id": sid, "title": "t", "description": "", "status": "idle", "metadata": {"owner": "u1"},
            "created_at": 500, "updated_at": 500, "message_count": 2}
    doc = {"format": "session-manager/session", "version": 1, "meta": meta, "leaf": "e_2",
           "entries": [entry("e_1", None, ts=1_000), entry("e_2", "e_1", ts=2_000)], "attachments": []}
    doc.update(changes)
    return doc


def line(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def import_lines(capsys: pytest.CaptureFixture[str], tmp_path: Path, *lines: bytes) -> tuple[int, Any]:
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    code = main(["import", str(tmp_path / "d"), str(source), "--json"])
    out, err = capsys.readouterr()
    assert err == ""  # never a traceback: the one JSON document says what happened
    return code, json.loads(out)


def refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, *lines: bytes) -> str:
    """Import a file that must be refused whole; the error message. The data_dir holds no session after."""
    code, answer = import_lines(capsys, tmp_path, line(document("s_good")), *lines)
    assert code == 1 and answer["error"]["code"] == "session/invalid_request", answer
    assert stored(tmp_path) == {}
    return str(answer["error"]["message"])


def stored(tmp_path: Path) -> dict[str, Any]:
    """What a fresh store reads back (and no session log at all when nothing was imported)."""
    if not (tmp_path / "d").exists():
        return {}
    store = FsStore(tmp_path / "d", read_only=True)
    try:
        out = {m["session_id"]: {"meta": m, "leaf": store.get_leaf(m["session_id"]),
                                 "entries": store.entries(m["session_id"]),
                                 "attachments": store.list_attachments(m["session_id"])}
               for m in store.list_metas()}
    finally:
        store.close()
    if not out:
        assert list((tmp_path / "d").glob("*.jsonl")) == []
    return out


def test_import_of_invalid_utf8_is_an_error_naming_the_line(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    # Prevents: a UnicodeDecodeError traceback (the whole file was decoded as text up front).
    message = refused(capsys, tmp_path, line(document()).replace(b'"title":"t"', b'"title":"\xff\xfe"'))
    assert message.startswith("line 2: not UTF-8")


def test_import_of_5000_deep_nesting_is_an_error_naming_the_line(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    # Prevents: a RecursionError traceback from the JSON parser on a hostile line.
    deep = line(document()).replace(b'{"owner":"u1"}', b'{"x":' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert refused(capsys, tmp_path, deep).startswith("line 2: nested too deeply")


def test_import_nested_past_the_api_depth_names_the_session_and_field(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path) -> None:
    # Prevents: a value the API refuses as nested too deeply (MAX_DEPTH) stored by an import.
    deep = line(document()).replace(b'{"owner":"u1"}', b'{"x":' + b"[" * 200 + b"]" * 200 + b"}")
    message = refused(capsys, tmp_path, deep)
    assert message.startswith(f"line 2 (session {SID}): meta.") and "nested more than 120 levels" in message


def test_import_refuses_nan_in_metadata_naming_the_session_and_field(capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path) -> None:
    # Prevents: NaN in metadata exiting 0 and stored as null.
    nan = line(document()).replace(b'{"owner":"u1"}', b'{"owner":"u1","score":NaN}')
    message = refused(capsys, tmp_path, nan)
    assert message.startswith(f"line 2 (session {SID}): meta.metadata.score:") and "NaN" in message


def test_import_refuses_nan_beside_a_huge_integer_and_keeps_huge_integers_exact(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Prevents: NaN beside an integer above 2**64 written as a literal NaN line, after which the
    # session was invisible to list/get and fsck reported no_meta.
    both = line(document()).replace(b'{"owner":"u1"}', b'{"big":%d,"score":NaN}' % (2**70 + 1))
    assert "meta.metadata.score" in refused(capsys, tmp_path, both)
    exact = line(document()).replace(b'{"owner":"u1"}', b'{"big":%d}' % (2**70 + 1))
    code, _ = import_lines(capsys, tmp_path, exact)
    assert code == 0
    assert stored(tmp_path)[SID]["meta"]["metadata"] == {"big": 2**70 + 1}
    assert main(["fsck", str(tmp_path / "d"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["healthy"] is True


def test_import_refuses_an_unpaired_surrogate_in_a_message(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    # Prevents: text the API refuses (no UTF-8 form) imported and written.
    lone = line(document()).replace(b'"text":"hi"', b'"text":"\\ud800"', 1)
    message = refused(capsys, tmp_path, lone)
    assert message.startswith(f"line 2 (session {SID}): entries[0].message.content.0.text:")


def test_import_refuses_a_dangling_parent(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Prevents: an entry whose parent is not in the session accepted as given (the API refuses it).
    dangling = document(entries=[entry("e_1", None), entry("e_2", "e_gone")])
    message = refused(capsys, tmp_path, line(dangling))
    assert message == f"line 2 (session {SID}): entries[1].parent_id: entry 'e_gone' is not in the session"


def test_import_refuses_a_parent_cycle_and_a_duplicate_id(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    # Prevents: entries no path can reach (a loop) or one id standing for two entries.
    loop = document(entries=[entry("e_1", "e_2"), entry("e_2", "e_1")])
    assert "entries[0].parent_id: the parents of entry 'e_1' loop" in refused(capsys, tmp_path, line(loop))
    twice = document(entries=[entry("e_1", None), entry("e_1", None)], leaf="e_1")
    assert "entries[1].id: 'e_1' appears twice" in refused(capsys, tmp_path, line(twice))


def test_import_refuses_an_entry_the_api_would_refuse(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Prevents: an entry the API's models refuse (here a text block whose text is a number) stored by
    # an import because the replay's looser structural check passed it.
    bad = document()
    bad["entries"][1]["message"]["content"] = [{"type": "text", "text": 5}]
    message = refused(capsys, tmp_path, line(bad))
    assert message.startswith(f"line 2 (session {SID}): entries[1].message.") and "valid string" in message


def attachment(data: bytes, **changes: Any) -> dict[str, Any]:
    item = {"attachment_id": "a_1", "session_id": SID, "name": "a.bin", "mime": "application/octet-stream",
            "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "created_at": 600,
            "data": base64.b64encode(data).decode()}
    item.update(changes)
    return item


def test_import_refuses_attachment_bytes_that_do_not_match_their_record(capsys: pytest.CaptureFixture[str],
                                                                       tmp_path: Path) -> None:
    # Prevents: attachment bytes stored under a size or sha256 they do not have.
    data = b"bytes\x00\xff"
    wrong_size = document(attachments=[attachment(data, size=99)])
    assert "attachments[0].size: 99, but the data holds 7 bytes" in refused(capsys, tmp_path, line(wrong_size))
    wrong_hash = document(attachments=[attachment(data, sha256="0" * 64)])
    assert "attachments[0].sha256: does not match the data" in refused(capsys, tmp_path, line(wrong_hash))
    code, answer = import_lines(capsys, tmp_path, line(document(attachments=[attachment(data)])))
    assert code == 0 and answer["attachments"] == 1
    assert [a["sha256"] for a in stored(tmp_path)[SID]["attachments"]] == [hashlib.sha256(data).hexdigest()]


def test_import_derives_message_count_and_updated_at_instead_of_trusting_the_file(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Prevents: a message_count that does not match the entries (and any updated_at) taken as given.
    doc = document()
    doc["meta"].update(message_count=41, updated_at=9_999_999)
    doc["entries"].append({"kind": "custom", "id": "c_1", "parent_id": "e_2", "timestamp": 1_500, "revision": 0,
                           "custom_type": "note", "data": None})
    code, answer = import_lines(capsys, tmp_path, line(doc))
    assert code == 0 and answer["entries"] == 3
    back = stored(tmp_path)[SID]
    assert back["meta"]["message_count"] == 2  # the messages among the entries, on every branch
    assert back["meta"]["updated_at"] == 2_000  # the newest entry, as appends leave it
    assert back["meta"]["metadata"] == {"owner": "u1"} and back["leaf"] == "e_2"
    assert sorted(e["id"] for e in back["entries"]) == ["c_1", "e_1", "e_2"]


def test_import_refuses_ids_the_api_refuses(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Prevents: an empty session id (no API call can name it: the session was written and unreachable)
    # or an empty entry id imported.
    no_session_id = document("")
    assert "meta.session_id: String should have at least 1 character" in refused(capsys, tmp_path,
                                                                                 line(no_session_id))
    no_entry_id = document(entries=[entry("", None)], leaf=None)
    assert f"line 2 (session {SID}): entries[0].id:" in refused(capsys, tmp_path, line(no_entry_id))


def test_import_refused_by_the_store_after_a_session_was_written_leaves_nothing(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Prevents: an attachment id the fs store cannot name a file after (the API never lets a
    # caller choose one) refused after its session's entries were committed: the import exited 1
    # with session/storage naming no line, and the refused session (and the file's earlier ones)
    # stayed written, without that attachment.
    data = b"bytes"
    too_long = document(attachments=[attachment(data, attachment_id="a" * 300)])
    message = refused(capsys, tmp_path, line(too_long))
    assert message.startswith(f"line 2 (session {SID}): attachment_id is too long")
    assert "nothing was imported" in message
    assert [p for p in (tmp_path / "d").rglob("*") if p.is_file() and "attachments" in p.parts] == []


def test_import_of_a_session_id_the_store_cannot_hold_names_the_line(capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path) -> None:
    # Prevents: an id too long for the data_dir's file names (the API answers invalid_request)
    # answered session/storage with no line or session named.
    message = refused(capsys, tmp_path, line(document("s" * 300)))
    assert message.startswith("line 2 (session sss") and "session_id is too long" in message
