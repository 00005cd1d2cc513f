"""``durability`` (flush | fsync) as a top-level worker configuration field:
parsed strictly, in the registered schema, written only when not the
default, applied at boot and on a hot reload without rebuilding the store."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator

from session_manager._worker.config_client import Retry
from session_manager._worker.config_value import ConfigError, config_schema, parse_config
from session_manager._worker.iii_host import IIIHost, start
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from session_manager.store.fs import FsStore
from session_manager.testing import FakeEngine

NO_WAIT = Retry(attempts=3, delays=(0.0,), sleep=lambda s: None)


def fs(data_dir: Path, **extra: Any) -> dict[str, Any]:
    return {"adapter": {"name": "fs", "config": {"data_dir": str(data_dir)}}, **extra}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 5}


class FsyncCounter:
    """Counts real ``os.fsync`` calls on session logs (it still syncs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = os.fsync

        def counting(fd: int) -> None:
            self.count += 1
            real(fd)

        monkeypatch.setattr(os, "fsync", counting)


@pytest.fixture
def booted(tmp_path: Path) -> Iterator[tuple[FakeEngine, IIIHost]]:
    fake = FakeEngine()
    host = start(fake, fs(tmp_path / "d"), retry=NO_WAIT, ids=SequentialIds(), clock=ManualClock(1_000))
    host.reloader._retry = NO_WAIT
    yield fake, host
    host.close()


def test_value_and_schema() -> None:
    # Prevents: a console form and the parser disagreeing, or a typo running on the default.
    schema = Draft7Validator(config_schema())
    for good in ({"durability": "fsync"}, {"durability": "flush"}, {}):
        schema.validate(good)
        parse_config(good)
    for bad in ({"durability": "sync"}, {"durability": True}, {"durabilty": "fsync"}):
        assert not schema.is_valid(bad)
        with pytest.raises(ConfigError):
            parse_config(bad)
    assert parse_config({}).durability == "flush"


def test_written_only_when_not_the_default() -> None:
    # Prevents: every stored value carrying a key the Rust worker refuses, even when nobody chose fsync.
    assert "durability" not in parse_config({}).to_value()
    assert "durability" not in parse_config({"durability": "flush"}).to_value()
    assert parse_config({"durability": "fsync"}).to_value()["durability"] == "fsync"
    assert parse_config(parse_config({"durability": "fsync"}).to_value()).durability == "fsync"


def test_boot_with_fsync_syncs_every_append(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: `durability: fsync` in the worker configuration being accepted and then ignored.
    fake = FakeEngine()
    host = start(fake, fs(tmp_path / "d", durability="fsync"), retry=NO_WAIT, ids=SequentialIds(),
                 clock=ManualClock(1_000))
    try:
        store = host.runtime.store
        assert isinstance(store, FsStore) and store.durability == "fsync"
        sid = fake.invoke("session::create", {})["session_id"]
        counter = FsyncCounter(monkeypatch)
        fake.invoke("session::append", {"session_id": sid, "message": user("a")})
        fake.invoke("session::append", {"session_id": sid, "message": user("b")})
        assert counter.count >= 2
    finally:
        host.close()


def test_reload_switches_durability_without_a_rebuild(booted: tuple[FakeEngine, IIIHost], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # Prevents: a durability change needing a restart, or rebuilding (and replaying) the store to apply it.
    fake, host = booted
    sid = fake.invoke("session::create", {})["session_id"]
    store = host.runtime.store
    assert isinstance(store, FsStore) and store.durability == "flush"
    counter = FsyncCounter(monkeypatch)
    fake.invoke("session::append", {"session_id": sid, "message": user("flushed")})
    assert counter.count == 0

    fake.set_config(fs(tmp_path / "d", durability="fsync"))
    assert host.runtime.store is store and store.durability == "fsync"
    assert fake.invoke("session::config-status", {})["last_outcome"] == "applied"
    fake.invoke("session::append", {"session_id": sid, "message": user("synced")})
    assert counter.count >= 1

    synced = counter.count
    fake.set_config(fs(tmp_path / "d"))
    assert host.runtime.store is store and store.durability == "flush"
    fake.invoke("session::append", {"session_id": sid, "message": user("flushed again")})
    assert counter.count == synced

    # Every mode wrote the same format: a fresh store reads all three back.
    reread = FsStore(tmp_path / "d", read_only=True)  # the host still owns the data_dir
    texts = [m["message"]["content"][0]["text"] for m in reread.path(sid, reread.get_leaf(sid))]
    assert texts == ["flushed", "synced", "flushed again"]
