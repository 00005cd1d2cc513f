"""A postgres call whose commit answer is lost and whose database then stays unreachable past the
call's deadline (the commit left in doubt) fails its store call the same way on every path: the
one-statement commit (``sm_apply`` / ``sm_append_at``, the optimistic path) and a transaction's
``COMMIT`` (the transactional path) both raise ``session/storage`` from ``run_call``, saying the
write may have landed (docs/postgres-faults.md, "No commit left in doubt"). The one-statement
commit raised the settlement's ``Unavailable`` instead (the hosts answered both
``session/storage``; a caller of the store's ``run_call`` saw two kinds)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import session_manager
from session_manager._wire import api
from session_manager.errors import SessionError
from tests import pg_support
from tests.pg_relay import Relay
from tests.pg_support import text

pytestmark = pytest.mark.postgres


class SilentOnceCut(Relay):
    """A relay that goes silent as it cuts a commit's connection: the commit reached the server
    (it committed, or not), and nothing reaches it any more, so it cannot be settled."""

    @property  # type: ignore[override]
    def cuts(self) -> int:
        return self._cuts

    @cuts.setter
    def cuts(self, n: int) -> None:  # (set under the relay's lock, as it cuts)
        self._cuts = n
        if n:
            self._silent = True


@pytest.fixture
def relay() -> Iterator[SilentOnceCut]:
    pg_support.require()
    r = SilentOnceCut()
    try:
        yield r
    finally:
        r.close()


@pytest.fixture
def sm(relay: SilentOnceCut) -> Iterator[session_manager.SessionManager]:
    from session_manager.store.postgres import PostgresSettings, PostgresStore

    name = f"smtest_leftovers_{uuid.uuid4().hex[:10]}"
    settings = PostgresSettings(dsn=relay.dsn(), schema=name, timeout_ms=1500, connect_timeout_ms=1000)
    try:
        with session_manager.open(store=PostgresStore(settings)) as opened:
            yield opened
    finally:
        pg_support.drop_schema(name)


@pytest.mark.parametrize("path", ["one statement", "transaction"])
def test_a_commit_left_in_doubt_at_the_deadline_fails_run_call_with_session_storage(
        sm: session_manager.SessionManager, relay: SilentOnceCut, path: str) -> None:
    told: list[Any] = []
    sm.observe({"function_id": "session::on-message-added"}, told.append)  # (observed: sm_apply / sm_append_at)
    sid = sm.call("session::create", {"title": "t"})["session_id"]
    first = sm.call("session::append", {"session_id": sid, "message": text("one")})
    store, service = sm.service.store, sm.service
    if path == "one statement":
        relay.cut_at_commit("after", on=(b"sm_apply(", b"sm_append_at(", b"sm_append("))
        request: Any = api.AppendRequest.model_validate({"session_id": sid, "message": text("two")})
        call: Any = lambda: service.append(request)  # noqa: E731
    else:
        relay.cut_at_commit("after", on=(b"COMMIT",))
        request = api.ForkRequest.model_validate({"session_id": sid, "entry_id": first["entry_id"]})
        call = lambda: service.fork(request)  # noqa: E731
    with pytest.raises(Exception) as failed:
        store.run_call(call)
    assert relay.cuts == 1, "the relay never saw the commit: the test proved nothing"
    assert isinstance(failed.value, SessionError), repr(failed.value)
    assert failed.value.code == "session/storage"
    assert "may have landed" in str(failed.value)
    assert len(told) == 1  # (nothing fired for the call in doubt: only the first append's event)
    relay.silence(False)
    # It did land (cut after the server had it): the one case a landed write answers session/storage.
    if path == "one statement":
        said = [m["message"]["content"][0]["text"]
                for m in sm.call("session::messages", {"session_id": sid})["messages"]]
        assert said == ["one", "two"]
    else:
        assert len(sm.call("session::list", {})["sessions"]) == 2
