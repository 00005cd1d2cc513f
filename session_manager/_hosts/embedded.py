"""The in-process host: the session store inside a Python application.

It serves the same function table as the iii worker, validates payloads the
same way, and delivers the same events to local observers whose filters
(iii's filter language, evaluated with ``iii.filter``) match. Delivery is
synchronous, after the mutation is durable; an observer that raises is
logged and never fails the call.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from functools import partial
from types import TracebackType
from typing import Any

import orjson
from pydantic import ValidationError

from .._service.admission import admit, admit_copy, admit_size
from .._service.appending import OwnedCustom, SessionAt, append_custom_owned
from .._service.erasure import Selection
from .._service.limits import Limits, LimitsCell
from .._service.service import SessionService
from .._service.storage_errors import at_edge
from .._wire.events import EVENT_FUNCTIONS, Event
from .._wire.validation import (
    _ALLOWED_KEYS,
    CHUNK_ITEMS,
    ProvenPayload,
    describe,
    json_payload,
    parse_request,
    reject_unknown_keys,
)
from ..clock import Clock
from ..errors import STORAGE, SessionError, StoreError, invalid_request
from ..ids import IdGen
from ..store.base import SessionStore
from ..store.fs import DEFAULT_CACHE_BYTES, Durability, FsStore
from ..store.serial import Serial
from .gate import CallGate
from .helpers import Helpers
from .pipeline import execute, same, serve
from .retention import RetentionPolicy, RetentionSweeper, retention_policy
from .surface import BY_ID, Function, unknown_function
from .surface import function as lookup

# The payloads admit_copy returns that reject_unknown_keys looks at (a dict).
_DICTS: frozenset[type] = frozenset((dict, ProvenPayload))
_UNPARSED: Any = object()

log = logging.getLogger("session_manager.embedded")

EventHandler = Callable[[dict[str, Any]], Any]


_LEAVES = frozenset({str, int, float, bool, type(None)})
_PLAIN_LEAVES = frozenset({str, int, bool, type(None)})  # (validation._plain_copy's: a float is checked there)

# Reads whose response the service builds from the path's entries and new containers
# alone (``_service/tail.py``, ``_service/message_reads.py``: items made by
# ``transcript.item``, each entry once; nothing a cache, the request or the service
# holds). Over a store whose paths are private (``SessionStore.private_paths``: decoded
# for that read alone), such a response is its caller's already and is not copied again.
_FROM_PATH_ALONE = frozenset({"session::messages", "session::messages-tail"})

# Writes whose answer the service builds new for each call from immutable leaves (ids, a
# timestamp, a revision; append-many's id list is new too): nobody else holds it, so it is
# handed over without the copy, over every store (the streaming writes' hot path).
_NEW_ANSWERS = frozenset({"session::append", "session::append-many", "session::update-message"})

# Reads whose answers are built from what the store read for the call (no module
# constant, no service state): not copied when the store's reads are fresh.
_FRESH_ANSWERS = frozenset({"session::get", "session::list", "session::messages", "session::messages-range",
                            "session::messages-tail", "session::get-message"})

# Reads that enter no mutation and have no events (the handlers of ``_service/lifecycle.get``,
# ``_service/message_reads`` and ``_service/tail``): over a store with ``run_read``
# (postgres), an unobserved call of one runs through it, without the call runner's layers.
_PURE_READS = frozenset({"session::get", "session::messages", "session::messages-tail", "session::get-message"})


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON value (strings and numbers are shared). Every
    response is copied: an exact dict or list is copied whole in C, then only
    its containers are replaced by copies (no call, and no Python store, per leaf)."""
    t = type(value)
    if t is dict:
        out = value.copy()
        for v in out.values():
            if type(v) not in _LEAVES:
                break
        else:
            return out  # leaves only (most responses): one scan, no item pairs, no stores
        for k, v in out.items():
            if type(v) not in _LEAVES:
                out[k] = copy_json(v)  # (a value replaced while iterating: the keys stay as they are)
        return out
    if t is list:
        copied = value.copy()
        for i, v in enumerate(copied):
            if type(v) not in _LEAVES:
                copied[i] = copy_json(v)
        return copied
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value


