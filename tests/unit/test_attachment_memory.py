"""put-attachment streams: decode, hash and write hold one chunk at a time.

A 40 MiB upload goes through the public entry point (parse, validate, store)
into the fs store. tracemalloc starts after the base64 string exists, so the
peak it reports is what the call allocated on top of its input; holding the
decoded bytes even once would put that peak above 40 MiB. The assertion is on
memory only; nothing here measures time.
"""

from __future__ import annotations

import base64
import gc
import hashlib
import os
import tracemalloc
from pathlib import Path

import session_manager
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from session_manager.store.fs import FsStore

SIZE = 40 * 1024 * 1024
# Well below the decoded size: a whole decoded copy (or a joined bytes object)
# could never fit, while chunk buffers and bookkeeping easily do.
BUDGET = SIZE // 4


def test_a_large_upload_is_decoded_hashed_and_written_in_one_streaming_pass(tmp_path: Path) -> None:
    # Prevents: put-attachment materializing the decoded upload (or a second copy) in memory.
    raw = os.urandom(SIZE)
    expected_sha = hashlib.sha256(raw).hexdigest()
    payload = {
        "session_id": "s_001",
        "name": "big.bin",
        "mime": "application/octet-stream",
        "data": base64.b64encode(raw).decode("ascii"),
    }
    del raw  # only the base64 input stays alive, as it would for a caller
    with session_manager.open(tmp_path / "data", ids=SequentialIds(), clock=ManualClock(1_000_000)) as sm:
        sm.call("session::create", {})
        gc.collect()
        tracemalloc.start()
        try:
            result = sm.call("session::put-attachment", payload)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        print(f"\nput-attachment of {SIZE} decoded bytes ({len(payload['data'])} base64 chars): "
              f"extra peak {peak} bytes ({peak / SIZE:.2%} of the decoded size)")
        assert peak < BUDGET, f"extra peak {peak} bytes for a {SIZE}-byte upload"

        assert result["attachment"]["size"] == SIZE
        assert result["attachment"]["sha256"] == expected_sha
        store = sm.service.store
        assert isinstance(store, FsStore)
        bin_path = store.attachments_dir("s_001") / "a_001.bin"
        assert bin_path.stat().st_size == SIZE
        digest = hashlib.sha256()
        with bin_path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        assert digest.hexdigest() == expected_sha
        listed = sm.call("session::list-attachments", {"session_id": "s_001"})["attachments"]
        assert [(m["attachment_id"], m["size"]) for m in listed] == [("a_001", SIZE)]


def test_a_large_invalid_upload_is_refused_without_copying_it(tmp_path: Path) -> None:
    # Prevents: validation of a bad upload decoding (and holding) it before refusing it, or writing any of it.
    good = base64.b64encode(os.urandom(SIZE)).decode("ascii")
    bad = good[:-8] + "!!!!" + good[-4:]  # a stray character near the end
    del good
    with session_manager.open(tmp_path / "data", ids=SequentialIds(), clock=ManualClock(1_000_000)) as sm:
        sm.call("session::create", {})
        payload = {"session_id": "s_001", "name": "bad.bin", "mime": "", "data": bad}
        gc.collect()
        tracemalloc.start()
        try:
            try:
                sm.call("session::put-attachment", payload)
            except session_manager.SessionError as e:
                error = e
            else:
                raise AssertionError("a bad upload was accepted")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        print(f"\nrefusing a {len(bad)}-char invalid upload: extra peak {peak} bytes")
        assert error.code == "session/invalid_request"
        assert peak < BUDGET
        assert not (tmp_path / "data" / "attachments").exists()
