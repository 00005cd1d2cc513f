"""Steps for the attachment and draft features: the files on disk.

The generic steps drive the calls; these look at what the fs store left
under ``<data_dir>/attachments/<encoded_session_id>/`` and fake the states a
crash can leave there (bytes without metadata, a leftover temp file), or make
the next metadata write fail inside the running store.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_bdd import given, parsers, then, when

from session_manager.store.fs import FsStore
from session_manager.store.fs._encoding import encode_id
from tests.steps.common import World, same


def attachments_root(world: World) -> Path:
    return world.data_dir / "attachments"


def attachment_folder(world: World, session_id: str) -> Path:
    return attachments_root(world) / encode_id(session_id)


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# -- disk ------------------------------------------------------------------------


@then(parsers.parse('the attachment folder of session "{sid}" holds the files:'))
def _folder_files(world: World, sid: str, docstring: str) -> None:
    folder = attachment_folder(world, sid)
    assert folder.is_dir(), f"no attachment folder {folder}"
    assert _names(folder) == sorted(json.loads(docstring))


@then(parsers.parse('the attachment folder of session "{sid}" does not exist'))
def _folder_gone(world: World, sid: str) -> None:
    assert not attachment_folder(world, sid).exists()


@then("the attachments root holds the folders:")
def _root_folders(world: World, docstring: str) -> None:
    root = attachments_root(world)
    found = _names(root) if root.is_dir() else []
    assert found == sorted(json.loads(docstring))


@then(parsers.parse('the attachment file "{name}" of session "{sid}" holds the base64 bytes "{b64}"'))
def _file_bytes(world: World, name: str, sid: str, b64: str) -> None:
    assert (attachment_folder(world, sid) / name).read_bytes() == base64.b64decode(b64)


@then(parsers.parse('the attachment file "{name}" of session "{sid}" is empty'))
def _file_empty(world: World, name: str, sid: str) -> None:
    assert (attachment_folder(world, sid) / name).read_bytes() == b""


@then(parsers.parse('the attachment file "{name}" of session "{sid}" holds the JSON:'))
def _file_json(world: World, name: str, sid: str, docstring: str) -> None:
    raw = (attachment_folder(world, sid) / name).read_bytes()
    same(json.loads(raw), world.substitute(docstring))


# -- crashes ---------------------------------------------------------------------


def _crash_leftovers(world: World, sid: str, files: dict[str, bytes]) -> None:
    """Write what an interrupted upload leaves behind, as a killed process
    would: no cleanup ran, nothing was renamed into place."""
    folder = attachment_folder(world, sid)
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)


def _meta_record(aid: str, sid: str, data: bytes) -> bytes:
    meta = {
        "attachment_id": aid,
        "session_id": sid,
        "name": "lost.bin",
        "mime": "application/octet-stream",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "created_at": 1000000,
    }
    return json.dumps(meta, separators=(",", ":")).encode("utf-8")


@given(parsers.parse('a crash left the bytes of attachment "{aid}" of session "{sid}" without metadata'))
@when(parsers.parse('a crash left the bytes of attachment "{aid}" of session "{sid}" without metadata'))
def _crash_after_bytes(world: World, aid: str, sid: str) -> None:
    # The bytes were renamed into place; the metadata temp file was cut short
    # and never renamed.
    data = b"hello"
    stem = encode_id(aid)
    half = _meta_record(aid, sid, data)[:40]
    _crash_leftovers(world, sid, {f"{stem}.bin": data, f"{stem}.json.tmp": half})


@given(parsers.parse('a crash left a half-written bytes file for attachment "{aid}" of session "{sid}"'))
@when(parsers.parse('a crash left a half-written bytes file for attachment "{aid}" of session "{sid}"'))
def _crash_during_bytes(world: World, aid: str, sid: str) -> None:
    _crash_leftovers(world, sid, {f"{encode_id(aid)}.bin.tmp": b"hel"})


@given("the next attachment metadata write fails")
@when("the next attachment metadata write fails")
def _fail_next_meta_write(world: World) -> None:
    assert world.sm is not None
    store = world.sm.service.store
    assert isinstance(store, FsStore)
    real = store._write_atomically
    armed = [True]

    def failing(path: Path, chunks: Iterable[bytes]) -> Any:
        # Only the metadata file fails, after the bytes file is in place: the
        # window between the two renames. A restart installs a fresh store.
        if armed[0] and path.name.endswith(".json"):
            armed[0] = False
            raise OSError(errno.EIO, "injected metadata write failure", str(path))
        return real(path, chunks)

    store._write_atomically = failing  # type: ignore[method-assign]
