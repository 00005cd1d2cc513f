"""The storage interface: dumb store-and-fetch, no domain rules.

One :meth:`SessionStore.commit` is one mutation and must be durable as a
whole once it returns: a crash may lose the commit in flight, never part of
an earlier one. Entries and metas are the JSON dicts of the wire contract;
callers never mutate what a store hands out and stores never mutate what
callers pass in after the call.

**Provisional.** This interface is public so adapters can be written
against it, but it is expected to grow in a minor release, in two known
ways: a per-mutation transaction hook, which the service enters around
each mutation's read-check-write (its one entry point is
``ServiceCore._session``), for stores that need one transaction per
mutation (a database); and a conditional commit that names the leaf it was
computed from, refused with :class:`~session_manager.errors.Conflict` when
another writer moved it (stores shared by several writers: bridges, several
instances on one database). Adapters written today should expect to follow.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ._core.append import UNSET, Unset, derive_append_meta
from .path import Entry as Entry
from .path import EntryPath
from .search_index import Matches, Ranked, SortKey, Stats, rank, scan
from .search_text import Query

if TYPE_CHECKING:
    from .._wire.events import Event

Meta = dict[str, Any]
AttachmentMeta = dict[str, Any]
EventSink = Callable[[list["Event"]], None]
R = TypeVar("R")
# No transaction (a store one process owns): one shared object, entered by every mutation.
NO_TRANSACTION: AbstractContextManager[None] = contextlib.nullcontext()


# Not frozen (treat it as immutable all the same: nothing assigns to one): a frozen
# dataclass sets each field through object.__setattr__, ~1.2 us more per build, and the
# service builds one on every mutation. Slots: no per-commit __dict__.
@dataclass(slots=True)
class Commit:
    """One mutation of one session: entry snapshots to write (new entries or
    new revisions), the active leaf if it moves, and the new meta if it
    changes. The fs and memory adapters apply it all-or-nothing, and so does
    the bridge over our main (one ``session::store::commit`` call); over a
    Rust main it is several calls (entries, leaf, meta, in that order), so a
    failure part-way leaves the earlier parts written.

    Compare-and-set (see :mod:`._cas`): ``expect_meta`` is the meta the
    decision read (``None``: the session must not exist), ``expect_revisions``
    the revisions of entries it rewrites; ``append`` marks new entries whose
    meta the store derives from its current one (``chain``: the first entry's
    parent becomes the store's current leaf). A stale commit raises
    :class:`~session_manager.errors.Conflict` and writes nothing.

    ``tx`` names the commit where an adapter needs an id for it (the fs
    adapter's multi-line records): called at most once; ``None`` lets the
    adapter draw a random one.

    ``derived_from``: the meta an append's ``meta`` was derived from (set only
    by :func:`append_commit`); while it is still the session's meta (the
    very object), :func:`._cas.resolve` need not derive it again to compare.

    ``data_json``: the compact JSON (``orjson.dumps``) of the one appended
    entry's ``data``, when the caller encoded it already (the typed append
    measures its request so): a store writing entries as JSON may splice it in
    instead of encoding the data again; any store may ignore it.
    """

    entries: tuple[Entry, ...] = ()
    leaf: str | None = None
    meta: Meta | None = None
    tx: Callable[[], str] | None = None
    expect_meta: Meta | Unset | None = UNSET
    expect_revisions: tuple[tuple[str, int], ...] = ()
    append: bool = False
    chain: bool = False
    derived_from: Meta | None = None
    data_json: bytes | None = None


def append_commit(meta: Meta, entries: tuple[Entry, ...], *, chain: bool,
                  tx: Callable[[], str] | None = None, data_json: bytes | None = None,
                  expect_meta: Meta | Unset | None = UNSET) -> Commit:
    """An append of ``entries`` decided on ``meta`` (the session's, as read):
    its meta derived here, once; :func:`._cas.resolve` derives it again only
    if the session's meta is no longer that object. ``data_json``: as :class:`Commit`'s
    (one entry only)."""
    if len(entries) == 1:  # (derive_append_meta of one entry, inline: every append)
        last = entries[0]
        derived = dict(meta)
        derived["updated_at"] = last["timestamp"]
        derived["message_count"] = meta["message_count"] + (1 if last.get("kind") == "message" else 0)
    else:
        last, derived = entries[-1], derive_append_meta(meta, entries)
    return Commit(entries=entries, leaf=last["id"], meta=derived, tx=tx,
                  append=True, chain=chain, derived_from=meta, data_json=data_json, expect_meta=expect_meta)


class SessionStore(ABC):
    """What the domain service needs from storage.

    Seams for stores shared by several instances (the postgres adapter; every
    default here is a no-op, right for a store one process owns):

    - :meth:`mutation`: the service enters it where it takes its per-session
      lock, so one mutation's reads, checks and writes are one transaction
      that also serializes against other processes.
    - :meth:`run_call`: a host wraps each function call in it, so the call's
      events are recorded with its writes (an outbox, committed atomically).
    - :meth:`subscribe`: a host hands it the function that delivers events to
      its local observers; the store calls it with the events *other*
      instances made (the host keeps delivering its own calls' events,
      through :meth:`run_and_deliver`).
    - :attr:`shared`: such a store is not a single process's files, so the
      host neither serves ``session::store::*`` nor fans events out to bridges.

    :attr:`private_paths`: every :meth:`path` this store hands out holds entries
    decoded for that path alone (no cache or other reader holds them), so a
    response built from them and from new containers is its caller's already.
    """

    shared: bool = False
    private_paths: bool = False

    # -- transactions and events across instances -------------------------------

    def mutation(self, session_ids: Collection[str]) -> AbstractContextManager[None]:
        """One mutation of ``session_ids``: all or nothing, serialized per session."""
        return NO_TRANSACTION

    def settle(self) -> None:
        """Wait until the commits this thread made inside :meth:`mutation`
        blocks are durable. The service calls it after letting go of the
        session's lock and before answering, so a store may leave that wait
        out of ``commit`` and let the writers queued on the lock share it
        (the fs store's group commit in fsync mode); the default has nothing
        to wait for."""
        return None

    def run_call(self, call: Callable[[], tuple[R, list[Event]]]) -> tuple[R, list[Event]]:
        """Run one function call (``(response, events)``); the default just calls it."""
        return call()

    def run_and_deliver(self, call: Callable[[], tuple[R, list[Event]]],
                        deliver: EventSink | None) -> tuple[R, list[Event]]:
        """:meth:`run_call`, then the call's events handed to ``deliver`` (the host's
        delivery of its own calls' events; ``None``: nobody observes them). A store
        whose :meth:`subscribe` sink gets other instances' events in commit order hands
        them over itself, in that same order (the sqlite adapter: under its follower's
        delivery lock, so a commit another process makes right after this call's is
        never delivered before it); the default delivers once the call returns. (A store
        that keeps this default has its calls' events put in commit order by the hosts:
        numbered under the session's lock, :mod:`session_manager._service.commit_order`.)"""
        response, events = self.run_call(call)
        if events and deliver is not None:
            deliver(events)
        return response, events

    def subscribe(self, sink: EventSink, wants: Callable[[str], bool] | None = None) -> Callable[[], None]:
        """Deliver other instances' events to ``sink`` (only of the event functions
        ``wants`` names, when given: the store need not fetch the rest); returns
        the unsubscriber."""
        return lambda: None

    #: Every read (``get_meta``, ``meta_and_leaf``, ``path``, ``get_entry``, the
    #: listings) returns objects decoded for that call alone, which nothing in the
    #: store keeps: the embedded host then hands the answers of the reads built from
    #: them over as they are, without the deep copy it makes of every other answer.
    fresh_reads: ClassVar[bool] = False

    def events_ready(self) -> None:  # noqa: B027 - optional hook
        """Wait (bounded) until the events other instances commit from now on reach
        the sinks given to :meth:`subscribe`. A host calls it before it counts on
        them (the embedded host when an observer is added, the iii host once
        subscribed). A store whose listener connects in the background (postgres:
        a cold open does not wait for it) waits here; one that follows only what
        some sink wants (postgres, sqlite: a sink that wants nothing yet, as the
        embedded host's before its first observer, starts nothing) starts following
        here. The default is ready when :meth:`subscribe` returns."""

    def events_idle(self) -> None:  # noqa: B027 - optional hook
        """A host's last observer left: a store that follows other instances only for
        some sink (postgres, sqlite) stops following once no sink wants any event
        function (:meth:`events_ready` starts it again). The default follows nothing."""

    def observing(self) -> None:  # noqa: B027 - optional hook
        """A host just added an observer: a store that finds other processes' changes by
        comparing states (a read-only fs open) takes the state they are compared with now,
        so the observer gets every change made after it was added. The default has none."""

    def ordered_metas(
        self, order: str, after: tuple[int, str] | None, status: str | None, metadata: Meta | None
    ) -> Iterator[Meta]:
        """Metas in ``order`` (``updated_desc`` | ``created_desc`` | ``created_asc``)
        strictly after the key ``after``: a superset of those matching ``status``
        and ``metadata`` (the service applies the rule). The default sorts
        :meth:`list_metas`; a database serves it from an index."""
        field = "updated_at" if order == "updated_desc" else "created_at"
        descending = order != "created_asc"
        keyed = sorted(((m[field], m["session_id"]), m) for m in self.list_metas())
        if descending:
            keyed.reverse()
        for key, m in keyed:
            if after is None or ((key < after) if descending else (key > after)):
                yield m

    def search(self, query: Query, sessions: Collection[str] | None,
               roles: Collection[str] | None) -> Matches:
        """The searchable entries of ``sessions`` (``None``: every session) matching
        every term of ``query`` (see :mod:`.search_index`), with the statistics
        ranking needs. The default reads every entry in scope; a store with an
        index answers from it."""
        ids = sessions if sessions is not None else [m["session_id"] for m in self.list_metas()]
        return scan(query, ids, self.entries, roles)

    def entries_on_active_path(self, session_id: str, entry_ids: Sequence[str]) -> list[tuple[Entry | None, bool]]:
        """Each of ``entry_ids`` of ``session_id`` (``None``: not stored) and whether it is on
        the session's active path: what a search hit shows. The default reads the leaf and
        its path once, then each entry; a store may answer from one lookup of the session."""
        path = self.path(session_id, self.get_leaf(session_id))
        return [(self.get_entry(session_id, eid), path.holds(eid)) for eid in entry_ids]

    def hits_on_active_paths(self, hits: Sequence[tuple[str, str]]) -> list[tuple[Entry | None, bool]]:
        """:meth:`entries_on_active_path` for the hits of a page, ``(session_id, entry_id)``
        each, in their order. The default asks once per session; a store may answer every
        session of the page in one lookup."""
        by_session: dict[str, list[str]] = {}
        for sid, eid in hits:
            by_session.setdefault(sid, []).append(eid)
        found: dict[tuple[str, str], tuple[Entry | None, bool]] = {}
        for sid, eids in by_session.items():
            found.update(zip(((sid, eid) for eid in eids), self.entries_on_active_path(sid, eids), strict=True))
        return [found[h] for h in hits]

    def search_page(self, query: Query, sessions: Collection[str] | None, roles: Collection[str] | None,
                    limit: int, after: SortKey | None, stats: Stats | None = None) -> Ranked:
        """The first ``limit`` hits of :meth:`search` in the one total order of
        ``session::search`` (BM25 over the sessions in scope, rounded, then newer
        timestamp, session id, entry id: :func:`~.search_index.rank`) strictly after
        ``after``, with their keys and the statistics they were scored with. ``stats``
        (a cursor's: those its first page was ranked with) replaces the scope's statistics
        of the moment in every score, so the pages of one cursor are one ranking. The
        default ranks every candidate of :meth:`search`; a store that can rank inside its
        index hands over only the page (the answer must be the same)."""
        return rank(self.search(query, sessions, roles), limit, after, stats)

    def search_page_shown(self, query: Query, sessions: Collection[str] | None, roles: Collection[str] | None,
                          limit: int, after: SortKey | None, shown: int,
                          stats: Stats | None = None) -> tuple[Ranked, list[tuple[Entry | None, bool]]]:
        """:meth:`search_page` with :meth:`hits_on_active_paths` of its first ``shown`` hits:
        what a ``session::search`` call shows. The default makes the two calls; a store may
        answer both in one lookup."""
        # (without ``stats`` when there are none: a store of an earlier release overriding
        # search_page without it returns a plain list, so its cursors carry none and it works)
        ranked = (self.search_page(query, sessions, roles, limit, after, stats) if stats is not None
                  else self.search_page(query, sessions, roles, limit, after))
        return ranked, self.hits_on_active_paths([(c.session_id, c.entry_id) for _, c in ranked[:shown]])

    # -- sessions and entries ------------------------------------------------

    @abstractmethod
    def get_meta(self, session_id: str) -> Meta | None: ...

    @abstractmethod
    def list_metas(self) -> list[Meta]: ...

    @abstractmethod
    def get_entry(self, session_id: str, entry_id: str) -> Entry | None:
        """The stored entry, the caller's own (changing it changes nothing stored)."""

    def entry_held(self, session_id: str, entry_id: str) -> Entry | None:
        """:meth:`get_entry`, possibly the very object the store keeps (fs, memory: no copy):
        for this package's readers, which never change what they read. The default is
        :meth:`get_entry` (a store that decodes each read hands out a fresh object anyway)."""
        return self.get_entry(session_id, entry_id)

    @abstractmethod
    def get_leaf(self, session_id: str) -> str | None: ...

    def meta_and_leaf(self, session_id: str) -> tuple[Meta | None, str | None]:
        """``(get_meta, get_leaf)`` in one call (an append reads both; a store
        may answer them from one lookup)."""
        return self.get_meta(session_id), self.get_leaf(session_id)

    def created_and_leaf(self, session_id: str) -> tuple[Any, str | None] | None:
        """The session's ``(meta["created_at"], leaf)``, ``None`` without a meta (a new leaf
        with every append; another ``created_at`` when it was deleted and made again, but
        both can come back: an adapter's index is derived at :meth:`session_token`). A store
        may answer it without decoding the meta (sqlite: two columns)."""
        meta, leaf = self.meta_and_leaf(session_id)
        return None if meta is None else (meta.get("created_at"), leaf)

    def session_token(self, session_id: str, known: Hashable | None = None
                      ) -> tuple[Any, str | None, Hashable | None] | None:
        """The session's ``(meta["created_at"], leaf, version)``, ``None`` without a meta: what
        an adapter's index of it is derived at. ``version`` as :meth:`meta_and_leaf_since`'s
        (``known``: one this method returned before, which a store may answer more cheaply):
        it changes with every write of the session and never comes back, so the token does
        not either (the leaf alone does: set back by ``session::set-active-leaf``). ``None``
        where the store names no versions. The default is :meth:`meta_and_leaf_since`."""
        meta, leaf, version = self.meta_and_leaf_since(session_id, known)
        return None if meta is None else (meta.get("created_at"), leaf, version)

    def version_after(self, version: Hashable | None, commits: int) -> Hashable | None:
        """The version :meth:`session_token` gives after exactly ``commits`` commits of the
        session following the one at ``version``, when the store can tell without a read
        (an adapter's own writes then need none to know where they left the session);
        ``None``: it cannot (the default)."""
        return None

    def version_left(self, session_id: str, version: Hashable, leaf: str) -> Hashable | None:
        """The version :meth:`session_token` gives after this instance's last commit of the
        session, when that commit made ``leaf`` its leaf and was itself checked that the
        session was at exactly ``version`` (so no other write came between), and the store
        knows it without a read: for a store whose :meth:`version_after` cannot tell
        (postgres: the row's ``xmin``, which the commit's answer names). ``None``: it cannot
        say (the default), and the adapter asking derives its view again at its next read."""
        return None

    def meta_and_leaf_from_root(self, session_id: str) -> tuple[Meta | None, str | None]:
        """:meth:`meta_and_leaf` for a read that pages the active path from its root
        (``messages``): a store may answer it with the path's first window in one read."""
        return self.meta_and_leaf(session_id)

    def meta_and_leaf_since(self, session_id: str, version: Hashable | None
                            ) -> tuple[Meta | None, str | None, Hashable | None]:
        """:meth:`meta_and_leaf` with the session's version: a value that changes with
        every write of the session (its meta, leaf, any entry; a deleted and recreated
        session's too) and never comes back. When it equals ``version`` (one this
        method returned before), the session is exactly as it was then: the caller
        may answer what it built from it then, and the store may have skipped the
        read of the path's last window it makes otherwise (:meth:`path` still reads
        it, lazily). ``None``: this store names no versions (the default)."""
        meta, leaf = self.meta_and_leaf(session_id)
        return meta, leaf, None

    def leaf_since(self, session_id: str, version: Hashable | None) -> tuple[bool, str | None, Hashable | None]:
        """:meth:`meta_and_leaf_since` with whether the session exists in place of its meta
        (``messages-tail`` reads nothing else of it): a store may skip decoding the meta
        (postgres). The default is :meth:`meta_and_leaf_since`."""
        meta, leaf, now = self.meta_and_leaf_since(session_id, version)
        return meta is not None, leaf, now

    def meta_and_entry(self, session_id: str, entry_id: str) -> tuple[Meta | None, Entry | None]:
        """``(get_meta, get_entry)`` in one call (every streamed update reads both)."""
        return self.get_meta(session_id), self.get_entry(session_id, entry_id)

    def meta_and_leaf_to_commit(self, session_id: str) -> tuple[Meta | None, str | None]:
        """:meth:`meta_and_leaf` for a mutation that commits next (the service
        reads it inside ``ServiceCore._session``, right before its commit): a
        store may leave to that commit what it does on every access (the fs
        store's cache charge). The answer is the same; the default is the read."""
        return self.meta_and_leaf(session_id)

    def meta_and_entry_to_commit(self, session_id: str, entry_id: str) -> tuple[Meta | None, Entry | None]:
        """:meth:`meta_and_entry` for a mutation that commits next (see
        :meth:`meta_and_leaf_to_commit`)."""
        return self.meta_and_entry(session_id, entry_id)

    @abstractmethod
    def path(self, session_id: str, leaf: str | None) -> EntryPath:
        """The root -> ``leaf`` chain (empty for ``None`` or an unknown leaf)."""

    @abstractmethod
    def entries(self, session_id: str) -> list[Entry]:
        """Every stored entry of the session, on any branch: the caller's own."""

    def entries_held(self, session_id: str) -> list[Entry]:
        """:meth:`entries`, possibly the very objects the store keeps (see :meth:`entry_held`)."""
        return self.entries(session_id)

    @abstractmethod
    def commit(self, session_id: str, commit: Commit) -> Commit:
        """Apply ``commit`` whole or not at all and return it as applied
        (an append re-parented and its meta derived by :func:`.cas.resolve`,
        which every adapter calls inside the critical section that writes)."""

    @abstractmethod
    def delete_session(self, session_id: str) -> bool:
        """Remove the session's meta, entries, leaf and attachments; ``True``
        when there was a session to remove. The answer is exact for a store
        shared by several writers (two bridges over one main): of racing
        deletes, one answers ``True``, so one ``on-deleted`` fires. No byte of
        the session may stay in the store's files once this returns (outside
        :meth:`erasing`) or the ``erasing`` block ends."""

    def bulk_delete_problem(self) -> str | None:
        """Why this store cannot delete many sessions safely now (``None``: it can).
        Asked once before a purge, a tree delete or a retention batch."""
        return None

    def erasing(self) -> AbstractContextManager[None]:
        """A batch of :meth:`delete_session` calls (a purge, a tree): a store may
        erase what the deleted sessions left in shared files (an index) once, at
        the end of the block, instead of once per delete. The default: nothing shared."""
        return contextlib.nullcontext()

    # -- attachments ----------------------------------------------------------

    @abstractmethod
    def put_attachment(self, meta: AttachmentMeta, chunks: Iterable[bytes]) -> None:
        """Store bytes (streamed) then metadata; the attachment becomes visible
        only once both are in place. ``meta`` is serialized only after
        ``chunks`` is exhausted (the producer may complete it, e.g. its hash);
        an exception from ``chunks`` leaves nothing behind."""

    @abstractmethod
    def get_attachment_meta(self, session_id: str, attachment_id: str) -> AttachmentMeta | None: ...

    @abstractmethod
    def read_attachment(self, session_id: str, attachment_id: str) -> bytes | None: ...

    @abstractmethod
    def list_attachments(self, session_id: str) -> list[AttachmentMeta]: ...

    @abstractmethod
    def delete_attachment(self, session_id: str, attachment_id: str) -> bool: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; the default store holds none between calls."""
