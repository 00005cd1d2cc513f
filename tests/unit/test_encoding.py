"""File-name encoding of caller-chosen ids, byte-compatible with the reference.

The reference passes ``[A-Za-z0-9._-]`` through and writes every other UTF-8
byte as ``%XX`` in upper-case hex; both workers must name a session's file
identically so a data_dir moves between them.
"""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_manager.errors import UnstorableValue
from session_manager.store import FsStore
from session_manager.store.fs._encoding import decode_id, encode_id

SAFE = set(string.ascii_letters + string.digits + "._-")
ENCODED = re.compile(r"(?:[A-Za-z0-9._-]|%[0-9A-F]{2})*")

# Any text a caller can send as an id, except lone surrogates (they have no UTF-8 form).
ids = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ("s_abc-123.x", "s_abc-123.x"),
        ("", ""),
        ("../escape/chat 42:?", "..%2Fescape%2Fchat%2042%3A%3F"),
        ("a\\b", "a%5Cb"),
        ("nul\x00", "nul%00"),
        ("100%", "100%25"),
        ("a~b+c", "a%7Eb%2Bc"),
        ("é", "%C3%A9"),
        ("日本", "%E6%97%A5%E6%9C%AC"),
        ("😀", "%F0%9F%98%80"),
        ("\x7f", "%7F"),
    ],
)
def test_known_encodings(value: str, encoded: str) -> None:
    # Prevents: a file name differing from the reference's for the same id.
    assert encode_id(value) == encoded
    assert decode_id(encoded) == value


@pytest.mark.parametrize("code", range(128))
def test_every_ascii_byte(code: int) -> None:
    # Prevents: the safe set drifting (one extra pass-through char renames files).
    char = chr(code)
    expected = char if char in SAFE else f"%{code:02X}"
    assert encode_id(char) == expected
    assert decode_id(expected) == char


@pytest.mark.parametrize(
    "stem",
    ["%", "%4", "a%", "%ZZ", "%G0", "%0G", "% 1", "%1 ", "%-1", "%C3", "%FF", "%C3%28", "%ED%A0%80", "x%e"],
)
def test_malformed_escapes_decode_to_none(stem: str) -> None:
    # Prevents: a stray file name being read as a mangled session id.
    assert decode_id(stem) is None


@given(ids)
def test_round_trip(value: str) -> None:
    # Prevents: an id that reads back differently after a restart.
    encoded = encode_id(value)
    assert decode_id(encoded) == value
    assert ENCODED.fullmatch(encoded)
    assert "/" not in encoded and "\\" not in encoded and "\x00" not in encoded


@given(st.text(alphabet=st.sampled_from(sorted(SAFE)), max_size=20))
def test_safe_text_is_unchanged(value: str) -> None:
    # Prevents: ordinary generated ids (s_<hex>) getting escaped names.
    assert encode_id(value) == value


@pytest.fixture(scope="module")
def fs_store(tmp_path_factory: pytest.TempPathFactory) -> FsStore:
    return FsStore(tmp_path_factory.mktemp("encoding"))


@given(value=ids)
def test_file_path_stays_in_data_dir(fs_store: FsStore, value: str) -> None:
    # Prevents: path traversal through a caller-chosen session id, and an id too long for a
    # file name reaching the file system (it is the caller's error, stating the limit).
    if len(encode_id(value)) > fs_store.stem_limit:
        with pytest.raises(UnstorableValue, match="session_id is too long"):
            fs_store.file_path(value)
        return
    path: Path = fs_store.file_path(value)
    assert path.resolve().parent == fs_store.dir.resolve()
    assert path.name == encode_id(value) + ".jsonl"


@given(value=ids.filter(bool))  # the API refuses an empty session id
def test_attachment_folder_is_a_child_of_attachments(fs_store: FsStore, value: str) -> None:
    # Prevents: deleting session ".." (or ".") removing data_dir (or every attachment).
    if len(encode_id(value)) > fs_store.stem_limit:
        return  # refused before any path is made (test_file_path_stays_in_data_dir)
    folder = fs_store.attachments_dir(value)
    assert folder.resolve().parent == (fs_store.dir / "attachments").resolve()
    meta_path, bin_path = fs_store._attachment_paths(value, value)
    assert meta_path.resolve().parent == bin_path.resolve().parent == folder.resolve()


@pytest.mark.parametrize(("value", "folder"), [(".", "%2E"), ("..", "%2E%2E"), ("...", "..."), ("a.", "a.")])
def test_dot_session_ids_get_their_own_attachment_folder(fs_store: FsStore, value: str, folder: str) -> None:
    # Prevents: the one place a pass-through name would be a path alias.
    assert fs_store.attachments_dir(value) == fs_store.dir / "attachments" / folder
    assert decode_id(folder) == value
