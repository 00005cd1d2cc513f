"""One call through a host: admit -> parse -> run -> map storage errors -> answer -> events.

Both hosts serve a row of the surface table through :func:`serve` (the
embedded :class:`~session_manager._hosts.embedded.SessionManager` and the
iii worker's :class:`~session_manager._worker.iii_host.IIIHost`); they differ
only in what they pass:

* ``private_copy``: an in-process caller's payload is copied (and checked to
  be JSON) before anything else, and unknown top-level keys are refused; the
  wire's payload is already the worker's own JSON and, as the reference's
  serde types do, ignores unknown keys.
* ``owned``: the embedded host's entry for a payload this package's own code
  built as exact JSON and hands over (:meth:`SessionManager._call_owned
  <session_manager._hosts.embedded.SessionManager._call_owned>`): not copied,
  its size admitted without the scans its builder has made needless (nor the
  unknown-key scan: its keys are the request's own), its shape checked as any other's.
* ``answer``: what the caller receives (the embedded host copies the
  response so the caller cannot change what a later read returns).
* ``deliver``: where the call's events go (local observers, or the worker's
  event functions and bridges), after the write is durable (a store wrapping calls
  hands them over itself, ordered with other instances' events:
  :meth:`~session_manager.store.base.SessionStore.run_and_deliver`); ``None``:
  nobody observes them (the embedded host with no observer when the call began).

:func:`execute` is the run-and-map part alone, for work that is not a
surface row (a retention sweep's batch, ``erase_where``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from .._service.admission import admit, admit_copy
from .._service.commit_order import CommitOrder
from .._service.service import Result, SessionService
from .._service.storage_errors import at_edge
from .._wire.events import Event
from .._wire.validation import parse_request, reject_unknown_keys
from ..errors import StoreError
from ..store.base import SessionStore
from .surface import Function

T = TypeVar("T")

Deliver = Callable[[list[Event]], None]


def same(response: Any) -> Any:
    """The response itself (an answer that needs no copy)."""
    return response


def serve(function: Function, service: SessionService, payload: Any, deliver: Deliver | None, *,
          private_copy: bool = False, owned: bool = False, answer: Callable[[Any], Any] = same,
          wraps_calls: bool = True, row: Callable[[SessionService, Any], Result] | None = None) -> Any:
    """Serve one call of ``function`` (a row with a handler) on ``service``; returns the answer.

    Raises :class:`~session_manager.errors.SessionError`: ``session/invalid_request``
    for a payload refused before any work, the domain's own codes, and a storage
    failure mapped once (:func:`~session_manager._service.storage_errors.at_edge`).
    ``wraps_calls=False`` skips the store's ``run_call`` (a store whose ``run_call``
    only calls: the embedded host's hot path). ``owned`` (the embedded host's
    :meth:`~session_manager._hosts.embedded.SessionManager._call_owned`) takes
    the payload as it is, proven JSON by its builder; ``row`` serves the parsed
    request instead of the function's own handler (its precondition variant)."""
    serve_row = row or function.handler
    assert serve_row is not None, f"{function.id} is an event function"
    core = service.core  # (its fields, not the service's properties: this runs on every call)
    limits = core.limits.current
    if owned:  # (its builder's keys are the request's own: no scan for unknown ones either)
        admit(function.id, payload, limits, mutates=function.mutates, proven=True)
    elif private_copy:
        payload = admit_copy(function.id, payload, limits, mutates=function.mutates)
        reject_unknown_keys(function.request, payload)
    else:
        admit(function.id, payload, limits, mutates=function.mutates)
    request = parse_request(function.request, payload)
    # A partial, not a lambda: called from C, no Python frame of its own (execute, inline).
    work = partial(serve_row, service, request)
    order = core.order
    if deliver is not None and order is not None:  # delivered in commit order (see commit_order)
        try:
            response, events = order.run(partial(core.store.run_call, work) if wraps_calls else work, deliver)
        except StoreError as e:
            raise at_edge(e) from None
        return response if answer is same else answer(response)
    if wraps_calls:  # the store hands the events to deliver (in order with other instances')
        try:
            response, events = core.store.run_and_deliver(work, deliver)
        except StoreError as e:
            raise at_edge(e) from None
        return response if answer is same else answer(response)
    try:
        response, events = work()
    except StoreError as e:
        raise at_edge(e) from None
    result = response if answer is same else answer(response)
    if events and deliver is not None:
        deliver(events)
    return result


def execute(store: SessionStore, work: Callable[[], tuple[T, list[Event]]], *,
            wraps_calls: bool = True, deliver: Deliver | None = None,
            order: CommitOrder | None = None) -> tuple[T, list[Event]]:
    """Run ``work`` as one call of ``store`` (a shared store commits the call's
    events with its writes), a storage failure mapped to its ``session/*`` error;
    its events handed to ``deliver`` (as :func:`serve` hands them: in commit order
    through ``order``, the service's :attr:`~session_manager._service.core.ServiceCore.order`)."""
    try:
        if deliver is not None and order is not None:
            return order.run(partial(store.run_call, work) if wraps_calls else work, deliver)
        if wraps_calls:
            return store.run_and_deliver(work, deliver)
        response, events = work()
    except StoreError as e:
        raise at_edge(e) from None
    if events and deliver is not None:
        deliver(events)
    return response, events
