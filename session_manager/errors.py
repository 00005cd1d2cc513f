"""The error contract: every failure carries a stable ``session/*`` code.

Callers match on the code, never on the prose, so the code is always the
first thing in the message (``"session/not_found: session s_1 does not
exist"``), exactly as the bus carries it.
"""

from __future__ import annotations

NOT_FOUND = "session/not_found"
ENTRY_NOT_FOUND = "session/entry_not_found"
PARENT_NOT_FOUND = "session/parent_not_found"
INVALID_ENTRY_KIND = "session/invalid_entry_kind"
DETAILS_NOT_SUPPORTED = "session/details_not_supported"
EMPTY_BATCH = "session/empty_batch"
INVALID_CURSOR = "session/invalid_cursor"
INVALID_REQUEST = "session/invalid_request"
STORAGE = "session/storage"
ATTACHMENT_TOO_LARGE = "session/attachment_too_large"
ATTACHMENT_IN_USE = "session/attachment_in_use"

CODES: frozenset[str] = frozenset(
    {
        NOT_FOUND,
        ENTRY_NOT_FOUND,
        PARENT_NOT_FOUND,
        INVALID_ENTRY_KIND,
        DETAILS_NOT_SUPPORTED,
        EMPTY_BATCH,
        INVALID_CURSOR,
        INVALID_REQUEST,
        STORAGE,
        ATTACHMENT_TOO_LARGE,
        ATTACHMENT_IN_USE,
    }
)


class SessionError(Exception):
    """A failed session function call.

    ``code`` is one of the stable ``session/*`` codes; ``str(error)`` is
    ``"<code>: <detail>"``, the text the bus carries.
    """

    def __init__(self, code: str, detail: str) -> None:
        if code not in CODES:
            raise ValueError(f"unknown session error code {code!r}")
        self.code = code
        self.detail = detail
        super().__init__(f"{code}: {detail}")

    @property
    def message(self) -> str:
        return str(self)

    def __reduce__(self) -> tuple[type[SessionError], tuple[str, str]]:
        return (SessionError, (self.code, self.detail))


# --------------------------------------------------------------------------
# Failures below the domain: storage and the engine
# --------------------------------------------------------------------------
#
# Stores and the engine edge raise these; the service maps them once
# (``UnstorableValue`` -> ``session/invalid_request``, any other
# ``StoreError`` -> ``session/storage``). Retries and the bridge match on
# these types, never on message text; the one place that reads an engine
# error's text is :func:`session_manager._bus.classify`.


class StoreError(Exception):
    """A storage or engine failure; surfaces to callers as ``session/storage``.

    ``code`` is the engine's or the remote ``session/*`` code when the failure
    came over the bus, else ``None``.
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class Unavailable(StoreError):
    """Nothing answered: unreachable, timed out, shut down, or no worker serves
    the function (yet). Retrying may succeed."""


class Vanished(StoreError):
    """The session was deleted while a call was reading it (its log is gone):
    the caller hears ``session/not_found``, as if the read came after the delete."""

    def __init__(self, session_id: str, message: str) -> None:
        super().__init__(message)
        self.session_id = session_id


class NotFound(StoreError):
    """The other side answered that what was asked for does not exist (a
    session the main does not hold, a configuration entry nothing stored).
    An answer, not a fault: retrying returns the same."""


class Conflict(StoreError):
    """A conditional write lost a race: the state it was computed from has
    changed (the expected-leaf / compare-and-set seam of the storage
    interface). Re-reading and recomputing may succeed."""


class RemoteError(StoreError):
    """The other side answered with an error that is none of the above (its
    handler failed); ``code`` says which."""


class UnstorableValue(StoreError):
    """The value cannot be stored at all (e.g. text with an unpaired UTF-16
    surrogate, which has no UTF-8 form); surfaces as ``session/invalid_request``."""


def not_found(session_id: str) -> SessionError:
    return SessionError(NOT_FOUND, f"session {session_id} does not exist")


def entry_not_found(session_id: str, entry_id: str) -> SessionError:
    return SessionError(ENTRY_NOT_FOUND, f"entry {entry_id} does not exist in session {session_id}")


def invalid_request(detail: str) -> SessionError:
    return SessionError(INVALID_REQUEST, detail)


class LimitWarning(UserWarning):
    """A typed call asked for a page larger than ``max_list_limit``: the page
    holds at most that many; page on with ``next_cursor`` (or ``sm.transcript``)."""
