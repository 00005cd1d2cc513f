"""session-manager: a durable, reactive, branching store of typed chat entries.

Embedded use::

    import session_manager

    with session_manager.open("./data/sessions") as sm:
        created = sm.call("session::create", {"title": "Weather"})
        ...
"""

from ._hosts.embedded import Observation, SessionManager, open
from ._service.service import SessionService
from ._wire.events import EVENT_FUNCTIONS, Event
from .errors import SessionError

__version__ = "1.1.1"

__all__ = [
    "EVENT_FUNCTIONS",
    "Event",
    "Observation",
    "SessionError",
    "SessionManager",
    "SessionService",
    "__version__",
    "open",
]
