"""Tenant isolation of ``session::search``, against a brute-force oracle.

Random sessions of random owners, random messages over a small vocabulary
(so words collide across tenants), random queries: a search filtered on
``{owner: A}`` returns exactly the entries of A's sessions whose words match
(every word whole, the last as a prefix), across all its pages, each once,
and never another owner's. Prevents: a cross-tenant leak, or a tenant's hit
lost because another tenant's hits filled the page.
"""

from __future__ import annotations

import tempfile
import unicodedata

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import session_manager
from session_manager.store import MemoryStore

VOCAB = ["apple", "apricot", "Äpfel", "banana", "band", "cherry", "CHERRY", "date", "dà", "fig"]
OWNERS = ["a", "b", "c"]

sessions_st = st.lists(
    st.tuples(st.sampled_from(OWNERS), st.lists(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=5),
                                                min_size=0, max_size=4)),
    min_size=1, max_size=6,
)
query_st = st.tuples(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=3), st.integers(1, 4),
                     st.sampled_from(OWNERS))


def folded(word: str) -> str:
    d = unicodedata.normalize("NFKD", word)
    return "".join(c for c in d if not unicodedata.combining(c)).casefold()


def oracle_match(text_words: list[str], query: list[str], cut: int) -> bool:
    have = [folded(w) for w in text_words]
    *whole, last = [folded(w) for w in query]
    last = last[:cut]
    return all(w in have for w in whole) and any(h.startswith(last) for h in have)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions=sessions_st, queries=st.lists(query_st, min_size=1, max_size=4), fs=st.booleans())
def test_a_tenant_sees_all_and_only_its_matches(sessions: list[tuple[str, list[list[str]]]],
                                                 queries: list[tuple[list[str], int, str]], fs: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        sm = session_manager.open(d) if fs else session_manager.open(store=MemoryStore())
        try:
            texts: dict[tuple[str, str], tuple[str, list[str]]] = {}
            for owner, messages in sessions:
                sid = sm.call("session::create", {"metadata": {"owner": owner}})["session_id"]
                for words in messages:
                    msg = {"role": "user", "content": [{"type": "text", "text": " ".join(words)}], "timestamp": 1}
                    eid = sm.call("session::append", {"session_id": sid, "message": msg})["entry_id"]
                    texts[(sid, eid)] = (owner, words)
            for words, cut, owner in queries:
                query = " ".join([*words[:-1], words[-1][:cut]])
                want = {k for k, (o, w) in texts.items() if o == owner and oracle_match(w, words, cut)}
                got: list[tuple[str, str]] = []
                cursor = None
                while True:
                    req = {"query": query, "metadata": {"owner": owner}, "limit": 2}
                    page = sm.call("session::search", req if cursor is None else {**req, "cursor": cursor})
                    got += [(h["session_id"], h["entry_id"]) for h in page["hits"]]
                    cursor = page.get("next_cursor")
                    if cursor is None:
                        break
                    assert len(page["hits"]) == 2
                assert len(got) == len(set(got))
                assert set(got) == want, query
        finally:
            sm.close()
