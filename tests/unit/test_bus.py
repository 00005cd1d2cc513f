"""Reading engine failures: every SDK error becomes one typed error, once."""

from __future__ import annotations

import pytest
from iii import InvocationError

from session_manager import _bus as bus
from session_manager.errors import (
    NotFound,
    RemoteError,
    SessionError,
    StoreError,
    Unavailable,
    UnstorableValue,
    not_found,
)


@pytest.mark.parametrize(
    ("error", "kind", "code"),
    [
        (InvocationError("function_not_found", "Function configuration::get not found"), Unavailable,
         "function_not_found"),
        (InvocationError("TIMEOUT", "invocation timed out after 700ms"), Unavailable, "TIMEOUT"),
        (InvocationError("SHUTDOWN", "the client is shut down"), Unavailable, "SHUTDOWN"),
        (InvocationError("invocation_stopped", "Invocation stopped"), Unavailable, "invocation_stopped"),
        (InvocationError("NOT_FOUND", "configuration 'session-manager' not found"), NotFound, "NOT_FOUND"),
        (InvocationError("invocation_failed", str(not_found("s_1"))), NotFound, "session/not_found"),
        (InvocationError("invocation_failed", "session/parent_not_found: parent entry e_9 does not exist"),
         RemoteError, "session/parent_not_found"),
        (InvocationError("invocation_failed", "boom: a session/not_found mentioned later"), RemoteError,
         "invocation_failed"),
        (InvocationError("FORBIDDEN", "denied"), RemoteError, "FORBIDDEN"),
        (ConnectionError("refused"), Unavailable, None),
        (TimeoutError(), Unavailable, None),
    ],
)
def test_classify(error: BaseException, kind: type[StoreError], code: str | None) -> None:
    # Prevents: failures told apart by substring ("not_found" in "function_not_found").
    typed = bus.classify(error, "ctx")
    assert type(typed) is kind
    assert typed.code == code
    assert str(typed) == f"ctx: {error}"


def test_typed_errors_pass_through_and_session_errors_are_read_only_at_the_start() -> None:
    # Prevents: an already-typed error re-wrapped (and its type lost) on its way up.
    unstorable = UnstorableValue("surrogate")
    assert bus.classify(unstorable) is unstorable
    assert bus.remote_session_code(InvocationError("invocation_failed", "session/storage: disk full")) == \
        "session/storage"
    assert bus.remote_session_code(SessionError("session/storage", "disk full")) is None
    assert bus.remote_session_code(InvocationError("invocation_failed", "x session/storage: y")) is None


class _Failing:
    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.requests: list[dict[str, object]] = []

    def trigger(self, request: dict[str, object]) -> object:
        self.requests.append(request)
        raise self.error


def test_call_sends_one_request_and_raises_the_typed_error() -> None:
    # Prevents: the timeout dropped from the request, or the SDK error escaping untyped.
    failing = _Failing(InvocationError("TIMEOUT", "slow"))
    with pytest.raises(Unavailable, match=r"^bridge x failed: TIMEOUT: slow$") as raised:
        bus.call(failing, "x", {"a": 1}, 700, context="bridge x failed")  # type: ignore[arg-type]
    assert isinstance(raised.value.__cause__, InvocationError)
    assert failing.requests == [{"function_id": "x", "payload": {"a": 1}, "timeout_ms": 700}]
