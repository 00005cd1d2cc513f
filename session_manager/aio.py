"""asyncio API: the embedded store with every function as a coroutine.

::

    import asyncio

    from session_manager import aio
    from session_manager.messages import user_message


    async def main() -> None:
        async with aio.open("./data/sessions") as asm:
            sid = (await asm.create(title="Weather")).session_id
            filters = {"input.session_id": {"$eq": sid}}
            async with asm.events("session::on-message-added", filters=filters) as events:
                await asm.append(sid, message=user_message("hi"))
                async for event in events:  # the bare event, as an in-process observer gets it
                    print(event["message"]["content"][0]["text"])
                    break
            async for item in asm.transcript(sid):  # typed; asm.call(...) is the dict form
                print(item.message.role, item.message.text)


    asyncio.run(main())

Storage work runs on a small thread pool owned by the manager, never on the
event loop: nothing proportional to a payload runs on the loop (the payload
is copied once, by the call on its worker thread, so do not change it until
the call has returned), and long batches are validated a chunk at a time so
the worker never holds the GIL for long. A cancelled call still completes its write (cancellation only
stops the wait). Events are those of :meth:`SessionManager.observe`, queued
per stream up to ``max_queued``; a consumer that falls further behind gets
:class:`EventStreamOverflow` after the queued events, rather than the
publisher blocking or events vanishing silently.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import threading
from collections import deque
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

from ._hosts import embedded
from ._hosts.embedded import SessionManager
from ._hosts.helpers import AsyncHelpers, Helpers
from .clock import Clock
from .errors import EventStreamOverflow
from .ids import IdGen
from .store.base import SessionStore
from .store.fs import DEFAULT_CACHE_BYTES, Durability

T = TypeVar("T")

DEFAULT_WORKERS = 4
DEFAULT_MAX_QUEUED = 1000


class EventStream:
    """Events of one event function matching ``filters``, as an async iterator.

    Delivery starts when the stream is created (``asm.events(...)``), not at
    the first ``await``. Use it as ``async with``, or call :meth:`aclose`;
    closing the manager ends every stream (iteration stops after what is
    queued)."""

    def __init__(self, owner: AsyncSessionManager, function_id: str, filters: dict[str, Any] | None,
                 max_queued: int) -> None:
        if max_queued < 1:
            raise ValueError("max_queued must be at least 1")
        self.function_id = function_id
        self._owner = owner
        self._loop = asyncio.get_running_loop()
        self._max = max_queued
        self._queue: deque[dict[str, Any]] = deque()
        self._lock = threading.Lock()
        self._ready = asyncio.Event()
        self._overflowed = False
        self._closed = False
        source: dict[str, Any] = {"function_id": function_id}
        if filters:
            source["filters"] = filters
        # A publisher may deliver (and overflow) before observe() returns: the
        # handle is set under the lock, and a stop that came first applied here.
        self._observation: embedded.Observation | None = None
        observation = owner.sync.observe(source, self._deliver)
        with self._lock:
            self._observation = observation
            stopped = self._overflowed
        if stopped:
            observation.dispose()

    def _deliver(self, payload: dict[str, Any]) -> None:
        # Runs on the publishing thread, after the mutation is durable.
        with self._lock:
            if self._closed or self._overflowed:
                return
            if len(self._queue) >= self._max:
                self._overflowed = True
            else:
                self._queue.append(payload)
        if self._overflowed:
            self._dispose()
        try:
            self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the loop is gone: nobody will ever read this stream
            self._dispose()

    def _dispose(self) -> None:
        if self._observation is not None:
            self._observation.dispose()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while True:
            self._ready.clear()
            with self._lock:
                if self._queue:
                    return self._queue.popleft()
                if self._overflowed:
                    self._overflowed = False  # reported once; then the stream is just closed
                    self._close()
                    raise EventStreamOverflow(
                        f"{self.function_id}: the consumer fell more than {self._max} events behind"
                    )
                if self._closed:
                    raise StopAsyncIteration
            await self._ready.wait()

    def _close(self) -> None:
        self._closed = True
        self._dispose()
        self._owner._streams.discard(self)
        self._ready.set()

    async def aclose(self) -> None:
        """Stop delivery; iteration ends after what is already queued."""
        with self._lock:
            self._close()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()


class AsyncSessionManager(AsyncHelpers):
    """An open session store for asyncio code; see the module docstring.

    Wraps a :class:`~session_manager.SessionManager` (``sync``) and closes it
    when closed."""

    def __init__(self, sync: SessionManager, *, max_workers: int = DEFAULT_WORKERS) -> None:
        self.sync = sync
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="session-manager-aio")
        self._streams: set[EventStream] = set()
        self._closed = False
        self._closing: asyncio.Future[None] | None = None  # the shutdown every closer waits for

    async def call(self, function_id: str, payload: Any = None) -> Any:
        """Run one function on the thread pool; as :meth:`SessionManager.call`."""
        if self._closed:
            raise RuntimeError("this session manager is closed")
        # Handed over as it is: the sync call makes the one private copy on the worker thread
        # (a copy here would cost the loop time proportional to the payload).
        return await self._in_pool(self.sync.call, function_id, payload)

    async def _in_pool(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``work`` (a call or a typed helper) on the pool."""
        if self._closed:
            raise RuntimeError("this session manager is closed")
        running = asyncio.get_running_loop().run_in_executor(self._executor, lambda: work(*args, **kwargs))
        # Shielded: cancelling the wait must not cancel work still queued for a
        # worker (the write would silently never happen).
        running.add_done_callback(_retrieve)
        return await asyncio.shield(running)

    def _sync(self) -> Helpers:
        return self.sync

    def _list_limit_cap(self) -> int | None:
        return self.sync._list_limit_cap()

    def events(self, function_id: str, *, filters: dict[str, Any] | None = None,
               max_queued: int = DEFAULT_MAX_QUEUED) -> EventStream:
        """Stream the events of ``function_id`` (one of the six ``session::on-*``)
        matching ``filters`` (iii's filter language over ``input.*``)."""
        if self._closed:
            raise RuntimeError("this session manager is closed")
        stream = EventStream(self, function_id, filters, max_queued)
        self._streams.add(stream)
        return stream

    async def close(self) -> None:
        """End every event stream, wait for calls in flight, close the store.
        Every closer returns once the store is released (the data_dir may be
        reopened then); a cancelled close still completes."""
        if self._closing is None:
            self._closed = True
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        for stream in builtins.list(self._streams):
            await stream.aclose()
        await asyncio.to_thread(self._shutdown)

    def _shutdown(self) -> None:
        self._executor.shutdown(wait=True)
        self.sync.close()

    async def __aenter__(self) -> AsyncSessionManager:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


