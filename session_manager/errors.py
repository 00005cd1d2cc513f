"""Every exception the package raises, in one place.

The error contract: every failure of a session function carries a stable
``session/*`` code. Callers match on the code, never on the prose, so the
code is always the first thing in the message (``"session/not_found: session
s_1 does not exist"``), exactly as the bus carries it.

The tree (builtin bases in brackets)::

    Exception
    +-- SessionError              a failed session function call: ``code`` + ``detail``
    +-- StoreError                storage or engine failure -> ``session/storage``
    |   +-- Unavailable           nothing answered (retrying may succeed)
    |   |   +-- ConfigurationUnavailable   the configuration worker (fatal at boot)
    |   |   +-- BridgeUnavailable          a bridge's main
    |   +-- Vanished              the session was deleted under a read -> ``session/not_found``
    |   +-- NotFound              the other side has no such thing (an answer)
    |   +-- Conflict              a compare-and-set lost a race
    |   +-- RemoteError           the other side's handler failed
    |   +-- UnstorableValue       cannot be stored at all -> ``session/invalid_request``
    |   +-- ReadOnlyStore         a mutation of a store opened read-only
    |   +-- DataDirLocked         another owner holds the data_dir
    |   +-- DataDirLost           the data_dir is no longer the one this store locked
    |   +-- NotRegular            a file name that is not a regular file
    +-- [RuntimeError]
    |   +-- EventStreamOverflow   an async event stream's consumer fell too far behind
    |   +-- ConfigurationRefused  the configuration worker refused for good (never retried)
    |   +-- BuildError            a configuration that parses but cannot be built
    +-- [ValueError]
    |   +-- ConfigError           a configuration value that does not parse
    |   |   +-- SeedError         an operator's ``--config`` seed that cannot be used
    |   +-- ProviderError         a mention provider descriptor consumers would reject
    |   +-- BindRefused           a viewer bind it will not serve
    +-- UsageError                the data CLI's arguments cannot work (exit status 2)
    +-- DataDirError              a data_dir the data CLI cannot use
    Warning
    +-- [UserWarning]
        +-- LimitWarning          a typed call asked for a page over ``max_list_limit``

The modules that raised them first keep their names importable
(``session_manager.aio.EventStreamOverflow`` is this class).

Private control flow stays with the code it steers, never crossing a module
boundary as an error: ``_wire.dumping._Unusual`` and ``_wire.validation._NotJson``
(the slow path of an encoder), ``_service.admission.Unrepresentable`` and its
``TooDeep`` (a field JSON cannot carry, turned into ``session/invalid_request``
where it is caught), ``store.postgres.optimistic.Fallback`` and ``_Conflicted``
(the optimistic write's retry), ``store.bridge.store._NotServed`` (a Rust main
without the atomic calls).
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


def _encodable(text: str) -> str:
    """``text`` with each lone UTF-16 surrogate (a key or value the caller sent names one) as its
    ``\\uXXXX`` escape, so an error's text encodes as UTF-8 wherever it goes: a log line, a
    terminal, orjson, a wire frame (both encoders refused it: a traceback at the edge)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(f"\\u{ord(c):04x}" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


class SessionError(Exception):
    """A failed session function call.

    ``code`` is one of the stable ``session/*`` codes; ``str(error)`` is
    ``"<code>: <detail>"``, the text the bus carries.
    """

    def __init__(self, code: str, detail: str) -> None:
        if code not in CODES:
            raise ValueError(f"unknown session error code {code!r}")
        self.code = code
        if not detail.isascii():
            detail = _encodable(detail)
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


# --------------------------------------------------------------------------
# Storage adapters
# --------------------------------------------------------------------------


READ_ONLY_TEXT = "this store is open read-only"


class ReadOnlyStore(StoreError):
    """A mutation of a store opened read-only: every adapter's read-only mode
    (fs, sqlite, postgres) refuses each write with this one error and text,
    which the service answers as ``session/storage``."""

    def __init__(self, message: str = READ_ONLY_TEXT) -> None:
        super().__init__(message)


class DataDirLocked(StoreError):
    """Another owner holds the data_dir."""


class DataDirLost(StoreError):
    """The data_dir (or its lock file) is no longer the one this store locked."""


class NotRegular(StoreError):
    """A name that should be a regular file is something else (a FIFO, a
    directory, a symlink, a device)."""


# --------------------------------------------------------------------------
# Hosts: the async wrapper, the worker's configuration and bridge, mentions, the viewer, the CLI
# --------------------------------------------------------------------------


class EventStreamOverflow(RuntimeError):
    """The consumer fell more than ``max_queued`` events behind; the stream
    stopped (re-read state, then open a new stream)."""


class ConfigurationUnavailable(Unavailable):
    """The configuration worker could not be reached or answered with an error
    (after the retries): fatal at boot."""


class ConfigurationRefused(RuntimeError):
    """The configuration worker answered with a permanent error (a schema it
    rejects, invalid arguments, a value it cannot expand): never retried."""


class BuildError(RuntimeError):
    """A configuration that parses but cannot be turned into a runtime."""


class ConfigError(ValueError):
    """A configuration value that does not parse."""


class SeedError(ConfigError):
    """The operator's seed cannot be used and nothing is stored: fatal at boot."""


class BridgeUnavailable(Unavailable):
    """The main cannot be reached or does not serve the store protocol."""


class ProviderError(ValueError):
    """A descriptor that consumers would reject."""


class BindRefused(ValueError):
    """A bind the viewer will not serve (a non-loopback address without a token)."""


class UsageError(Exception):
    """The arguments cannot work (exit status 2): a malformed option value, a
    combination the command refuses, an unknown function, a target it does not take."""


class DataDirError(Exception):
    """A data_dir the command cannot use (missing, not a directory, held by a writer)."""


__all__ = [
    "ATTACHMENT_IN_USE",
    "ATTACHMENT_TOO_LARGE",
    "CODES",
    "DETAILS_NOT_SUPPORTED",
    "EMPTY_BATCH",
    "ENTRY_NOT_FOUND",
    "INVALID_CURSOR",
    "INVALID_ENTRY_KIND",
    "INVALID_REQUEST",
    "NOT_FOUND",
    "PARENT_NOT_FOUND",
    "STORAGE",
    "BindRefused",
    "BridgeUnavailable",
    "BuildError",
    "ConfigError",
    "ConfigurationRefused",
    "ConfigurationUnavailable",
    "Conflict",
    "DataDirError",
    "DataDirLocked",
    "DataDirLost",
    "EventStreamOverflow",
    "LimitWarning",
    "NotFound",
    "NotRegular",
    "ProviderError",
    "ReadOnlyStore",
    "RemoteError",
    "SeedError",
    "SessionError",
    "StoreError",
    "Unavailable",
    "UnstorableValue",
    "UsageError",
    "Vanished",
    "entry_not_found",
    "invalid_request",
    "not_found",
]
