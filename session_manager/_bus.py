"""The seam to iii: the calls this package makes on an engine, and how their
failures are read.

:class:`Bus` is the part of an iii client the hosts, the configuration
client and the bridge use; the SDK wrapper
(:class:`session_manager._worker.sdk.SdkBus`) and the test double
(:class:`session_manager.testing.FakeEngine`) both implement it.

:func:`classify` is the one place that reads an engine error's text: a
remote handler's :class:`~session_manager.errors.SessionError` crosses the
bus as an SDK invocation error whose message starts with its ``session/*``
code. Everything else matches the typed errors it returns.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol

from .errors import NotFound, RemoteError, StoreError, Unavailable

# The key engines add to object payloads, naming the calling worker; handlers drop it.
CALLER_KEY = "_caller_worker_id"


def strip_caller(payload: Any) -> Any:
    """The payload without the engine-injected ``_caller_worker_id``."""
    if isinstance(payload, dict) and CALLER_KEY in payload:
        return {k: v for k, v in payload.items() if k != CALLER_KEY}
    return payload


class ObserverHandle(Protocol):
    """What ``observe`` returns: wait for the engine's confirmation, stop."""

    def ready(self, timeout: float | None = None) -> Any: ...

    def dispose(self) -> Any: ...


class Bus(Protocol):
    """The calls made on an iii engine (``iii.iii.III`` has them all)."""

    def trigger(self, request: dict[str, Any]) -> Any:
        """Call a function: ``{function_id, payload, timeout_ms?, action?}``."""

    def register_function(
        self,
        function_id: str,
        handler: Callable[..., Any],
        *,
        description: str | None = None,
        metadata: dict[str, Any] | None = None,
        request_format: dict[str, Any] | None = None,
        response_format: dict[str, Any] | None = None,
        observe: Any = None,
    ) -> Any: ...

    def observe(self, source: dict[str, Any], target: str) -> ObserverHandle: ...

    def add_connection_state_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Calls ``listener`` with the current state now and on every change;
        returns the unsubscribe function."""

    def shutdown(self) -> None:
        """Disconnect for good (a second call does nothing)."""


# --------------------------------------------------------------------------
# Failures
# --------------------------------------------------------------------------

# Engine codes meaning "nothing answered": no worker serves the function (a
# required worker not started yet), the call timed out, or a link went down.
_UNAVAILABLE = frozenset({"function_not_found", "timeout", "shutdown", "invocation_stopped"})
# A remote SessionError's message: "session/<code>: <detail>".
_SESSION_CODE = re.compile(r"(session/[a-z_]+):")


def _invocation_error(error: BaseException) -> Any:
    """``error`` if it is the SDK's ``InvocationError``, else ``None``. The SDK
    is imported here, on first use: ``import session_manager`` (the embedded
    host, the stores) must not pay for it."""
    from iii import InvocationError

    return error if isinstance(error, InvocationError) else None


def remote_session_code(error: BaseException) -> str | None:
    """The ``session/*`` code a remote handler's failure carries, if any."""
    invocation = _invocation_error(error)
    if invocation is None:
        return None
    found = _SESSION_CODE.match(str(invocation.message))
    return found.group(1) if found else None


def classify(error: BaseException, context: str | None = None) -> StoreError:
    """The typed form of a failed engine call (``context`` prefixes the message).

    An answer that something does not exist (``session/not_found``, the
    configuration worker's ``NOT_FOUND``) is :class:`NotFound`; an engine that
    did not deliver the call is :class:`Unavailable`; any other error answer
    is :class:`RemoteError`. A transport failure (not an SDK invocation error)
    is :class:`Unavailable`; a :class:`StoreError` passes through.
    """
    if isinstance(error, StoreError):
        return error
    message = f"{context}: {error}" if context else str(error)
    invocation = _invocation_error(error)
    if invocation is None:
        return Unavailable(message)
    code = str(invocation.code)
    session_code = remote_session_code(error)
    if session_code == "session/not_found" or code.lower() == "not_found":
        return NotFound(message, code=session_code or code)
    if code.lower() in _UNAVAILABLE:
        return Unavailable(message, code=code)
    return RemoteError(message, code=session_code or code)


def call(bus: Bus, function_id: str, payload: dict[str, Any], timeout_ms: int, *, context: str | None = None) -> Any:
    """Call a function and wait for its answer; failures as :func:`classify` types."""
    try:
        return bus.trigger({"function_id": function_id, "payload": payload, "timeout_ms": timeout_ms})
    except Exception as e:
        raise classify(e, context) from e
