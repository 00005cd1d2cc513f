"""Mutations that race an append from another process: fork, set-active-leaf, delete.

Each role runs in its own Python process (its own pool, locks and listener);
they share nothing but the database.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter
from typing import Any

import pytest

import session_manager
from tests import pg_support
from tests.pg_support import text

pytestmark = pytest.mark.postgres


def role(schema_name: str, job: str, sids: dict[str, str], start: Any, deleted: Any, out: Any) -> None:
    """One instance playing one part; puts ``(job, results)`` on ``out``."""
    sm = session_manager.open(store=pg_support.open_store(schema_name))
    results: list[Any] = []
    start.wait()

    def wait_for_messages(name: str, n: int) -> None:
        # Race the appends, not the process start-up of a busy machine.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(
                sm.call("session::messages-tail", {"session_id": sids[name], "limit": n})["messages"]) < n:
            time.sleep(0.01)

    try:
        if job == "append":
            for i in range(60):
                if i == 30:
                    # Half the rounds come after the delete whatever the scheduling: the
                    # rounds before race it (appends got fast enough to finish all 60
                    # before a deleter that a loaded machine started late).
                    deleted.wait(60)
                for name in ("S", "L", "D"):
                    try:
                        sm.call("session::append", {"session_id": sids[name], "entry_id": f"{name}{i}",
                                                    "message": text(f"{name}{i}")})
                        results.append([name, "ack", f"{name}{i}"])
                    except session_manager.SessionError as e:
                        results.append([name, e.code, f"{name}{i}"])
        elif job == "fork":
            wait_for_messages("S", 1)
            for _ in range(20):
                tail = sm.call("session::messages-tail", {"session_id": sids["S"], "limit": 1})["messages"]
                if tail:
                    eid = tail[-1]["entry_id"]
                    results.append([sm.call("session::fork", {"session_id": sids["S"], "entry_id": eid})
                                    ["session_id"], eid])
                time.sleep(0.01)
        elif job == "leaf":
            wait_for_messages("L", 3)
            for _ in range(30):
                tail = sm.call("session::messages-tail", {"session_id": sids["L"], "limit": 4})["messages"]
                if len(tail) >= 3:
                    sm.call("session::set-active-leaf", {"session_id": sids["L"], "entry_id": tail[0]["entry_id"]})
                    results.append(tail[0]["entry_id"])
                time.sleep(0.01)
        elif job == "delete":
            wait_for_messages("D", 10)
            results.append(sm.call("session::delete", {"session_id": sids["D"]})["deleted"])
            deleted.set()
    except BaseException as e:  # reported, so the test fails naming it instead of timing out
        results = [f"{job} failed: {type(e).__name__}: {e}"]
    finally:
        sm.close()
    out.put((job, results))


def test_fork_leaf_moves_and_delete_racing_appends_from_other_processes(schema: str) -> None:
    # Prevents: a fork copying a half-written chain, a leaf move interleaving an append's
    # read-check-write (an orphan or a lost entry), or a delete racing an append into a
    # resurrected session or orphan rows.
    ctx = multiprocessing.get_context("spawn")
    with session_manager.open(store=pg_support.open_store(schema)) as sm:
        sids = {name: sm.call("session::create", {"title": name})["session_id"] for name in ("S", "L", "D")}
        start, deleted, out = ctx.Event(), ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=role, args=(schema, job, sids, start, deleted, out))
                 for job in ("append", "fork", "leaf", "delete")]
        for p in procs:
            p.start()
        start.set()
        results = dict(out.get(timeout=120) for _ in procs)
        assert not [r for r in results.values() if r and isinstance(r[0], str) and " failed: " in r[0]], results
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        store = sm.service.store
        acked = Counter(name for name, code, _ in results["append"] if code == "ack")
        assert {code for _, code, _ in results["append"]} <= {"ack", "session/not_found"}

        # S: one chain; every fork is exactly the prefix up to its fork point.
        chain = [e["id"] for e in store.path(sids["S"], store.get_leaf(sids["S"]))]
        assert sorted(chain) == sorted(f"S{i}" for i in range(60)) and acked["S"] == 60
        assert results["fork"], "no fork ran"
        for fork_sid, eid in results["fork"]:
            fork = sm.call("session::messages-tail", {"session_id": fork_sid, "limit": 100})["messages"]
            texts = [m["message"]["content"][0]["text"] for m in fork]
            assert texts == chain[: chain.index(eid) + 1]
            meta = sm.call("session::get", {"session_id": fork_sid})["meta"]
            assert meta["message_count"] == len(store.entries(fork_sid)) == len(texts)

        # L: branches, but every entry hangs off one that exists; counts exact; the leaf exists.
        entries = store.entries(sids["L"])
        ids = [e["id"] for e in entries]
        assert sorted(ids) == sorted(f"L{i}" for i in range(60)) and results["leaf"]
        assert all(e["parent_id"] is None or e["parent_id"] in ids for e in entries)
        assert sm.call("session::get", {"session_id": sids["L"]})["meta"]["message_count"] == 60
        assert store.get_entry(sids["L"], store.get_leaf(sids["L"])) is not None

        # D: deleted once; every later append was not_found; nothing of it is left.
        assert results["delete"] == [True]
        codes = [code for name, code, _ in results["append"] if name == "D"]
        assert codes == sorted(codes, key=lambda c: c != "ack")  # acks, then only not_found
        assert acked["D"] >= 10 and "session/not_found" in codes
        assert sm.call("session::get", {"session_id": sids["D"]}) is None
        assert store.entries(sids["D"]) == [] and store.get_leaf(sids["D"]) is None
