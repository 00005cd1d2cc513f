"""session-manager: a durable, reactive, branching store of typed chat entries.

Embedded use::

    import session_manager

    with session_manager.open("./data/sessions") as sm:
        created = sm.call("session::create", {"title": "Weather"})
        ...
"""

from .embedded import Observation, SessionManager, open
from .errors import SessionError
from .events import EVENT_FUNCTIONS, Event
from .service import SessionService

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
