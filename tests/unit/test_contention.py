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