class Observation:
    """A live observer; :meth:`dispose` stops delivery."""

    def __init__(self, owner: SessionManager, function_id: str, matches: Callable[[dict[str, Any]], bool],
                 handler: EventHandler) -> None:
        self.function_id = function_id
        self._owner = owner
        self._matches = matches
        self._handler = handler
        self.disposed = False

    def deliver(self, event: Event) -> None:
        if self.disposed or not self._matches({"input": event.payload}):
            return
        try:
            self._handler(copy_json(event.payload))
        except Exception:
            log.exception("observer of %s failed; the mutation stands", self.function_id)

    def dispose(self) -> None:
        self.disposed = True
        self._owner._remove(self)


def _hand(observers: list[Observation], events: list[Event]) -> None:
    for event in events:
        for observation in observers:
            if observation.function_id == event.function_id:
                observation.deliver(event)


class SessionManager(Helpers):
    """An open session store: ``call`` functions, ``observe`` events, ``close``.

    Every function also has a typed method (``sm.append(session_id, message=...)``
    returns an :class:`~session_manager.types.AppendResponse`), generated from
    the same table ``call`` serves, and the typed helpers (``edit``,
    ``regenerate``, ``alternatives``, ``abort``, ...: docs/helpers.md)."""

    def __init__(self, service: SessionService, retention: RetentionPolicy | None = None) -> None:
        self.service = service
        self._observers: list[Observation] = []
        self._lock = threading.Lock()
        self._serial = Serial()  # the observers' deliveries, one at a time (see store/serial.py)
        self._adding = 0  # observe() calls between events_ready() and their observer's registration
        # Calls in flight, so close() releases the store only once they are done (the
        # rule the iii host's shutdown shares). _depth counts this thread's own calls
        # delivering events (close() from an observer must not wait for the call that runs it).
        self._gate = CallGate()
        self._depth = threading.local()
        # The default run_call only calls: skipped (and its closure) on every call of such a store.
        self._wraps_calls = getattr(type(service.store), "run_call", None) is not SessionStore.run_call
        # A store is opened read-only or not for good: read once, not per mutating call.
        self._read_only = bool(getattr(service.store, "read_only", False))
        # Answers already their caller's (built from objects the store decoded for the call
        # alone): handed over without the deep copy.
        self._uncopied = (_NEW_ANSWERS
                          | (_FROM_PATH_ALONE if getattr(service.store, "private_paths", False) else frozenset())
                          | (_FRESH_ANSWERS if getattr(service.store, "fresh_reads", False) else frozenset()))
        # A store's way to run a pure read (its deadline, no call runner): postgres'.
        self._run_read: Callable[[Any, Any, Any], Any] | None = getattr(service.store, "run_read", None)
        # A shared store (postgres) delivers other instances' events here.
        self._unsubscribe = service.store.subscribe(self.publish, self.is_observed)
        # Off unless a policy is given; its thread starts with the first policy.
        self.retention = RetentionSweeper(self._sweep_batch, service.clock, retention)

    # -- calls ----------------------------------------------------------------

    def call(self, function_id: str, payload: Any = None) -> Any:
        """Run one function; returns its JSON-compatible result or raises
        :class:`~session_manager.SessionError`."""
        # (the gate's enter and leave written out: a call counts itself in before it reads
        # ``closed``, as CallGate.enter, and out as CallGate.leave, in the finally)
        gate = self._gate
        calls = gate._calls
        calls.append(None)
        try:
            if gate.closed:
                raise RuntimeError("this session manager is closed")
            # (_call's steps written out: this runs on every call, _call on the owned ones)
            function = BY_ID.get(function_id) if type(function_id) is str else None
            if function is None or function.handler is None:
                function = self._callable(function_id)
            if function.mutates and self._read_only:
                raise SessionError(STORAGE, f"{function_id}: this session store is open read-only")
            # A private copy: what is stored must not change when the caller later changes the
            # dicts it passed in; the answer is a copy too (or new already: a store's private path
            # pages). Events go to the observers there were when the call began (publish's rule).
            if self._observers:
                return serve(function, self.service, payload, self._deliver,
                             private_copy=True, answer=same if function_id in self._uncopied else copy_json,
                             wraps_calls=self._wraps_calls)
            # serve's steps for a private copy nobody observes (nothing delivered), written out:
            # every unobserved call runs them.
            service = self.service
            core = service.core
            model = function.request
            flat = None
            if function_id in _PURE_READS and type(payload) is dict:
                # (admit_copy's exact path for a read's request of plain leaves alone, inline: the
                # copy, and its one encoding proving its keys plain strs and its text JSON's; a read
                # has no size limit. Anything else, a float too, takes admit_copy, which names it.)
                flat = payload.copy()
                for value in flat.values():
                    if type(value) not in _PLAIN_LEAVES:
                        flat = None
                        break
                else:
                    try:
                        orjson.dumps(flat)
                    except TypeError:  # (orjson.JSONEncodeError is one)
                        flat = None
            payload = flat if flat is not None else admit_copy(function.id, payload, core.limits.current,
                                                                mutates=function.mutates)
            allowed = _ALLOWED_KEYS.get(model)  # (reject_unknown_keys' test, without its call)
            if allowed is None or type(payload) not in _DICTS or not payload.keys() <= allowed:
                reject_unknown_keys(model, payload)
            request: Any = _UNPARSED
            if type(payload) in _DICTS:  # (parse_request's common case, inline: no long list to chunk)
                for value in payload.values() if flat is None else ():
                    if type(value) is list and len(value) > CHUNK_ITEMS:
                        break
                else:
                    try:
                        request = model.__pydantic_validator__.validate_python(payload)
                    except ValidationError as e:
                        raise invalid_request(describe(e)) from None
            if request is _UNPARSED:
                request = parse_request(model, payload)
            handler = function.handler
            assert handler is not None  # (_callable's)
            try:
                if self._run_read is not None and function_id in _PURE_READS:
                    response = self._run_read(handler, service, request)
                else:
                    work = partial(handler, service, request)
                    response, _ = core.store.run_and_deliver(work, None) if self._wraps_calls else work()
            except StoreError as e:
                raise at_edge(e) from None
            return response if function_id in self._uncopied else copy_json(response)
        finally:
            calls.pop()
            if gate.closed:
                gate.left()

    @staticmethod
    def _callable(function_id: Any) -> Function:
        """The row serving ``function_id``, or ``session/invalid_request`` naming it
        (an unknown id, ``None``, or an event function's row: the table serves none)."""
        function = lookup(function_id)
        if function.handler is None:
            raise unknown_function(function_id)
        return function

    def _call(self, function_id: str, payload: Any, owned: bool = False,
              row: Callable[[SessionService, Any], Any] | None = None) -> Any:
        function = self._callable(function_id)
        if function.mutates and self._read_only:
            raise SessionError(STORAGE, f"{function_id}: this session store is open read-only")
        # A private copy (unless the payload is handed over: _call_owned): what is stored must
        # not change when the caller later changes the dicts it passed in; the answer is a copy
        # too (or new already: a store's private path pages).
        answer = same if function_id in self._uncopied else copy_json
        return serve(function, self.service, payload, self._deliver if self._observers else None,
                     private_copy=not owned, owned=owned, answer=answer, wraps_calls=self._wraps_calls, row=row)

    def _call_owned(self, function_id: str, payload: dict[str, Any], *, at: SessionAt | None = None) -> Any:
        """:meth:`call` for a payload this package's own code built and hands over
        (the adapters' hot writes: a LangGraph checkpoint's entry), stored as it is,
        without the private copy :meth:`call` makes.

        The builder's promise, which nothing here re-checks: ``payload`` holds
        exact JSON types only (``dict`` with ``str`` keys, ``list``, ``str``, ``int``,
        finite ``float``, ``bool``, ``None``), nests at most
        :data:`~session_manager._service.admission.MAX_DEPTH` deep, has only the
        request's own top-level keys, is newly built, and the builder neither keeps
        nor shares any part of it it will change (the store keeps these very
        objects). Everything else is checked as for any call: the size limits and
        text JSON can carry (admission), the request model, the session's state;
        the same events.

        ``at`` (``session::append`` only): append only while the session's
        ``(created_at, active leaf)`` is ``at``, else raise
        :class:`~session_manager._service.appending.LeafMoved` having written nothing."""
        row = None
        if at is not None:
            if function_id != "session::append":
                raise ValueError(f"{function_id}: a precondition on the session applies to session::append only")

            def row(service: SessionService, request: Any) -> Any:
                return service.append_at(request, at)

        gate = self._gate
        if not gate.enter():
            raise RuntimeError("this session manager is closed")
        try:
            return self._call(function_id, payload, owned=True, row=row)
        finally:
            gate.leave()

    def _append_owned(self, session_id: str, custom_type: str, data: Any, parent_id: str | None = None, *,
                      at: SessionAt | None = None, data_json: bytes | None = None) -> str:
        """``session::append`` of a custom entry (no caller's entry id) this package's own
        code built, as a typed call: the new entry's id. :meth:`_call_owned`'s promise
        about ``data`` (exact JSON, at most
        :data:`~session_manager._service.admission.MAX_DEPTH` deep with its request, newly
        built, handed over), and more: ``session_id``, ``custom_type`` and ``parent_id``
        are non-empty ``str`` (what the request model would check). Without a payload to
        admit and parse, what a call costs besides the append itself is the size: ``data``
        encoded once (orjson keeps each string's UTF-8, so the store's encoding of the
        entry reuses it), the request measured around it; text JSON cannot carry refused
        as :func:`~session_manager._service.admission.admit` names it; what orjson cannot
        encode (an integer past 64 bits) is decided as a call's payload is, and taken by the same
        rule (integers of any size stored exactly). Then as any append:
        the session's state (``at`` as :meth:`_call_owned`'s), read-only refusal, the event.
        ``data_json``: ``orjson.dumps(data)`` byte for byte, when the builder encoded it (then
        it is measured and handed on as it is, not encoded again here)."""
        gate = self._gate
        if not gate.enter():
            raise RuntimeError("this session manager is closed")
        try:
            if self._read_only:
                raise SessionError(STORAGE, "session::append: this session store is open read-only")
            core = self.service.core  # (the service's properties and method, skipped: every typed append)
            limits = core.limits.current  # (LimitsCell.get, inline)
            envelope: dict[str, Any] = {"session_id": session_id, "custom": {"custom_type": custom_type, "data": None}}
            if parent_id is not None:
                envelope["parent_id"] = parent_id
            try:  # (the request's compact JSON is the envelope's with ``null`` replaced by data's)
                if data_json is None:
                    data_json = orjson.dumps(data)  # (handed on: the store's encoding of the entry splices it in)
                size = len(orjson.dumps(envelope)) - 4 + len(data_json)
            except TypeError:  # (orjson.JSONEncodeError too): the exact path decides, as for a call
                # orjson refuses integers past 64 bits, which a call stores exactly (any size):
                # admission measures the request and names text JSON cannot carry, the exact copy
                # anything else JSON cannot hold; what both take is stored as a call's would be
                # (encoded by the store's exact encoder: no data_json).
                envelope["custom"]["data"] = data
                admit("session::append", envelope, limits, mutates=True)
                data = json_payload(envelope)["custom"]["data"]
                data_json, size = None, 0
            if size > limits.max_request_bytes:  # (:func:`admit_size`'s test, inline: it raises)
                admit_size(size, limits)
            deliver = self._deliver if self._observers else None
            wraps_calls = self._wraps_calls
            # Without an observer, a store whose calls are not wrapped (one that records no events:
            # fs, memory) leaves the event to nobody (:func:`execute`): it is not built.
            request = OwnedCustom(session_id, custom_type, data, parent_id, at, data_json,
                                  deliver is None and not wraps_calls)
            # Its events delivered inside the gate, as a call's: close() waits for them.
            entry, _ = execute(core.store, partial(append_custom_owned, core, request),
                               wraps_calls=wraps_calls, deliver=deliver, order=core.order)
            return str(entry["id"])
        finally:
            gate.leave()

    def _deliver(self, events: list[Event]) -> None:
        """A call's events to the observers (handed only when there were some as the call
        began). User code runs only in observers: a close() from one must not wait for this
        call (counted only here, off the path of a call nobody observes)."""
        depth = getattr(self._depth, "n", 0)
        self._depth.n = depth + 1
        try:
            self.publish(events)
        finally:
            self._depth.n = depth

    def _list_limit_cap(self) -> int | None:
        return self.service.limits.get().max_list_limit

    def erase_where(self, selection: Selection, limit: int) -> tuple[list[str], bool]:
        """Delete up to ``limit`` sessions ``selection`` takes (as ``session::purge``
        does, their events delivered as a call's): their ids and whether more match."""
        service = self.service

        def run() -> tuple[tuple[list[str], bool], list[Event]]:
            ids, events, more = service.erase_selected(selection, limit)
            return (ids, more), events

        (ids, more), _ = execute(service.store, run, deliver=self.publish, order=service.core.order)
        return ids, more

    def _sweep_batch(self, policy: RetentionPolicy, limit: int) -> tuple[int, bool]:
        ids, more = self.erase_where(self.service.idle(policy.idle_days, policy.statuses), limit)
        return len(ids), more

    def set_retention(self, idle_days: int | None, statuses: list[str] | None = None) -> None:
        """Turn the retention sweep on (sessions idle ``idle_days`` days, only in
        ``statuses`` when given) or off (``None``); takes effect at the next sweep."""
        value = None if idle_days is None else {"idle_days": idle_days, "statuses": statuses}
        self.retention.set_policy(retention_policy(value))

    # -- events ---------------------------------------------------------------

    def observe(self, source: dict[str, Any], handler: EventHandler) -> Observation:
        """Observe an event function: ``source`` is ``{"function_id": ..., "filters": {...}}``;
        ``handler`` receives each matching event."""
        if not isinstance(source, dict):
            raise ValueError("source must be an object with function_id and optional filters")
        function_id = source.get("function_id")
        if function_id not in EVENT_FUNCTIONS:
            raise ValueError(f"{function_id!r} is not an observable session event function")
        if source.get("args") is not None:
            raise ValueError("event functions take no args; select events with filters")
        # Imported on first use: the iii SDK costs most of `import session_manager` otherwise.
        from iii.filter import FilterError, compile_filter

        try:
            compiled = compile_filter(source.get("filters") or {})
        except FilterError as e:
            raise ValueError(f"invalid filters: {e}") from None
        observation = Observation(self, function_id, compiled.matches, handler)
        with self._lock:
            self._adding += 1  # (counted as observed meanwhile: a concurrent last dispose stops no follower)
        try:
            # Other instances' events from now on reach it (a postgres listener connecting
            # in the background since open is waited for here, not at open).
            self.service.store.events_ready()
        except BaseException:
            with self._lock:
                self._adding -= 1
            raise
        with self._lock:
            self._adding -= 1
            self._observers.append(observation)
        self.service.store.observing()  # (a polling store's baseline: changes from now on are events)
        return observation

    def _remove(self, observation: Observation) -> None:
        with self._lock:
            if observation not in self._observers:
                return
            self._observers.remove(observation)
            last = not self._observers and not self._adding
        if last:  # (a store following other instances for them stops: no wake-up per append)
            self.service.store.events_idle()

    def is_observed(self, function_id: str) -> bool:
        with self._lock:
            return self._adding > 0 or any(o.function_id == function_id for o in self._observers)

    def publish(self, events: list[Event]) -> None:
        # Unlocked emptiness check: an observer registered during a call has no claim on its events.
        if not events or not self._observers:
            return
        with self._lock:
            observers = list(self._observers)
        # One delivery at a time, in order, never waiting on an observer running elsewhere: a
        # call an observer makes (or waits for on another thread) is delivered after this one.
        self._serial.submit(partial(_hand, observers, events))

    # -- lifetime -------------------------------------------------------------

    def close(self) -> None:
        """Refuse new calls, wait for the ones in flight on other threads (and
        their events), then close the store. A store released mid-call would
        take that write after its data_dir's lock was gone."""
        self._gate.close(self._release, own=getattr(self._depth, "n", 0))

    def _release(self) -> None:
        self.retention.close()  # a sweep in progress ends before the store it deletes from closes
        self._unsubscribe()
        with self._lock:
            self._observers.clear()
        self.service.store.close()

    def __enter__(self) -> SessionManager:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _check_count(name: str, value: object) -> None:
    """What the worker's configuration takes for the same key: an integer in
    ``[0, 2**64 - 1]``, never a bool (``None``: the default)."""
    if value is None:
        return
    if type(value) is bool or not isinstance(value, int) or not 0 <= value <= 2**64 - 1:
        raise ValueError(f"{name}: expected an integer from 0 to 2**64 - 1, got {value!r}")


