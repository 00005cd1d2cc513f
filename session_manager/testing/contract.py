"""The storage contract: one behaviour suite every adapter of :class:`SessionStore` passes.

:class:`StoreContract` is an abstract pytest test case: a test class per
adapter subclasses it and says how to open that adapter
(:meth:`StoreContract.open_store`), so every contract test (the concurrent
writers of :class:`~session_manager.testing.contract_concurrency.ConcurrentWriters`
included) runs against every adapter, and a test added here covers them all.
A third-party adapter runs the whole suite in three lines (pytest collects it
only through such a subclass, whose name starts with ``Test``)::

    from session_manager.testing import StoreContract

    class TestMyStore(StoreContract):
        def open_store(self, tmp_path):
            yield MyStore(tmp_path / "data")  # code after the yield cleans up

Override :meth:`StoreContract.reopened` to have the read-backs checked on a
fresh store over what the store under test wrote (a durable adapter), and
:meth:`~session_manager.testing.contract_concurrency.ConcurrentWriters.second_writer`
when two writers are two clients rather than two threads over one store.

The builders at the top produce the exact dicts the domain service hands a
store; other suites import them. Importing this module needs pytest.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from session_manager.store import Commit, SessionStore
from session_manager.store.search_index import Candidate, SortKey, Stats, rank
from session_manager.store.search_text import parse_query

from .contract_concurrency import ConcurrentWriters

T0 = 1_000_000

# -- builders ------------------------------------------------------------------


def meta(session_id: str, *, message_count: int = 0, updated_at: int = T0, **extra: Any) -> dict[str, Any]:
    """A session meta as create/ensure would store it, plus ``extra`` fields."""
    out: dict[str, Any] = {"session_id": session_id, "title": "", "description": "", "status": "idle"}
    out.update(extra)
    out.update(created_at=T0, updated_at=updated_at, message_count=message_count)
    return out


def message(entry_id: str, parent_id: str | None, text: str = "hi", *, revision: int = 0) -> dict[str, Any]:
    """A stored user-message entry holding one text block."""
    return {
        "kind": "message",
        "id": entry_id,
        "parent_id": parent_id,
        "timestamp": T0,
        "revision": revision,
        "message": {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1},
    }


def custom(entry_id: str, parent_id: str | None, data: Any = None) -> dict[str, Any]:
    """A stored custom (non-message) entry."""
    return {
        "kind": "custom",
        "id": entry_id,
        "parent_id": parent_id,
        "timestamp": T0,
        "revision": 0,
        "custom_type": "note",
        "data": data,
    }


def attachment(session_id: str, attachment_id: str, size: int = 0) -> dict[str, Any]:
    """Attachment metadata as put-attachment hands it over (hash filled in by the chunks)."""
    return {
        "attachment_id": attachment_id,
        "session_id": session_id,
        "name": "notes.txt",
        "mime": "text/plain",
        "size": size,
        "sha256": "",
        "created_at": T0,
    }


def append(store: SessionStore, session_id: str, entry: dict[str, Any], count: int) -> None:
    """What session::append commits: the entry, the leaf on it, the meta."""
    store.commit(session_id, Commit(entries=(entry,), leaf=entry["id"], meta=meta(session_id, message_count=count)))


def path_ids(store: SessionStore, session_id: str, leaf: str | None) -> list[str]:
    return [e["id"] for e in store.path(session_id, leaf)]

def chunks_then_hash(target: dict[str, Any], parts: list[bytes]) -> Iterator[bytes]:
    """Yield ``parts``, then complete ``target`` the way put-attachment fills in the hash."""
    yield from parts
    target["sha256"] = "done"


class StoreContract(ConcurrentWriters, ABC):
    """The contract; subclasses name the adapter (the concurrent-writer part
    is :class:`~session_manager.testing.contract_concurrency.ConcurrentWriters`)."""

    @abstractmethod
    def open_store(self, tmp_path: Path) -> Iterator[SessionStore]:
        """Yield a fresh, empty store that keeps its files (if any) under
        ``tmp_path``; code after the ``yield`` cleans up."""

    def reopened(self, tmp_path: Path) -> list[SessionStore]:
        """Fresh stores over what the store under test wrote (durable
        adapters): the contract's read-backs are checked on them too."""
        return []

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SessionStore]:
        yield from self.open_store(tmp_path)

    @pytest.fixture
    def three(self, store: SessionStore) -> SessionStore:
        """Session s_1 with the chain e_1 <- e_2 <- e_3, leaf e_3, 3 messages."""
        store.commit("s_1", Commit(meta=meta("s_1")))
        parent = None
        for n in (1, 2, 3):
            append(store, "s_1", message(f"e_{n}", parent, f"m{n}"), n)
            parent = f"e_{n}"
        return store

    # -- sessions and entries ------------------------------------------------------------


    def test_unknown_session_reads_as_absent(self, store: SessionStore) -> None:
        # Prevents: a read of an unknown id raising, or creating the session as a side effect.
        assert store.get_meta("nope") is None
        assert store.get_entry("nope", "e_1") is None
        assert store.get_leaf("nope") is None
        assert store.entries("nope") == []
        assert len(store.path("nope", None)) == 0
        assert len(store.path("nope", "e_1")) == 0
        assert store.list_metas() == []


    def test_meta_only_commit_creates_the_session(self, store: SessionStore) -> None:
        # Prevents: create (a meta-only commit) not being visible, or inventing a leaf.
        m = meta("s_1", title="T", metadata={"owner": "u_1"})
        store.commit("s_1", Commit(meta=m))
        assert store.get_meta("s_1") == m
        assert store.get_leaf("s_1") is None
        assert store.entries("s_1") == []
        assert store.list_metas() == [m]


    def test_append_commit_stores_entry_leaf_and_meta(self, three: SessionStore) -> None:
        # Prevents: one of the three parts of an append commit going missing.
        assert three.get_leaf("s_1") == "e_3"
        assert three.get_meta("s_1") == meta("s_1", message_count=3)
        assert three.get_entry("s_1", "e_2") == message("e_2", "e_1", "m2")
        assert sorted(e["id"] for e in three.entries("s_1")) == ["e_1", "e_2", "e_3"]
        assert path_ids(three, "s_1", "e_3") == ["e_1", "e_2", "e_3"]


    def test_multi_entry_commit_chains_in_one_mutation(self, store: SessionStore) -> None:
        # Prevents: append-many / fork commits losing entries or leaving the leaf behind.
        store.commit("s_1", Commit(meta=meta("s_1")))
        batch = (message("e_1", None), custom("e_2", "e_1", {"k": [1, 2]}), message("e_3", "e_2"))
        store.commit("s_1", Commit(entries=batch, leaf="e_3", meta=meta("s_1", message_count=2)))
        assert store.get_leaf("s_1") == "e_3"
        assert store.get_meta("s_1") == meta("s_1", message_count=2)
        assert [store.get_entry("s_1", e["id"]) for e in batch] == list(batch)
        assert path_ids(store, "s_1", "e_3") == ["e_1", "e_2", "e_3"]


    def test_path_to_any_entry_and_to_nothing(self, three: SessionStore) -> None:
        # Prevents: path() ignoring its leaf argument and always answering the active path.
        assert path_ids(three, "s_1", "e_2") == ["e_1", "e_2"]
        assert path_ids(three, "s_1", "e_1") == ["e_1"]
        assert path_ids(three, "s_1", None) == []
        assert path_ids(three, "s_1", "e_404") == []
        # Asking for a shorter path must not truncate the cached active one.
        assert path_ids(three, "s_1", "e_3") == ["e_1", "e_2", "e_3"]


    def test_the_reads_before_a_commit_answer_what_the_reads_do(self, three: SessionStore) -> None:
        # Prevents: the read a mutation makes right before its commit (a store may leave its
        # bookkeeping to that commit) answering otherwise than the plain read, on any adapter.
        for sid in ("s_1", "nope"):
            assert three.meta_and_leaf_to_commit(sid) == three.meta_and_leaf(sid)
            for eid in ("e_2", "e_404"):
                assert three.meta_and_entry_to_commit(sid, eid) == three.meta_and_entry(sid, eid)
        assert three.meta_and_leaf_to_commit("s_1") == (meta("s_1", message_count=3), "e_3")
        assert three.meta_and_entry_to_commit("s_1", "e_2") == (meta("s_1", message_count=3),
                                                                message("e_2", "e_1", "m2"))
        assert three.meta_and_leaf_to_commit("nope") == (None, None)
        assert three.get_meta("nope") is None  # the probe created nothing

    def test_entry_rewrite_is_last_wins(self, three: SessionStore) -> None:
        # Prevents: an update-message revision being lost or duplicated on read.
        edited = message("e_2", "e_1", "edited", revision=1)
        three.commit("s_1", Commit(entries=(edited,), meta=meta("s_1", message_count=3, updated_at=T0 + 5)))
        assert three.get_entry("s_1", "e_2") == edited
        assert [e for e in three.entries("s_1") if e["id"] == "e_2"] == [edited]
        assert [e["message"]["content"][0]["text"] for e in three.path("s_1", "e_3")] == ["m1", "edited", "m3"]
        assert three.get_leaf("s_1") == "e_3"
        assert three.get_meta("s_1") == meta("s_1", message_count=3, updated_at=T0 + 5)


    def test_meta_rewrite_is_last_wins(self, three: SessionStore) -> None:
        # Prevents: list or get returning an older meta after set-meta / set-status.
        for n in range(3):
            three.commit("s_1", Commit(meta=meta("s_1", message_count=3, title=f"t{n}")))
        assert three.get_meta("s_1") == meta("s_1", message_count=3, title="t2")
        assert three.list_metas() == [meta("s_1", message_count=3, title="t2")]


    def test_path_follows_a_branch_switch(self, three: SessionStore) -> None:
        # Prevents: a stale cached path after set-active-leaf, or a new branch not chaining from the new leaf.
        three.commit("s_1", Commit(leaf="e_1"))
        assert three.get_leaf("s_1") == "e_1"
        assert path_ids(three, "s_1", "e_1") == ["e_1"]
        append(three, "s_1", message("e_4", "e_1"), 4)
        assert path_ids(three, "s_1", three.get_leaf("s_1")) == ["e_1", "e_4"]
        # The abandoned branch stays whole and readable.
        assert path_ids(three, "s_1", "e_3") == ["e_1", "e_2", "e_3"]
        assert sorted(e["id"] for e in three.entries("s_1")) == ["e_1", "e_2", "e_3", "e_4"]
        three.commit("s_1", Commit(leaf="e_3"))
        assert path_ids(three, "s_1", three.get_leaf("s_1")) == ["e_1", "e_2", "e_3"]


    def test_leaf_may_be_a_custom_entry(self, store: SessionStore) -> None:
        # Prevents: custom entries being treated as second-class path members.
        store.commit("s_1", Commit(meta=meta("s_1")))
        append(store, "s_1", message("e_1", None), 1)
        append(store, "s_1", custom("e_2", "e_1"), 1)
        assert store.get_leaf("s_1") == "e_2"
        assert path_ids(store, "s_1", "e_2") == ["e_1", "e_2"]


    def test_sessions_are_independent(self, three: SessionStore) -> None:
        # Prevents: entries or leaves keyed by entry id alone leaking across sessions.
        three.commit("s_2", Commit(meta=meta("s_2")))
        append(three, "s_2", message("e_1", None, "other"), 1)
        assert three.get_entry("s_1", "e_1") == message("e_1", None, "m1")
        assert three.get_entry("s_2", "e_1") == message("e_1", None, "other")
        assert three.get_leaf("s_1") == "e_3"
        assert three.get_leaf("s_2") == "e_1"
        assert sorted(m["session_id"] for m in three.list_metas()) == ["s_1", "s_2"]


    def test_delete_session_removes_everything(self, three: SessionStore) -> None:
        # Prevents: a deleted session's entries, leaf or attachments resurfacing.
        three.put_attachment(attachment("s_1", "a_1", 3), [b"abc"])
        three.commit("s_2", Commit(meta=meta("s_2")))
        assert three.delete_session("s_1") is True  # the service fires on-deleted on this answer
        assert three.delete_session("s_1") is False  # issue 25 #3: a second delete removed nothing
        assert three.get_meta("s_1") is None
        assert three.get_entry("s_1", "e_1") is None
        assert three.get_leaf("s_1") is None
        assert three.entries("s_1") == []
        assert path_ids(three, "s_1", "e_3") == []
        assert three.list_attachments("s_1") == []
        assert three.get_attachment_meta("s_1", "a_1") is None
        assert three.read_attachment("s_1", "a_1") is None
        assert [m["session_id"] for m in three.list_metas()] == ["s_2"]
        assert three.get_meta("s_2") == meta("s_2")


    def test_recreated_session_starts_empty(self, three: SessionStore) -> None:
        # Prevents: ensure-after-delete resurrecting the old leaf or entries.
        three.list_metas()  # warm any listing cache before the delete
        three.delete_session("s_1")
        three.commit("s_1", Commit(meta=meta("s_1", title="again")))
        assert three.get_meta("s_1") == meta("s_1", title="again")
        assert three.get_leaf("s_1") is None
        assert three.entries("s_1") == []
        assert three.list_metas() == [meta("s_1", title="again")]


    def test_delete_unknown_session_is_harmless(self, three: SessionStore) -> None:
        # Prevents: delete of a missing session raising, claiming it deleted something (issue 25 #3),
        # or touching another session.
        assert three.delete_session("nope") is False
        assert three.get_meta("nope") is None
        assert three.get_leaf("s_1") == "e_3"
        assert [m["session_id"] for m in three.list_metas()] == ["s_1"]


    def test_hostile_session_ids_are_ordinary_keys(self, store: SessionStore) -> None:
        # Prevents: ids with separators, dots or non-ASCII being mangled or colliding.
        ids = ["../escape/chat 42:?", "..", "a/b", "a%2Fb", "ünï cødé", "\\x\x00y"]
        for n, sid in enumerate(ids):
            store.commit(sid, Commit(meta=meta(sid)))
            store.commit(sid, Commit(entries=(message("e_1", None, sid),), leaf="e_1",
                                     meta=meta(sid, message_count=1, title=str(n))))
        for n, sid in enumerate(ids):
            assert store.get_meta(sid) == meta(sid, message_count=1, title=str(n))
            assert store.get_entry(sid, "e_1") == message("e_1", None, sid)
        assert sorted(m["session_id"] for m in store.list_metas()) == sorted(ids)


    # -- search ---------------------------------------------------------------------------

    @pytest.fixture
    def corpus(self, store: SessionStore) -> SessionStore:
        """Four sessions whose messages repeat words (term counts above one), share
        texts and timestamps (score and timestamp ties), hold assistant replies, an
        edited entry and a custom entry."""
        texts = ["alpha beta gamma", "alpha alpha beta", "beta delta", "alphabet soup alpha", "gamma gamma gamma",
                 "alpha beta gamma", "alpine beta", "delta alpha"]
        for n, sid in enumerate(["s_a", "s_b", "s_c", "s_d"]):
            store.commit(sid, Commit(meta=meta(sid)))
            parent = None
            for i, text in enumerate(texts[n:] + texts[:n]):
                entry = message(f"e_{i}", parent, text)
                entry["timestamp"] = T0 + (i % 3)
                if i % 2:
                    entry["message"].update(role="assistant", stop_reason="end", model="m", provider="p")
                append(store, sid, entry, i + 1)
                parent = entry["id"]
            append(store, sid, custom("e_c", parent, "alpha alpha"), len(texts) + 1)
        edited = message("e_0", None, "beta beta omega", revision=1)
        store.commit("s_b", Commit(entries=(edited,), meta=meta("s_b", message_count=len(texts) + 1,
                                                                updated_at=T0 + 9)))
        return store

    @pytest.mark.parametrize("text", ["alpha", "alp", "beta al", "gamma", "delta alpha b", "omega", "nothing", "a"])
    def test_search_page_is_the_ranked_page_of_the_matches(self, corpus: SessionStore, text: str) -> None:
        # Prevents: a store ranking inside its index answering a page other than the one the
        # definition gives (order, score ties, the cursor, the session scope and roles filters).
        query = parse_query(text)
        assert query is not None
        for scope in (None, ["s_b", "s_d"], ["s_x"]):
            for roles in (None, ["assistant"]):
                matches = SessionStore.search(corpus, query, scope, roles)
                want = rank(matches, 1000, None)
                got = corpus.search_page(query, scope, roles, 1000, None)
                assert got == want
                if got:  # (the statistics it was ranked with: what a cursor carries)
                    assert got.stats == want.stats == Stats(matches.docs, matches.total_length, tuple(matches.df))
                # A cursor's statistics (here other than the scope's: as after appends and deletes)
                # score every page walked with them, in the store's own page statement too.
                frozen = Stats(matches.docs + 7, matches.total_length + 90, tuple(d + 1 for d in matches.df))
                want_frozen = rank(matches, 1000, None, frozen)
                for limit in (1, 2, 5):
                    for stats, expected in ((None, want), (frozen, want_frozen)):
                        walked: list[tuple[SortKey, Candidate]] = []
                        after: SortKey | None = None
                        while True:
                            page = corpus.search_page(query, scope, roles, limit, after, stats)
                            assert len(page) <= limit
                            walked += page
                            if len(page) < limit:
                                break
                            after = page[-1][0]
                            stats = page.stats
                        assert walked == expected, (text, scope, roles, limit, stats)

    def test_entries_on_active_path_read_each_entry_and_its_place(self, three: SessionStore) -> None:
        # Prevents: a search hit shown with another entry's body, or flagged on the active path
        # from a branch the leaf left (or the other way round).
        append(three, "s_1", message("e_4", "e_2", "branch"), 4)  # the leaf moves to e_4: e_3 is off it
        got = three.entries_on_active_path("s_1", ["e_3", "e_1", "e_4", "e_9"])
        assert got == [(message("e_3", "e_2", "m3"), False), (message("e_1", None, "m1"), True),
                       (message("e_4", "e_2", "branch"), True), (None, False)]
        assert three.entries_on_active_path("nope", ["e_1"]) == [(None, False)]

    def test_hits_on_active_paths_read_each_hit_of_many_sessions_in_order(self, three: SessionStore) -> None:
        # Prevents: a page's hits of several sessions answered in one lookup coming back in
        # another order, mixed across sessions (the same entry id in two sessions), or losing
        # a hit whose session or entry is gone.
        append(three, "s_1", message("e_4", "e_2", "branch"), 4)
        three.commit("s_2", Commit(meta=meta("s_2")))
        append(three, "s_2", message("e_1", None, "other"), 1)
        hits = [("s_1", "e_3"), ("s_2", "e_1"), ("s_1", "e_1"), ("nope", "e_1"), ("s_1", "e_4"), ("s_2", "e_9")]
        assert three.hits_on_active_paths(hits) == [
            (message("e_3", "e_2", "m3"), False), (message("e_1", None, "other"), True),
            (message("e_1", None, "m1"), True), (None, False), (message("e_4", "e_2", "branch"), True),
            (None, False)]
        assert three.hits_on_active_paths([]) == []

    # -- attachments ----------------------------------------------------------------------




    def test_attachment_round_trip(self, three: SessionStore) -> None:
        # Prevents: chunked bytes being truncated or reordered, or metadata not read back.
        a = attachment("s_1", "a_1", 9)
        three.put_attachment(a, chunks_then_hash(a, [b"abc", b"", b"def", b"ghi"]))
        assert three.read_attachment("s_1", "a_1") == b"abcdefghi"
        assert three.get_attachment_meta("s_1", "a_1") == {**attachment("s_1", "a_1", 9), "sha256": "done"}
        assert three.list_attachments("s_1") == [{**attachment("s_1", "a_1", 9), "sha256": "done"}]


    def test_attachment_meta_is_taken_after_the_chunks(self, three: SessionStore) -> None:
        # Prevents: the stored metadata missing the hash the producer only knows at the end.
        a = attachment("s_1", "a_1", 3)
        three.put_attachment(a, chunks_then_hash(a, [b"abc"]))
        stored = three.get_attachment_meta("s_1", "a_1")
        assert stored is not None and stored["sha256"] == "done"


    def test_empty_attachment(self, three: SessionStore) -> None:
        # Prevents: a zero-byte upload reading back as missing.
        three.put_attachment(attachment("s_1", "a_1"), [])
        assert three.read_attachment("s_1", "a_1") == b""
        assert three.get_attachment_meta("s_1", "a_1") == attachment("s_1", "a_1")


    def test_failing_chunks_leave_nothing(self, three: SessionStore, tmp_path: Path) -> None:
        # Prevents: a half-uploaded attachment being listed or leaving temp files behind.
        def broken() -> Iterator[bytes]:
            yield b"abc"
            raise RuntimeError("upload broke")

        with pytest.raises(RuntimeError, match="upload broke"):
            three.put_attachment(attachment("s_1", "a_1", 6), broken())
        assert three.list_attachments("s_1") == []
        assert three.get_attachment_meta("s_1", "a_1") is None
        assert three.read_attachment("s_1", "a_1") is None
        for left in self.reopened(tmp_path):  # what is on disk holds no half-written file either
            assert left.list_attachments("s_1") == []
        leftovers = [p for p in tmp_path.rglob("*")
                     if p.is_file() and p.suffix not in (".jsonl", ".lock") and ".index" not in p.parts]
        assert leftovers == []
        # The next upload under another id works normally.
        three.put_attachment(attachment("s_1", "a_2", 2), [b"ok"])
        assert [m["attachment_id"] for m in three.list_attachments("s_1")] == ["a_2"]


    def test_attachment_listing_and_delete(self, three: SessionStore) -> None:
        # Prevents: delete reporting the wrong outcome or removing a sibling attachment.
        for n in (1, 2, 3):
            three.put_attachment(attachment("s_1", f"a_{n}", 1), [bytes([n])])
        three.put_attachment(attachment("s_2", "a_1", 1), [b"x"])
        assert sorted(m["attachment_id"] for m in three.list_attachments("s_1")) == ["a_1", "a_2", "a_3"]
        assert three.delete_attachment("s_1", "a_2") is True
        assert three.delete_attachment("s_1", "a_2") is False
        assert three.delete_attachment("s_1", "a_404") is False
        assert sorted(m["attachment_id"] for m in three.list_attachments("s_1")) == ["a_1", "a_3"]
        assert three.get_attachment_meta("s_1", "a_2") is None
        assert three.read_attachment("s_1", "a_2") is None
        assert three.read_attachment("s_1", "a_3") == b"\x03"
        assert three.read_attachment("s_2", "a_1") == b"x"
        assert three.list_attachments("nope") == []


    def test_attachment_overwrite_is_last_wins(self, three: SessionStore) -> None:
        # Prevents: a re-put of the same id (fork copying back) keeping stale bytes.
        three.put_attachment(attachment("s_1", "a_1", 3), [b"old"])
        three.put_attachment(attachment("s_1", "a_1", 3), [b"new"])
        assert three.read_attachment("s_1", "a_1") == b"new"
        assert len(three.list_attachments("s_1")) == 1


    def test_deleting_dot_sessions_spares_the_others(self, three: SessionStore, tmp_path: Path) -> None:
        # Prevents: session ".." naming data_dir for its attachments, so its delete wiped every session.
        three.put_attachment(attachment("s_1", "a_1", 1), [b"1"])
        for sid in (".", ".."):
            three.commit(sid, Commit(meta=meta(sid)))
            three.put_attachment(attachment(sid, "a_1", 1), [b"x"])
            assert three.read_attachment(sid, "a_1") == b"x"
        for sid in (".", ".."):
            three.delete_session(sid)
            assert three.get_meta(sid) is None
            assert three.list_attachments(sid) == []
        survivors = [three, *self.reopened(tmp_path)]
        for store in survivors:
            assert [m["session_id"] for m in store.list_metas()] == ["s_1"]
            assert path_ids(store, "s_1", store.get_leaf("s_1")) == ["e_1", "e_2", "e_3"]
            assert store.read_attachment("s_1", "a_1") == b"1"
