"""Storage failures as the bus reports them: the one mapping from the
:mod:`session_manager.errors` tree to ``session/*`` codes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import STORAGE, Conflict, SessionError, StoreError, UnstorableValue, invalid_request


@contextmanager
def storage_errors() -> Iterator[None]:
    """Store failures as the bus reports them: bad values are the caller's
    ``session/invalid_request``, everything else ``session/storage``."""
    try:
        yield
    except Conflict:
        raise  # re-decided by contention.retry_conflicts, which reports exhaustion as session/storage
    except UnstorableValue as e:
        raise invalid_request(str(e)) from None
    except StoreError as e:
        raise SessionError(STORAGE, str(e)) from None
    except OSError as e:
        raise SessionError(STORAGE, e.strerror or type(e).__name__) from None  # never the path