def open(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    store: SessionStore | None = None,
    durability: Durability = "flush",
    ids: IdGen | None = None,
    clock: Clock | None = None,
    default_list_limit: int | None = None,
    max_list_limit: int | None = None,
    max_attachment_bytes: int | None = None,
    max_request_bytes: int | None = None,
    max_batch_entries: int | None = None,
    read_only: bool = False,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    retention: dict[str, Any] | None = None,
) -> SessionManager:
    """Open a session store in this process.

    ``data_dir`` holds one JSONL file per session (created if missing); a
    ``postgresql://`` (or ``postgres://``) URI opens the postgres adapter
    instead (schema ``public``; pass ``store`` for other settings), whose
    observers also see other instances' mutations; a ``sqlite:///relative.db``
    or ``sqlite:////absolute.db`` URI opens the sqlite adapter (any number of
    processes on one machine, events across them; ``durability`` applies). Pass ``store`` to use
    any other adapter. ``ids`` and ``clock`` replace
    the production uuid ids and system clock. A writable fs open owns the
    data_dir until :meth:`SessionManager.close`: a second one (any process)
    raises ``session/storage`` naming the holder. ``read_only=True`` inspects
    a data_dir (even one another process owns), a sqlite file or a postgres
    database beside live writers without writing anything (it never migrates
    either: an older schema is refused with ``session/storage``); every
    mutating function then answers ``session/storage`` (``this store is open
    read-only``). ``cache_bytes``
    bounds the memory of the fs adapter's loaded sessions (default 256 MiB;
    least recently used ones are dropped and read again from disk when touched).
    ``retention`` (``{"idle_days": N, "statuses": [...]}``, off by default) deletes
    sessions idle that long in a background sweep, at most once a minute
    (change it later with :meth:`SessionManager.set_retention`).
    """
    # Checked before anything is opened (a refused open must not keep the data_dir).
    for name, value in (("default_list_limit", default_list_limit), ("max_list_limit", max_list_limit),
                        ("max_attachment_bytes", max_attachment_bytes), ("max_request_bytes", max_request_bytes),
                        ("max_batch_entries", max_batch_entries), ("cache_bytes", cache_bytes)):
        _check_count(name, value)
    policy = retention_policy(retention)  # (checked before anything is opened too)
    if store is not None:
        if read_only and not getattr(store, "read_only", False):
            raise ValueError("read_only=True opens a data_dir read-only; the given store is writable")
    else:
        if data_dir is None:
            raise ValueError("open() needs a data_dir or a store")
        if isinstance(data_dir, str) and data_dir.startswith(("postgresql://", "postgres://")):
            from ..store.postgres.build import open_dsn  # the optional extra

            try:
                store = open_dsn(data_dir, read_only=read_only)
            except StoreError as e:  # as the fs open: the text masks the password
                raise SessionError(STORAGE, str(e)) from None
        elif isinstance(data_dir, str) and data_dir.startswith("sqlite://"):
            from ..store.sqlite.build import open_uri

            try:
                store = open_uri(data_dir, durability, read_only=read_only)
            except StoreError as e:
                raise SessionError(STORAGE, str(e)) from None
        else:
            try:
                store = FsStore(data_dir, durability=durability, read_only=read_only, cache_bytes=cache_bytes)
            except StoreError as e:
                raise SessionError(STORAGE, str(e)) from None
            except OSError as e:
                raise SessionError(STORAGE, f"data_dir {os.fspath(data_dir)}: {e.strerror}") from None
    defaults = Limits()
    limits = Limits(
        # 0 means what it means in the configuration (a page of one), not "the default".
        default_list_limit=default_list_limit if default_list_limit is not None else defaults.default_list_limit,
        max_list_limit=max_list_limit if max_list_limit is not None else defaults.max_list_limit,
        max_attachment_bytes=max_attachment_bytes if max_attachment_bytes is not None
        else defaults.max_attachment_bytes,
        max_request_bytes=max_request_bytes if max_request_bytes is not None else defaults.max_request_bytes,
        max_batch_entries=max_batch_entries if max_batch_entries is not None else defaults.max_batch_entries,
    )
    return SessionManager(SessionService(store, ids=ids, clock=clock, limits=LimitsCell(limits)), policy)
