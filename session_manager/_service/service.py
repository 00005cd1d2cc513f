"""The session store's domain: :class:`SessionService`, assembled from its capabilities.

Every public method takes a validated request model and returns
``(response, events)``: the JSON-compatible response and the events the host
must deliver once the call has returned. Nothing here emits, and nothing
here knows whether the store is local or remote. Each capability lives in a
module of its own; :mod:`.core` holds what they share (state, the
per-session mutation entry point).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .appending import Appending
from .attachments import Attachments
from .branching import Branching
from .core import Result
from .erasure import Erasure
from .listing import Listing
from .reads import Reads
from .storage_errors import storage_errors
from .tail import Tail

__all__ = ["Result", "ServiceMethod", "SessionService", "storage_errors"]


class SessionService(Erasure, Listing, Appending, Reads, Tail, Branching, Attachments):
    """The session store's domain: the session functions over a :class:`~session_manager.store.SessionStore`."""


ServiceMethod = Callable[[SessionService, Any], Result]
