"""Issue 25 item 1: the worker's bounded shutdown (``IIIHost.close``, the SIGTERM path) may stop
waiting to answer a call in flight, but never releases the data_dir's owner lock under it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from iii import InvocationError

import session_manager
from session_manager._worker.config_value import WorkerConfig, parse_config
from session_manager._worker.iii_host import IIIHost
from session_manager.clock import ManualClock
from session_manager.errors import STORAGE, SessionError
from session_manager.ids import SequentialIds
from session_manager.testing import FakeEngine
from tests.unit.test_embedded_lifetime import Gate


def fs_config(data_dir: Path) -> WorkerConfig:
    return parse_config({"adapter": {"name": "fs", "config": {"data_dir": str(data_dir)}}})


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 5}


def test_worker_shutdown_keeps_the_data_dir_locked_until_a_commit_in_flight_ends(tmp_path: Path) -> None:
    # Prevents: IIIHost.close() giving up after its timeout and closing the store under a commit
    # in flight: the owner lock went, a second owner opened the data_dir, then the stuck commit
    # finished, was acknowledged, and its entry appeared under the new owner.
    where = tmp_path / "data"
    fake = FakeEngine()
    host = IIIHost(fake, fs_config(where), ids=SequentialIds(), clock=ManualClock(1_000_000))
    host.register()
    sid = fake.invoke("session::create", {})["session_id"]
    slow = Gate(host.runtime.store)  # a real fs commit, held until released
    answers: list[Any] = []
    writer = threading.Thread(target=lambda: answers.append(
        fake.invoke("session::append", {"session_id": sid, "message": user("in flight")})))
    try:
        writer.start()
        assert slow.entered.wait(10)
        host.close(timeout_s=0.2)  # bounded: returns with the commit still held
        assert writer.is_alive() and not answers
        # The data_dir is still owned: a second writable owner is refused, naming the holder.
        with pytest.raises(SessionError) as refused:
            session_manager.open(where)
        assert refused.value.code == STORAGE
        # A call that starts now is refused before it writes anything.
        with pytest.raises(InvocationError) as late:
            fake.invoke("session::append", {"session_id": sid, "message": user("too late")})
        assert late.value.message.startswith("session/storage: ")
    finally:
        slow.release.set()
        writer.join(30)
    assert not writer.is_alive()
    assert [a["entry_id"] for a in answers] == ["e_001"]
    # Released once the commit ended: the next owner opens and finds the entry, and only it.
    with session_manager.open(where) as again:
        got = again.call("session::messages", {"session_id": sid})["messages"]
    assert got == [{"entry_id": "e_001", "message": user("in flight")}]


def test_worker_shutdown_with_nothing_in_flight_releases_the_data_dir_at_once(tmp_path: Path) -> None:
    # Prevents: the deferred release leaving an idle worker's data_dir locked after close().
    where = tmp_path / "data"
    fake = FakeEngine()
    host = IIIHost(fake, fs_config(where), ids=SequentialIds(), clock=ManualClock(1_000_000))
    host.register()
    sid = fake.invoke("session::create", {})["session_id"]
    host.close(timeout_s=0.2)
    host.close(timeout_s=0.2)  # a second close is harmless
    with session_manager.open(where) as again:
        assert again.call("session::get", {"session_id": sid})["meta"]["message_count"] == 0
