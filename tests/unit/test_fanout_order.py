"""The order of a main's fan-out across the engine (``_worker/fanout_order``).

Prevents: a bridge or a viewer over an engine handing a session's events to its
observers the other way round when the engine ran two ``on-events`` invocations
out of order (a streamed reply's updates arrived as "w1 w2 w3", "w1 w2", ...:
test_data_serve_of_a_real_main_worker_streams_its_events_over_the_engine failed so
in a fresh-clone CI emulation)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from session_manager._wire.events import Event
from session_manager._worker.fanout_order import Numbering, Reorder, numbers_of
from session_manager.store.bridge import protocol as sp


def _wait_for(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline, "not delivered in time"
        time.sleep(0.01)


def _event(i: int) -> Event:
    return Event("session::on-message-updated", {"session_id": "s_1", "entry_id": "e_1", "revision": i})


def test_envelopes_shuffled_across_threads_come_out_in_numbered_order() -> None:
    numbering = Numbering()
    envelopes = [numbering.stamp(sp.envelope(_event(i))) for i in range(1, 202)]
    assert [numbers_of(e) for e in envelopes] == [(numbering.stream, i) for i in range(1, 202)]
    out: list[int] = []
    order = Reorder(lambda ev: out.append(ev.payload["revision"]), gap_s=5)
    first, rest = envelopes[0], envelopes[1:]
    order.receive(Event(str(first["function_id"]), first["payload"]), numbers_of(first))
    assert out == [1]  # a stream's first envelope is handed on at once
    random.Random(7).shuffle(rest)

    def feed(chunk: list[dict[str, object]]) -> None:
        for raw in chunk:
            payload = raw["payload"]
            assert isinstance(payload, dict)
            order.receive(Event(str(raw["function_id"]), payload), numbers_of(raw))

    threads = [threading.Thread(target=feed, args=(rest[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == list(range(1, 202))  # each once, in order, nothing left waiting for a gap
    order.close()


def test_a_number_that_never_comes_holds_the_rest_back_only_for_the_gap() -> None:
    out: list[int] = []
    order = Reorder(lambda ev: out.append(ev.payload["revision"]), gap_s=0.1)
    order.receive(_event(1), ("a", 1))
    order.receive(_event(3), ("a", 3))  # 2 was lost by the engine
    order.receive(_event(4), ("a", 4))
    assert out == [1]
    _wait_for(lambda: len(out) == 3)
    assert out == [1, 3, 4]
    order.receive(_event(2), ("a", 2))  # late: handed on, not dropped
    order.receive(_event(5), ("a", 5))
    assert out == [1, 3, 4, 2, 5]
    order.close()


def test_a_restarted_main_an_unnumbered_envelope_and_close_pass_what_is_held() -> None:
    out: list[int] = []
    order = Reorder(lambda ev: out.append(ev.payload["revision"]), gap_s=5)
    order.receive(_event(1), ("old", 1))
    order.receive(_event(2), ("old", 3))  # held: 2 missing
    order.receive(_event(3), ("new", 1))  # a restarted main numbers from 1 again: the held one goes first
    order.receive(_event(4), None)  # an older main's envelope carries no numbers
    assert out == [1, 2, 3, 4]
    order.receive(_event(5), ("new", 3))  # held: 2 missing
    order.close()
    assert out == [1, 2, 3, 4, 5]
    assert numbers_of({"stream": "x", "seq": True}) is None and numbers_of({"seq": 1}) is None
