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


class StoreError(Exception):
    """A storage adapter failure; surfaces to callers as ``session/storage``."""


class UnstorableValue(StoreError):
    """The value cannot be stored at all (e.g. text with an unpaired UTF-16
    surrogate, which has no UTF-8 form); surfaces as ``session/invalid_request``."""


def not_found(session_id: str) -> SessionError:
    return SessionError(NOT_FOUND, f"session {session_id} does not exist")


def entry_not_found(session_id: str, entry_id: str) -> SessionError:
    return SessionError(ENTRY_NOT_FOUND, f"entry {entry_id} does not exist in session {session_id}")


def invalid_request(detail: str) -> SessionError:
    return SessionError(INVALID_REQUEST, detail)
