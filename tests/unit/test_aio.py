"""The asyncio API: coroutines over the same table, storage off the loop, event streams."""

from __future__ import annotations

import asyncio
import inspect
import threading
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import aio
from session_manager._wire.events import ON_CREATED, ON_MESSAGE_ADDED
from session_manager.clock import ManualClock
from session_manager.errors import INVALID_REQUEST, SessionError
from session_manager.ids import SequentialIds
from session_manager.messages import user_message

START_MS = 1_000_000


def opening(where: Path, **options: Any) -> aio.Opening:
    return aio.open(where, ids=SequentialIds(), clock=ManualClock(START_MS), **options)


def test_open_takes_the_embedded_options() -> None:
    # Prevents: aio.open drifting from session_manager.open (an option one has and the other lacks).
    sync = list(inspect.signature(session_manager.open).parameters)
    assert list(inspect.signature(aio.open).parameters) == [*sync, "max_workers"]


def test_async_calls_run_off_the_loop_and_answer_as_the_sync_api(tmp_path: Path) -> None:
    # Prevents: storage work blocking the event loop, or the async API answering differently.
    threads: list[str] = []

    async def main() -> tuple[Any, Any, str]:
        async with opening(tmp_path / "d") as asm:
            asm.sync.observe({"function_id": ON_CREATED}, lambda e: threads.append(threading.current_thread().name))
            created = await asm.create(title="T")
            await asm.append(created.session_id, message=user_message("hi", timestamp=3))
            raw = await asm.call("session::messages", {"session_id": created.session_id})
            typed = await asm.messages(created.session_id)
            with pytest.raises(SessionError) as bad:
                await asm.call("session::messages", {"session_id": created.session_id, "limt": 1})
            assert bad.value.code == INVALID_REQUEST
            assert await asm.get("s_404") is None
            return raw, typed, threading.current_thread().name

    raw, typed, loop_thread = asyncio.run(main())
    assert raw == {"messages": [{"entry_id": "e_001", "message": {
        "role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 3}}]}
    assert typed.model_dump(mode="json") == raw
    assert threads and all(t.startswith("session-manager-aio") and t != loop_thread for t in threads)
    with session_manager.open(tmp_path / "d") as again:  # closed cleanly, readable after
        assert again.call("session::messages", {"session_id": "s_001"}) == raw


def test_concurrent_appends_through_the_async_api_chain_without_loss(tmp_path: Path) -> None:
    # Prevents: lost or interleaved writes when many coroutines append to one session at once
    # (the pool runs them on several threads; the per-session lock must serialize them).
    async def main() -> None:
        async with opening(tmp_path / "d", max_workers=4) as asm:
            sid = (await asm.create()).session_id
            await asyncio.gather(*(asm.append(sid, message=user_message(str(i), timestamp=i)) for i in range(40)))

    asyncio.run(main())
    with session_manager.open(tmp_path / "d") as sm:
        page = sm.messages("s_001", limit=100).messages
        assert len(page) == 40
        texts = sorted(int(m.message.content[0].text) for m in page)  # type: ignore[union-attr]
        assert texts == list(range(40))
        parents = [sm.get_message("s_001", entry_id=m.entry_id) for m in page]
        chain = [p.entry.parent_id for p in parents if p is not None]
        assert chain == [None, *[m.entry_id for m in page[:-1]]]
        meta = sm.get("s_001")
        assert meta is not None and meta.meta.message_count == 40


def test_event_stream_delivers_matching_events_in_order_and_closes(tmp_path: Path) -> None:
    # Prevents: a stream missing events published right after it was opened, delivering events
    # its filter excludes, or leaving its observer registered after it is closed.
    async def main() -> None:
        async with opening(tmp_path / "d") as asm:
            mine = (await asm.create(metadata={"tenant": "a"})).session_id
            other = (await asm.create(metadata={"tenant": "b"})).session_id
            filters = {"input.session_metadata.tenant": {"$eq": "a"}}
            async with asm.events(ON_MESSAGE_ADDED, filters=filters) as stream:
                assert asm.sync.is_observed(ON_MESSAGE_ADDED)
                await asm.append(other, message=user_message("no", timestamp=1))
                for i in range(3):
                    await asm.append(mine, message=user_message(f"m{i}", timestamp=i))
                got = [await anext(stream) for _ in range(3)]
                assert [e["message"]["content"][0]["text"] for e in got] == ["m0", "m1", "m2"]
                assert {e["session_id"] for e in got} == {mine}
                assert got[0]["session_metadata"] == {"tenant": "a"}
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(anext(stream), 0.05)  # nothing else matches
            assert not asm.sync.is_observed(ON_MESSAGE_ADDED)
            with pytest.raises(StopAsyncIteration):
                await anext(stream)
            with pytest.raises(ValueError):
                asm.events("session::create")

    asyncio.run(main())


def test_events_published_by_other_threads_reach_the_loop(tmp_path: Path) -> None:
    # Prevents: an event stream that only sees mutations made through the async API.
    async def main() -> None:
        async with opening(tmp_path / "d") as asm:
            sid = (await asm.create()).session_id
            stream = asm.events(ON_MESSAGE_ADDED)
            writer = threading.Thread(target=lambda: asm.sync.append(sid, message=user_message("t", timestamp=1)))
            writer.start()
            event = await asyncio.wait_for(anext(stream), 5)
            writer.join()
            assert event["entry_id"] == "e_001"
            await stream.aclose()

    asyncio.run(main())


def test_a_consumer_that_falls_behind_gets_overflow_after_the_queued_events(tmp_path: Path) -> None:
    # Prevents: an unbounded queue (memory grows without limit) or events dropped silently.
    async def main() -> None:
        async with opening(tmp_path / "d") as asm:
            sid = (await asm.create()).session_id
            stream = asm.events(ON_MESSAGE_ADDED, max_queued=2)
            for i in range(4):
                await asm.append(sid, message=user_message(str(i), timestamp=i))
            assert not asm.sync.is_observed(ON_MESSAGE_ADDED)  # stopped at the overflow
            assert [(await anext(stream))["entry_id"] for _ in range(2)] == ["e_001", "e_002"]
            with pytest.raises(aio.EventStreamOverflow):
                await anext(stream)
            with pytest.raises(StopAsyncIteration):
                await anext(stream)
            assert len((await asm.messages(sid)).messages) == 4  # the writes all stand

    asyncio.run(main())


def test_closing_the_manager_ends_streams_and_refuses_calls(tmp_path: Path) -> None:
    # Prevents: a consumer hanging forever on a closed manager, or calls into a closed store.
    async def main() -> None:
        asm = await opening(tmp_path / "d")
        sid = (await asm.create()).session_id
        stream = asm.events(ON_MESSAGE_ADDED)
        waiting = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0)
        await asm.close()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(waiting, 5)
        with pytest.raises(RuntimeError):
            await asm.append(sid, message=user_message("late", timestamp=1))
        await asm.close()  # twice is fine

    asyncio.run(main())
    with session_manager.open(tmp_path / "d") as sm:  # the lock was released
        assert sm.messages("s_001").messages == []


def test_a_call_cancelled_while_queued_for_a_worker_still_completes_its_write(tmp_path: Path) -> None:
    # Prevents: cancelling a call that waits behind busy pool threads dropping its write (the
    # module promises cancellation only stops the wait), so the caller cannot know what stands.
    async def main() -> None:
        async with opening(tmp_path / "d", max_workers=1) as asm:
            sid = (await asm.create()).session_id
            entered, release = threading.Event(), threading.Event()

            def hold(event: Any) -> None:  # runs on the only worker thread, after the write
                entered.set()
                release.wait(10)

            held = asm.sync.observe({"function_id": ON_CREATED}, hold)
            blocker = asyncio.ensure_future(asm.create(title="blocker"))
            while not entered.is_set():
                await asyncio.sleep(0.005)
            queued = asyncio.ensure_future(asm.append(sid, message=user_message("queued", timestamp=7)))
            await asyncio.sleep(0.02)  # submitted, but the worker is busy
            queued.cancel()
            release.set()
            await blocker
            with pytest.raises(asyncio.CancelledError):
                await queued
            held.dispose()

    asyncio.run(main())
    with session_manager.open(tmp_path / "d") as sm:  # after a restart, the cancelled write stands
        page = sm.call("session::messages", {"session_id": "s_001"})
        assert page == {"messages": [{"entry_id": "e_001", "message": {
            "role": "user", "content": [{"type": "text", "text": "queued"}], "timestamp": 7}}]}


def test_a_payload_nested_too_deeply_is_an_invalid_request(tmp_path: Path) -> None:
    # Prevents: the async API's own payload copy raising RecursionError (a traceback) where the
    # sync call() answers session/invalid_request.
    deep: Any = None
    for _ in range(5000):
        deep = {"x": deep}

    async def main() -> None:
        async with opening(tmp_path / "d") as asm:
            sid = (await asm.create()).session_id
            events = asm.events(ON_MESSAGE_ADDED)
            with pytest.raises(SessionError) as refused:
                await asm.call("session::append", {"session_id": sid, "custom": {"custom_type": "x", "data": deep}})
            assert refused.value.code == INVALID_REQUEST
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(anext(events), 0.05)  # nothing announced
            await events.aclose()
            assert (await asm.messages(sid, include_custom=True)).messages == []

    asyncio.run(main())


def test_an_overflow_delivered_while_the_stream_is_being_opened_still_stops_delivery(tmp_path: Path) -> None:
    # Prevents: a publisher thread overflowing a new stream between its observer's registration
    # and the stream keeping the handle (AttributeError in the publisher, observer never removed).
    async def main() -> None:
        async with opening(tmp_path / "d") as asm:
            real = asm.sync.observe

            def racing(source: dict[str, Any], handler: Any) -> Any:
                observation = real(source, handler)
                handler({"entry_id": "e_1"})  # what a publisher on another thread delivers first
                handler({"entry_id": "e_2"})
                return observation

            asm.sync.observe = racing  # type: ignore[method-assign]
            stream = asm.events(ON_MESSAGE_ADDED, max_queued=1)
            assert not asm.sync.is_observed(ON_MESSAGE_ADDED)
            assert (await anext(stream))["entry_id"] == "e_1"
            with pytest.raises(aio.EventStreamOverflow):
                await anext(stream)
            with pytest.raises(StopAsyncIteration):
                await anext(stream)

    asyncio.run(main())


def test_a_second_close_returns_only_once_the_store_is_released(tmp_path: Path) -> None:
    # Prevents: a second `await asm.close()` (an explicit close inside `async with`, another
    # task's cleanup) returning while the first still waited for a call in flight, so a reopen
    # of the data_dir right after it failed as held by this very process.
    async def main() -> None:
        asm = await opening(tmp_path / "d")
        sid = (await asm.create()).session_id
        entered, release = threading.Event(), threading.Event()

        def hold(event: Any) -> None:  # on a worker thread, after the write
            entered.set()
            release.wait(10)

        asm.sync.observe({"function_id": ON_MESSAGE_ADDED}, hold)
        writing = asyncio.ensure_future(asm.append(sid, message=user_message("in flight", timestamp=5)))
        while not entered.is_set():
            await asyncio.sleep(0.005)
        first = asyncio.ensure_future(asm.close())
        await asyncio.sleep(0.02)
        second = asyncio.ensure_future(asm.close())
        await asyncio.sleep(0.2)
        assert not second.done(), "the second close() returned before the store was released"
        release.set()
        await asyncio.wait_for(asyncio.gather(first, second), 10)
        assert (await writing).entry_id == "e_001"
        with session_manager.open(tmp_path / "d") as again:  # released: reopens at once
            assert again.call("session::messages", {"session_id": sid})["messages"] == [
                {"entry_id": "e_001", "message": {"role": "user", "content": [{"type": "text", "text": "in flight"}],
                                                  "timestamp": 5}}]

    asyncio.run(main())
