"""The session store's domain: :class:`SessionService`, one core and the capabilities over it.

Every public method takes a validated request model and returns
``(response, events)``: the JSON-compatible response and the events the host
must deliver once the call has returned. Nothing here emits, and nothing
here knows whether the store is local or remote.

The shape: :class:`~.core.ServiceCore` holds the state (store, ids, clock,
limits, counters, the per-session locks) and the mutation entry point; each
capability is a module of functions taking that core first
(:mod:`.lifecycle`, :mod:`.erasure`, :mod:`.listing`, :mod:`.appending`,
:mod:`.message_reads`, :mod:`.tail`, :mod:`.branching`, :mod:`.attachments`,
:mod:`.search`). :class:`SessionService` holds one core and forwards each
method to its function, so a reader finds a function's code one hop from here
and the hosts' table (``_hosts/surface.py``) names methods of this class.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from typing import Any

from .._wire import api, search_api
from .._wire import events as ev
from ..clock import Clock
from ..errors import Conflict
from ..ids import IdGen
from ..store.base import Meta, SessionStore
from . import appending, attachments, branching, erasure, lifecycle, listing, message_reads, search, tail
from .contention import retry_after
from .core import Result, ServiceCore
from .erasure import Selection
from .limits import LimitsCell
from .stats import Stats
from .storage_errors import storage_errors

__all__ = ["Result", "ServiceMethod", "SessionService", "storage_errors"]

Events = list[ev.Event]


class SessionService:
    """The session store's domain: the session functions over a :class:`~session_manager.store.SessionStore`."""

    __slots__ = ("core",)

    def __init__(self, store: SessionStore, *, ids: IdGen | None = None, clock: Clock | None = None,
                 limits: LimitsCell | None = None, stats: Stats | None = None) -> None:
        self.core = ServiceCore(store, ids=ids, clock=clock, limits=limits, stats=stats)

    # -- what the hosts read of the core ---------------------------------------

    @property
    def store(self) -> SessionStore:
        return self.core.store

    @property
    def ids(self) -> IdGen:
        return self.core.ids

    @property
    def clock(self) -> Clock:
        return self.core.clock

    @property
    def limits(self) -> LimitsCell:
        return self.core.limits

    @property
    def stats(self) -> Stats:
        return self.core.stats

    def session_lock(self, session_id: str) -> threading.RLock:
        """The lock that serializes mutations of one session (the store protocol takes it too)."""
        return self.core.session_lock(session_id)

    # -- lifecycle ----------------------------------------------------------------

    def create(self, req: api.CreateRequest) -> Result:
        """``session::create``: a new session, status idle."""
        return lifecycle.create(self.core, req)

    def ensure(self, req: api.EnsureRequest) -> Result:
        """``session::ensure``: create under the caller's id unless it exists."""
        return lifecycle.ensure(self.core, req)

    def get(self, req: api.GetRequest) -> Result:
        """``session::get``: a session's meta, or ``None``."""
        return lifecycle.get(self.core, req)

    def set_meta(self, req: api.SetMetaRequest) -> Result:
        """``session::set-meta``: title, description and/or metadata, wholesale."""
        return lifecycle.set_meta(self.core, req)

    def set_status(self, req: api.SetStatusRequest) -> Result:
        """``session::set-status``: the coarse status and its reason."""
        return lifecycle.set_status(self.core, req)

    def set_draft(self, req: api.SetDraftRequest) -> Result:
        """``session::set-draft``: unsent composer input (no event, no ``updated_at`` bump)."""
        return lifecycle.set_draft(self.core, req)

    def delete(self, req: api.DeleteRequest) -> Result:
        """``session::delete``: one whole session."""
        return lifecycle.delete(self.core, req)

    def list_sessions(self, req: api.ListRequest) -> Result:
        """``session::list``: filtered by status and metadata subset, ordered, paged."""
        return listing.list_sessions(self.core, req)

    # -- deleting many ----------------------------------------------------------

    def purge(self, req: api.PurgeRequest) -> Result:
        """``session::purge``: whole sessions matching a metadata subset, a batch per call."""
        return erasure.purge(self.core, req)

    def delete_tree(self, req: api.DeleteTreeRequest) -> Result:
        """``session::delete-tree``: a session and its sub-agent sessions, children first."""
        return erasure.delete_tree(self.core, req)

    def idle(self, idle_days: int, statuses: Collection[str] | None,
             metadata: dict[str, Any] | None = None) -> Selection:
        """The sessions not updated for ``idle_days`` days (see :func:`.erasure.idle`)."""
        return erasure.idle(self.core, idle_days, statuses, metadata)

    def select(self, selection: Selection, count: int) -> list[Meta]:
        """Up to ``count`` sessions ``selection`` takes, oldest first; nothing deleted."""
        return erasure.select(self.core, selection, count)

    def erase_selected(self, selection: Selection, limit: int) -> tuple[list[str], Events, bool]:
        """Delete up to ``limit`` sessions ``selection`` takes: ids, events, whether more match."""
        return erasure.erase_selected(self.core, selection, limit)

    def expire(self, idle_days: int, statuses: Collection[str] | None, limit: int) -> tuple[list[str], Events, bool]:
        """One batch of the retention sweep (see :func:`.erasure.expire`)."""
        return erasure.expire(self.core, idle_days, statuses, limit)

    # -- writing entries ----------------------------------------------------------

    def append(self, req: api.AppendRequest) -> Result:
        """``session::append``: one message or custom entry, idempotent on ``entry_id``."""
        # (appending.append's first attempt made here, its retries after a conflict by the same
        # rule: one frame fewer on every append)
        core = self.core
        try:
            return appending._append(core, req)
        except Conflict as e:
            return retry_after(appending._append, core, req, e)

    def append_at(self, req: api.AppendRequest, at: appending.SessionAt) -> Result:
        """``session::append`` only while the session's ``(created_at, active leaf)``
        is ``at`` (:class:`~.appending.LeafMoved` otherwise, nothing written); not a
        surface function: the embedded host's, for an adapter's own writes."""
        return appending.append_at(self.core, (req, at))

    def append_custom_owned(self, req: appending.OwnedCustom) -> Result:
        """A custom entry this package's own code built (:func:`.appending.append_custom_owned`);
        not a surface function: the embedded host's typed path for an adapter's writes."""
        return appending.append_custom_owned(self.core, req)

    def append_many(self, req: api.AppendManyRequest) -> Result:
        """``session::append-many``: a chained batch of messages."""
        return appending.append_many(self.core, req)

    def update_message(self, req: api.UpdateMessageRequest) -> Result:
        """``session::update-message``: a streamed revision of a message."""
        return appending.update_message(self.core, req)

    # -- reading the transcript -------------------------------------------------

    def messages(self, req: api.MessagesRequest) -> Result:
        """``session::messages``: the active path (or root to an entry), oldest first, paged."""
        return message_reads.messages(self.core, req)

    def messages_range(self, req: api.MessagesRangeRequest) -> Result:
        """``session::messages-range``: whole entries of the active path, by span or ids."""
        return message_reads.messages_range(self.core, req)

    def get_message(self, req: api.GetMessageRequest) -> Result:
        """``session::get-message``: one entry, or ``None``."""
        return message_reads.get_message(self.core, req)

    def messages_tail(self, req: api.MessagesTailRequest) -> Result:
        """``session::messages-tail``: the newest page of the active path, in blocks."""
        return tail.messages_tail(self.core, req)

    # -- branching ----------------------------------------------------------------

    def fork(self, req: api.ForkRequest) -> Result:
        """``session::fork``: the root-to-entry path copied into a new session."""
        return branching.fork(self.core, req)

    def set_active_leaf(self, req: api.SetActiveLeafRequest) -> Result:
        """``session::set-active-leaf``: switch the active branch."""
        return branching.set_active_leaf(self.core, req)

    # -- attachments --------------------------------------------------------------

    def put_attachment(self, req: api.PutAttachmentRequest) -> Result:
        """``session::put-attachment``: store base64 data and return its file block."""
        return attachments.put_attachment(self.core, req)

    def get_attachment(self, req: api.GetAttachmentRequest) -> Result:
        """``session::get-attachment``: an attachment and its data, or ``None``."""
        return attachments.get_attachment(self.core, req)

    def list_attachments(self, req: api.ListAttachmentsRequest) -> Result:
        """``session::list-attachments``: a session's attachments, oldest first."""
        return attachments.list_attachments(self.core, req)

    def delete_attachment(self, req: api.DeleteAttachmentRequest) -> Result:
        """``session::delete-attachment``: remove one no entry references."""
        return attachments.delete_attachment(self.core, req)

    # -- search ---------------------------------------------------------------------

    def search(self, req: search_api.SearchRequest) -> Result:
        """``session::search``: ranked full-text hits over the sessions in scope."""
        return search.search(self.core, req)


ServiceMethod = Callable[[SessionService, Any], Result]
