"""session-manager: a durable, reactive, branching store of typed chat entries.

Embedded use::

    import session_manager

    with session_manager.open("./data/sessions") as sm:
        created = sm.call("session::create", {"title": "Weather"})
        ...

What ``__all__`` lists is the public API; so are the modules
:mod:`session_manager.errors`, :mod:`~session_manager.clock`,
:mod:`~session_manager.ids`, :mod:`~session_manager.store`,
:mod:`~session_manager.testing`, :mod:`~session_manager.types`,
:mod:`~session_manager.messages`, :mod:`~session_manager.aio` and
:mod:`~session_manager.adapters`. Modules and packages whose names start
with ``_`` are implementation and may change in any release.
"""

from typing import TYPE_CHECKING, Any

from ._hosts.embedded import Observation, SessionManager, open
from ._service.service import SessionService
from ._version import __version__
from ._wire.events import (
    EVENT_FUNCTIONS,
    ON_CREATED,
    ON_DELETED,
    ON_MESSAGE_ADDED,
    ON_MESSAGE_UPDATED,
    ON_META_UPDATED,
    ON_STATUS_CHANGED,
    Event,
)
from .clock import Clock, ManualClock, SystemClock
from .errors import SessionError
from .ids import IdGen, SequentialIds, UuidIds
from .store import Commit, EntryPath, FsStore, MemoryStore, SessionStore

if TYPE_CHECKING:
    from .store import BridgeStore


def __getattr__(name: str) -> Any:
    # BridgeStore loads on first use (see session_manager.store).
    if name == "BridgeStore":
        from .store.bridge import BridgeStore

        return BridgeStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "EVENT_FUNCTIONS",
    "ON_CREATED",
    "ON_DELETED",
    "ON_MESSAGE_ADDED",
    "ON_MESSAGE_UPDATED",
    "ON_META_UPDATED",
    "ON_STATUS_CHANGED",
    "BridgeStore",
    "Clock",
    "Commit",
    "EntryPath",
    "Event",
    "FsStore",
    "IdGen",
    "ManualClock",
    "MemoryStore",
    "Observation",
    "SequentialIds",
    "SessionError",
    "SessionManager",
    "SessionService",
    "SessionStore",
    "SystemClock",
    "UuidIds",
    "__version__",
    "open",
]
