"""Paging through ``session::search`` while other writers append and delete.

Random sessions of random messages over a small vocabulary; a random query walked page by page
(limit 1-3) with random appends (to a session in scope or a new one, hits or not) and session
deletes between the pages. The union of the pages holds no hit twice and every hit that existed
throughout (its session never deleted); each hit shown matches the query. Prevents review17's
cursor defect: a cursor naming its place by a score the scope's statistics move, so an append or
delete between pages repeated page 1 or skipped every remaining hit.
"""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import session_manager
from session_manager.store import MemoryStore

VOCAB = ["apple", "banana", "cherry", "date", "fig", "grape"]

words_st = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6)
sessions_st = st.lists(st.lists(words_st, min_size=1, max_size=3), min_size=1, max_size=6)
# Between two pages: ("append", session index, words), ("new", words) or ("delete", session index).
op_st = st.one_of(st.tuples(st.just("append"), st.integers(0, 20), words_st),
                  st.tuples(st.just("new"), st.integers(0, 0), words_st),
                  st.tuples(st.just("delete"), st.integers(0, 20), st.just([])))


def _msg(words: list[str], ts: int) -> dict[str, object]:
    return {"role": "user", "content": [{"type": "text", "text": " ".join(words)}], "timestamp": ts}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions=sessions_st, word=st.sampled_from(VOCAB), limit=st.integers(1, 3),
       between=st.lists(st.lists(op_st, max_size=3), min_size=1, max_size=12),
       kind=st.sampled_from(["memory", "fs", "sqlite"]), scoped=st.booleans())
def test_pages_interleaved_with_appends_and_deletes_show_each_lasting_hit_once(
        sessions: list[list[list[str]]], word: str, limit: int, between: list[list[tuple[str, int, list[str]]]],
        kind: str, scoped: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        sm = (session_manager.open(store=MemoryStore()) if kind == "memory" else session_manager.open(d)
              if kind == "fs" else session_manager.open(f"sqlite:///{d}/s.db"))
        try:
            ts = 0
            ids: list[str] = []
            hits: set[tuple[str, str]] = set()  # (session, entry) of every entry matching, ever
            for messages in sessions:
                sid = sm.call("session::create", {"metadata": {"owner": "a"}})["session_id"]
                ids.append(sid)
                for words in messages:
                    ts += 1
                    eid = sm.call("session::append", {"session_id": sid, "message": _msg(words, ts)})["entry_id"]
                    if word in words:
                        hits.add((sid, eid))
            lasting = set(hits)
            deleted: set[str] = set()
            extra = {"metadata": {"owner": "a"}} if scoped else {}
            seen: list[tuple[str, str]] = []
            cursor = None
            ops = iter(between)
            for _ in range(200):
                page = sm.call("session::search", {"query": word, "limit": limit, **extra,
                                                   **({"cursor": cursor} if cursor else {})})
                for h in page["hits"]:
                    assert (h["session_id"], h["entry_id"]) in hits
                    assert h["session_id"] not in deleted
                seen.extend((h["session_id"], h["entry_id"]) for h in page["hits"])
                cursor = page.get("next_cursor")
                if cursor is None:
                    break
                for op, i, words in next(ops, []):
                    live = [s for s in ids if s not in deleted]
                    if op == "delete" and live:
                        sid = live[i % len(live)]
                        sm.call("session::delete", {"session_id": sid})
                        deleted.add(sid)
                        lasting = {h for h in lasting if h[0] != sid}
                        continue
                    if op == "new" or not live:
                        sid = sm.call("session::create", {"metadata": {"owner": "a"}})["session_id"]
                        ids.append(sid)
                    else:
                        sid = live[i % len(live)]
                    ts += 1
                    eid = sm.call("session::append", {"session_id": sid, "message": _msg(words, ts)})["entry_id"]
                    if word in words:
                        hits.add((sid, eid))
            else:
                raise AssertionError("pages never ended")
            assert len(seen) == len(set(seen)), "a hit shown twice"
            assert lasting <= set(seen), "a hit that existed throughout was skipped"
        finally:
            sm.close()