def _retrieve(future: asyncio.Future[Any]) -> None:
    # A shielded call's outcome when nobody awaits it any more (it was
    # cancelled): read it so asyncio does not log "never retrieved".
    if not future.cancelled():
        future.exception()


class Opening:
    """What :func:`open` returns: ``await`` it, or use it as ``async with``."""

    def __init__(self, max_workers: int, options: dict[str, Any]) -> None:
        self._max_workers = max_workers
        self._options = options
        self._opened: AsyncSessionManager | None = None

    async def _open(self) -> AsyncSessionManager:
        # Opening loads the logs: disk work, so off the loop too.
        sync = await asyncio.to_thread(lambda: embedded.open(**self._options))
        return AsyncSessionManager(sync, max_workers=self._max_workers)

    def __await__(self) -> Generator[Any, None, AsyncSessionManager]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncSessionManager:
        self._opened = await self._open()
        return self._opened

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._opened is not None:
            await self._opened.close()


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
    max_workers: int = DEFAULT_WORKERS,
) -> Opening:
    """Open a session store for asyncio code: ``async with aio.open(dir) as asm``
    or ``asm = await aio.open(dir)``. The options are those of
    :func:`session_manager.open`; ``max_workers`` sizes the thread pool."""
    options: dict[str, Any] = {
        "data_dir": data_dir,
        "store": store,
        "durability": durability,
        "ids": ids,
        "clock": clock,
        "default_list_limit": default_list_limit,
        "max_list_limit": max_list_limit,
        "max_attachment_bytes": max_attachment_bytes,
        "max_request_bytes": max_request_bytes,
        "max_batch_entries": max_batch_entries,
        "read_only": read_only,
        "cache_bytes": cache_bytes,
        "retention": retention,
    }
    return Opening(max_workers, options)


__all__ = [
    "DEFAULT_MAX_QUEUED",
    "DEFAULT_WORKERS",
    "AsyncSessionManager",
    "EventStream",
    "EventStreamOverflow",
    "Opening",
    "open",
]
