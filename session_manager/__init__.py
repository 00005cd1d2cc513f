"""session-manager: a durable, reactive, branching store of typed chat entries.

Embedded use, typed (``sm.call(function_id, payload)`` is the same in dicts)::

    import session_manager
    from session_manager.messages import assistant_message, user_message

    with session_manager.open("./data/sessions") as sm:  # or "sqlite:///sm.db", "postgresql://..."
        sid = sm.create(title="Weather").session_id
        sm.append(sid, message=user_message("Will it rain in Paris?"))
        sm.append(sid, message=assistant_message("Light rain tonight."))
        for item in sm.transcript(sid):  # every message of the active path, all pages
            print(item.message.role, item.message.text)

Every method: ``help(session_manager.SessionManager)``; building messages:
``help(session_manager.messages)``; the guides: the repository's ``docs/``
(``mkdocs serve``) and ``examples/``.

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
