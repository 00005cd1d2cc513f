"""The service's bounded re-decision after compare-and-set conflicts
(:mod:`session_manager._service.contention`), independent of the adapter:
stale reads are forced, so every commit is refused."""

from __future__ import annotations

from typing import Any

import pytest

from session_manager._wire import api
from session_manager.errors import SessionError
from session_manager.store import MemoryStore
from session_manager.testing.contract_concurrency import Writers


def test_exhausted_retries_answer_session_storage_naming_contention() -> None:
    # Prevents: a writer that loses every race looping forever or answering a wrong code.
    store = MemoryStore()
    writers = Writers([store], lambda: store)
    writers.call(0, "ensure", api.EnsureRequest, {"session_id": "s"})
    service = writers.services[0]
    real = service.store.get_meta

    def always_stale(session_id: str) -> Any:
        meta = real(session_id)
        return {**meta, "title": "not what is stored"} if meta else meta

    service.store.get_meta = always_stale  # type: ignore[method-assign]
    with pytest.raises(SessionError) as err:
        writers.call(0, "set_meta", api.SetMetaRequest, {"session_id": "s", "title": "x"})
    del service.store.get_meta  # the store's own method again
    assert err.value.code == "session/storage" and "contention" in err.value.detail
    assert service.stats.get("cas_retries") == 20
    assert (writers.reader().get_meta("s") or {})["title"] == ""  # nothing written


@pytest.mark.parametrize("conflicts", [1, 19, 20])
def test_an_append_refused_n_times_is_decided_again_up_to_the_bound(conflicts: int) -> None:
    # Prevents: SessionService.append, which makes its first attempt itself (without the retry
    # wrapper's frame) and hands a conflict to contention.retry_after, counting attempts other
    # than the wrapper does: one retry too many or too few, a lost count, a write after giving up.
    from session_manager.errors import Conflict

    store = MemoryStore()
    writers = Writers([store], lambda: store)
    writers.call(0, "ensure", api.EnsureRequest, {"session_id": "s"})
    service = writers.services[0]
    real = service.store.commit
    refused: list[int] = []

    def refusing(session_id: str, commit: Any) -> Any:
        if len(refused) < conflicts:
            refused.append(1)
            raise Conflict("forced")
        return real(session_id, commit)

    service.store.commit = refusing  # type: ignore[method-assign]
    payload = {"session_id": "s", "message": {"role": "user", "content": [{"type": "text", "text": "hi"}],
                                              "timestamp": 1}}
    try:
        if conflicts < 20:
            response = writers.call(0, "append", api.AppendRequest, payload)
            assert response["parent_id"] is None
            assert (writers.reader().get_meta("s") or {})["message_count"] == 1
            assert writers.reader().get_leaf("s") == response["entry_id"]
        else:
            with pytest.raises(SessionError) as err:
                writers.call(0, "append", api.AppendRequest, payload)
            assert err.value.code == "session/storage" and "contention: 20 attempts" in err.value.detail
            assert (writers.reader().get_meta("s") or {})["message_count"] == 0  # nothing written
            assert writers.reader().get_leaf("s") is None
    finally:
        del service.store.commit
    assert len(refused) == conflicts and service.stats.get("cas_retries") == conflicts
