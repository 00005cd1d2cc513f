"""A plain append decided by the server: the new entries hang on the session's
leaf as the database has it when the statement runs, not as this instance last
saw it, so several writers of one session append without guessing and retrying.

An append without a named parent (``Commit.chain``) depends on the session only
through its leaf (the first entry's parent), ``message_count`` (grown by the
messages added) and ``updated_at`` (set to the last entry's timestamp). The
instance resolves the commit against what it knows, with a *hole* in place of
the leaf, and sends ``sm_append_at`` (migration 9, :mod:`.schema`; migration 7's
``sm_append_call`` and migration 4's ``sm_append`` before it, the same decision): under the
session's lock it takes the current meta text, checks that it differs from the
known one at most in those two numbers (the known text is sent cut at them:
three exact pieces), writes the new meta text (the pieces around the new
numbers: byte for byte what the client path would encode), puts the leaf's JSON
text in the hole of the first body and of the event payloads, and writes it all
as ``sm_apply`` would (entries, session row, and, only while some instance observes,
outbox rows), commits, then notifies (see ``APPEND_CALL_PROCEDURE`` for why after the
commit). It answers the leaf it chose and the new count, with which the instance fills
the same hole in the entry, the response and the events. Anything else changed (the
title, the metadata), or a leaf whose JSON text is not plain, raises ``SM409`` as a stale
decision does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..._wire.events import Event
from .._core.cas import resolve
from ..base import Commit, Entry, Meta
from ..sql.values import json_text

if TYPE_CHECKING:
    from .plan import Known, Plan

__all__ = ["APPEND", "APPEND_AT", "APPEND_AT_PROBED", "APPEND_AT_PROCEDURE", "APPEND_CALL", "APPEND_CALL_PROCEDURE",
           "APPEND_FUNCTION",
           "HOLE", "HOLE_JSON",
           "AtLeaf", "choose_at_leaf", "fill", "fill_known", "resolve_at_leaf",
           "segments"]

_TAG = os.urandom(8).hex()  # per process: no stored text holds it
HOLE = f"\x01sm-leaf-{_TAG}"  # the first entry's parent until the server names it
_HOLE_U, _HOLE_C = f"\x01sm-updated-{_TAG}", f"\x01sm-count-{_TAG}"
# Their JSON texts, encoded once (every append looked for them).
_HOLE_JSON, _HOLE_U_JSON, _HOLE_C_JSON = json_text(HOLE), json_text(_HOLE_U), json_text(_HOLE_C)
HOLE_JSON = _HOLE_JSON  # sm_append_call's p_hole
# A leaf the procedures put in the parent's place as it is (their '^[A-Za-z0-9_.:-]+$'; ``$`` there
# is the text's end, as \Z here): any other they refuse with SM409.
_ENCODED = re.compile(r"[A-Za-z0-9_.:-]+\Z").match

APPEND_FUNCTION = """
CREATE FUNCTION sm_append(
    p_sid text, p_s0 text, p_s1 text, p_s2 text, p_updated_first boolean, p_updated_text text, p_added bigint,
    p_hole text, p_read_ids text[], p_read_bodies text[], p_ids text[], p_parents text[], p_bodies text[],
    p_status text, p_created bigint, p_updated bigint, p_metadata jsonb, p_leaf text,
    p_instance text, p_fids text[], p_payloads text[], p_channel text, p_all text[],
    OUT o_leaf text, OUT o_count bigint
) LANGUAGE plpgsql AS $fn$
DECLARE
    cur text; mid text; k integer; a text; b text; parent_json text; new_meta text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || ':' || p_sid, 0));
    SELECT meta, leaf INTO cur, o_leaf FROM sessions WHERE session_id = p_sid AND meta IS NOT NULL;
    IF cur IS NULL OR length(cur) < length(p_s0) + length(p_s1) + length(p_s2) + 2
       OR left(cur, length(p_s0)) <> p_s0 OR right(cur, length(p_s2)) <> p_s2 THEN
        RAISE EXCEPTION 'session % changed', p_sid USING ERRCODE = 'SM409';
    END IF;
    mid := substr(cur, length(p_s0) + 1, length(cur) - length(p_s0) - length(p_s2));
    k := strpos(mid, p_s1);
    IF k = 0 THEN
        RAISE EXCEPTION 'session % changed', p_sid USING ERRCODE = 'SM409';
    END IF;
    a := left(mid, k - 1);
    b := substr(mid, k + length(p_s1));
    IF NOT p_updated_first THEN
        mid := a; a := b; b := mid;  -- a: the updated_at text, b: the message_count text
    END IF;
    IF a !~ '^-?[0-9]+$' OR b !~ '^[0-9]{1,17}$' THEN
        RAISE EXCEPTION 'session % changed', p_sid USING ERRCODE = 'SM409';
    END IF;
    o_count := b::bigint + p_added;
    IF p_updated_first THEN
        new_meta := p_s0 || p_updated_text || p_s1 || o_count::text || p_s2;
    ELSE
        new_meta := p_s0 || o_count::text || p_s1 || p_updated_text || p_s2;
    END IF;
    IF o_leaf IS NULL THEN
        parent_json := 'null';
    ELSIF o_leaf ~ '^[A-Za-z0-9_.:-]+$' THEN
        parent_json := '"' || o_leaf || '"';
    ELSE
        RAISE EXCEPTION 'session % has a leaf this path does not encode', p_sid USING ERRCODE = 'SM409';
    END IF;
    p_parents[1] := o_leaf;
    p_bodies[1] := replace(p_bodies[1], p_hole, parent_json);
    p_payloads := ARRAY(SELECT replace(u.p, p_hole, parent_json)
                        FROM unnest(p_payloads) WITH ORDINALITY AS u(p, n) ORDER BY u.n);
    PERFORM sm_apply(p_sid, 0, NULL, NULL, p_read_ids, p_read_bodies, p_ids, p_parents, p_bodies, true, new_meta,
                     p_status, p_created, p_updated, p_metadata, true, p_leaf,
                     p_instance, p_fids, p_payloads, p_channel, p_all);
END
$fn$;
"""

# sm_append_call (migration 7): sm_append's decision with a leaner body (no nested
# sm_apply: the meta differs only in its two numbers, so the row update sets those
# columns alone; each entry read is one index probe), and its NOTIFY in a transaction
# of its own after the write's COMMIT. A NOTIFY holds a database-wide lock from its
# commit's start to its end, the WAL flush included: in the write's transaction it
# kept every other writer's commit waiting (no group commit: 4 writers no faster than
# 1). The notification's transaction commits without waiting for the disk (nothing
# else in it: the write it announces is durable already). A session-level lock on the
# session's key, taken just before the write's COMMIT (nothing after it can fail but
# the commit) and dropped after the notification's, keeps the session's next writer
# out until the notification is queued: listeners get a session's events in order.
APPEND_CALL_PROCEDURE = """
CREATE OR REPLACE PROCEDURE sm_append_call(
    p_sid text, p_s0 text, p_s1 text, p_s2 text, p_updated_first boolean, p_updated_text text, p_added bigint,
    p_hole text, p_read_ids text[], p_read_bodies text[], p_ids text[], p_parents text[], p_bodies text[],
    p_updated bigint, p_leaf text, p_instance text, p_fids text[], p_payloads text[], p_channel text, p_all text[],
    INOUT o_leaf text DEFAULT NULL, INOUT o_count bigint DEFAULT NULL
) LANGUAGE plpgsql AS $fn$
DECLARE
    lock_key bigint := hashtextextended(current_schema() || ':' || p_sid, 0);
    cur text; mid text; k integer; a text; b text; parent_json text; new_meta text; note text;
    i integer; pd integer; pj text; pjd integer; jjd integer; jj text; d integer; ji text; jd integer;
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    SELECT meta, leaf INTO cur, o_leaf FROM sessions WHERE session_id = p_sid AND meta IS NOT NULL;
    IF cur IS NULL OR length(cur) < length(p_s0) + length(p_s1) + length(p_s2) + 2
       OR left(cur, length(p_s0)) <> p_s0 OR right(cur, length(p_s2)) <> p_s2 THEN
        RAISE EXCEPTION 'session % changed', p_sid USING ERRCODE = 'SM409';
    END IF;
    mid := substr(cur, length(p_s0) + 1, length(cur) - length(p_s0) - length(p_s2));
    k := strpos(mid, p_s1);
    IF k = 0 THEN
        RAISE EXCEPTION 'session % changed', p_sid USING ERRCODE = 'SM409';
    END IF;
    a := left(mid, k - 1);
    b := substr(mid, k + length(p_s1));
    IF NOT p_updated_first THEN
        mid := a; a := b; b := mid;  -- a: the updated_at text, b: the message_count text
    END IF;
    IF a !~ '^-?[0-9]+$' OR b !~ '^[0-9]{1,17}$' THEN
        RAISE EXCEPTION 'session % changed', p_sid USING ERRCODE = 'SM409';
    END IF;
    o_count := b::bigint + p_added;
    IF p_updated_first THEN
        new_meta := p_s0 || p_updated_text || p_s1 || o_count::text || p_s2;
    ELSE
        new_meta := p_s0 || o_count::text || p_s1 || p_updated_text || p_s2;
    END IF;
    IF o_leaf IS NULL THEN
        parent_json := 'null';
    ELSIF o_leaf ~ '^[A-Za-z0-9_.:-]+$' THEN
        parent_json := '"' || o_leaf || '"';
    ELSE
        RAISE EXCEPTION 'session % has a leaf this path does not encode', p_sid USING ERRCODE = 'SM409';
    END IF;
    FOR i IN 1 .. coalesce(cardinality(p_read_ids), 0) LOOP
        IF (SELECT body FROM entries WHERE session_id = p_sid AND entry_id = p_read_ids[i])
           IS DISTINCT FROM p_read_bodies[i] THEN
            RAISE EXCEPTION 'an entry of session % changed', p_sid USING ERRCODE = 'SM409';
        END IF;
    END LOOP;
    p_parents[1] := o_leaf;
    p_bodies[1] := replace(p_bodies[1], p_hole, parent_json);
    FOR i IN 1 .. coalesce(cardinality(p_ids), 0) LOOP
        pd := NULL;
        IF p_parents[i] IS NOT NULL THEN
            SELECT depth, jump_id, jump_depth INTO pd, pj, pjd FROM entries
             WHERE session_id = p_sid AND entry_id = p_parents[i];
        END IF;
        IF pd IS NULL THEN
            d := 0; ji := p_ids[i]; jd := 0;
        ELSE
            jj := NULL;
            SELECT jump_id, jump_depth INTO jj, jjd FROM entries WHERE session_id = p_sid AND entry_id = pj;
            IF jj IS NOT NULL AND pd - pjd = pjd - jjd AND pj <> p_parents[i] THEN
                d := pd + 1; ji := jj; jd := jjd;
            ELSE
                d := pd + 1; ji := p_parents[i]; jd := pd;
            END IF;
        END IF;
        INSERT INTO entries (session_id, entry_id, parent_id, depth, jump_id, jump_depth, body)
        VALUES (p_sid, p_ids[i], p_parents[i], d, ji, jd, p_bodies[i])
        ON CONFLICT (session_id, entry_id) DO UPDATE SET parent_id = EXCLUDED.parent_id, depth = EXCLUDED.depth,
            jump_id = EXCLUDED.jump_id, jump_depth = EXCLUDED.jump_depth, body = EXCLUDED.body;
    END LOOP;
    -- Only the two numbers of the meta changed (checked above): status, created_at and
    -- metadata are as stored.
    UPDATE sessions SET meta = new_meta, updated_at = p_updated, leaf = p_leaf WHERE session_id = p_sid;
    IF coalesce(cardinality(p_fids), 0) > 0 THEN
        WITH ins AS (
            INSERT INTO outbox (instance, function_id, payload)
            SELECT p_instance, f, replace(p, p_hole, parent_json)
              FROM unnest(p_fids, p_payloads) WITH ORDINALITY AS u(f, p, n) ORDER BY n
            RETURNING id, function_id)
        SELECT p_instance || '|' || string_agg(id::text || ':' || array_position(p_all, function_id)::text, ','
                                               ORDER BY id) INTO note FROM ins;
        PERFORM pg_advisory_lock(lock_key);
    END IF;
    COMMIT;
    IF note IS NOT NULL THEN
        PERFORM set_config('synchronous_commit', 'off', true);
        PERFORM pg_notify(p_channel, note);
        COMMIT;
        PERFORM pg_advisory_unlock(lock_key);
    END IF;
END
$fn$;
"""

# sm_append_at (migration 9): sm_append_call's decision and writes, but its events are
# recorded (outbox rows, the ordering lock, the NOTIFY and its second transaction) only while
# some instance observes (:mod:`.outbox`, "Who is owed events"): an unobserved append is one
# transaction that writes its entries and its session row alone. (sm_append_call stays for
# the previous release's processes still running: they record every append.) Leaner too: a
# new entry's id is checked unused by its INSERT (no probe of its own), and the parent and
# its jump's jump pointer are read in one statement.
APPEND_AT_PROCEDURE = """
CREATE OR REPLACE PROCEDURE sm_append_at(
    p_sid text, p_s0 text, p_s1 text, p_s2 text, p_updated_first boolean, p_updated_text text, p_added bigint,
    p_hole text, p_read_ids text[], p_read_bodies text[], p_ids text[], p_parents text[], p_bodies text[],
    p_updated bigint, p_leaf text, p_instance text, p_fids text[], p_payloads text[], p_channel text, p_all text[],
    INOUT o_leaf text DEFAULT NULL, INOUT o_count bigint DEFAULT NULL
) LANGUAGE plpgsql AS $fn$
DECLARE
    lock_key bigint := hashtextextended(current_schema() || ':' || p_sid, 0);
    gate integer;
    cur text; mid text; k integer; a text; b text; parent_json text; new_meta text; note text;
    i integer; pd integer; pj text; pjd integer; jjd integer; jj text; d integer; ji text; jd integer;
    fresh text[];
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    SELECT meta, leaf INTO cur, o_leaf FROM sessions WHERE session_id = p_sid AND meta IS NOT NULL;
    IF cur IS NULL OR length(cur) < length(p_s0) + length(p_s1) + length(p_s2) + 2
       OR left(cur, length(p_s0)) <> p_s0 OR right(cur, length(p_s2)) <> p_s2 THEN
        RAISE EXCEPTION 'session % changed', p_sid USING ERRCODE = 'SM409';
    END IF;
    mid := substr(cur, length(p_s0) + 1, length(cur) - length(p_s0) - length(p_s2));
    k := strpos(mid, p_s1);
    IF k = 0 THEN
        RAISE EXCEPTION 'session % changed', p_sid USING ERRCODE = 'SM409';
    END IF;
    a := left(mid, k - 1);
    b := substr(mid, k + length(p_s1));
    IF NOT p_updated_first THEN
        mid := a; a := b; b := mid;  -- a: the updated_at text, b: the message_count text
    END IF;
    IF a !~ '^-?[0-9]+$' OR b !~ '^[0-9]{1,17}$' THEN
        RAISE EXCEPTION 'session % changed', p_sid USING ERRCODE = 'SM409';
    END IF;
    o_count := b::bigint + p_added;
    IF p_updated_first THEN
        new_meta := p_s0 || p_updated_text || p_s1 || o_count::text || p_s2;
    ELSE
        new_meta := p_s0 || o_count::text || p_s1 || p_updated_text || p_s2;
    END IF;
    IF o_leaf IS NULL THEN
        parent_json := 'null';
    ELSIF o_leaf ~ '^[A-Za-z0-9_.:-]+$' THEN
        parent_json := '"' || o_leaf || '"';
    ELSE
        RAISE EXCEPTION 'session % has a leaf this path does not encode', p_sid USING ERRCODE = 'SM409';
    END IF;
    FOR i IN 1 .. coalesce(cardinality(p_read_ids), 0) LOOP
        IF p_read_bodies[i] IS NULL AND p_read_ids[i] = ANY(p_ids) THEN
            fresh := fresh || p_read_ids[i];  -- a new entry's id: its INSERT checks it is unused
            CONTINUE;
        END IF;
        IF (SELECT body FROM entries WHERE session_id = p_sid AND entry_id = p_read_ids[i])
           IS DISTINCT FROM p_read_bodies[i] THEN
            RAISE EXCEPTION 'an entry of session % changed', p_sid USING ERRCODE = 'SM409';
        END IF;
    END LOOP;
    p_parents[1] := o_leaf;
    p_bodies[1] := replace(p_bodies[1], p_hole, parent_json);
    FOR i IN 1 .. coalesce(cardinality(p_ids), 0) LOOP
        pd := NULL; jj := NULL;
        IF p_parents[i] IS NOT NULL THEN  -- the parent and its jump's jump, in one statement
            SELECT p.depth, p.jump_id, p.jump_depth, j.jump_id, j.jump_depth INTO pd, pj, pjd, jj, jjd
              FROM entries p LEFT JOIN entries j ON j.session_id = p_sid AND j.entry_id = p.jump_id
             WHERE p.session_id = p_sid AND p.entry_id = p_parents[i];
        END IF;
        IF pd IS NULL THEN
            d := 0; ji := p_ids[i]; jd := 0;
        ELSE
            IF jj IS NOT NULL AND pd - pjd = pjd - jjd AND pj <> p_parents[i] THEN
                d := pd + 1; ji := jj; jd := jjd;
            ELSE
                d := pd + 1; ji := p_parents[i]; jd := pd;
            END IF;
        END IF;
        INSERT INTO entries (session_id, entry_id, parent_id, depth, jump_id, jump_depth, body)
        VALUES (p_sid, p_ids[i], p_parents[i], d, ji, jd, p_bodies[i])
        ON CONFLICT (session_id, entry_id) DO UPDATE SET parent_id = EXCLUDED.parent_id, depth = EXCLUDED.depth,
            jump_id = EXCLUDED.jump_id, jump_depth = EXCLUDED.jump_depth, body = EXCLUDED.body
            WHERE fresh IS NULL OR NOT EXCLUDED.entry_id = ANY(fresh);
        IF NOT FOUND THEN  -- (rolled back whole: nothing written)
            RAISE EXCEPTION 'an entry of session % changed', p_sid USING ERRCODE = 'SM409';
        END IF;
    END LOOP;
    -- Only the two numbers of the meta changed (checked above): status, created_at and
    -- metadata are as stored.
    UPDATE sessions SET meta = new_meta, updated_at = p_updated, leaf = p_leaf WHERE session_id = p_sid;
    IF coalesce(cardinality(p_fids), 0) > 0 THEN
        -- Recorded only while something observes (outbox.py's registration rule): the
        -- shared gate, held to the commit, makes an observer registering meanwhile wait
        -- for this write; then a live row (a writable observer) or the held lock of a
        -- read-only one says someone does.
        gate := hashtext(current_schema());
        PERFORM pg_advisory_xact_lock_shared(gate, 1);
        IF NOT EXISTS (SELECT 1 FROM observers WHERE expires > now()) THEN
            IF pg_try_advisory_lock(gate, 2) THEN
                PERFORM pg_advisory_unlock(gate, 2);
                p_fids := NULL;
            END IF;
        END IF;
    END IF;
    IF coalesce(cardinality(p_fids), 0) > 0 THEN
        WITH ins AS (
            INSERT INTO outbox (instance, function_id, payload)
            SELECT p_instance, f, replace(p, p_hole, parent_json)
              FROM unnest(p_fids, p_payloads) WITH ORDINALITY AS u(f, p, n) ORDER BY n
            RETURNING id, function_id)
        SELECT p_instance || '|' || string_agg(id::text || ':' || array_position(p_all, function_id)::text, ','
                                               ORDER BY id) INTO note FROM ins;
        PERFORM pg_advisory_lock(lock_key);
    END IF;
    IF note IS NOT NULL THEN  -- (else the CALL's end commits the write: one transaction)
        COMMIT;
        PERFORM set_config('synchronous_commit', 'off', true);
        PERFORM pg_notify(p_channel, note);
        COMMIT;
        PERFORM pg_advisory_unlock(lock_key);
    END IF;
END
$fn$;
"""

# sm_append_at again (migration 10), its parent probe's jump's jump a subquery of its own
# (OFFSET 0: not flattened into a join), where the parent's jump_id is a parameter: a primary-key
# lookup. Joined, the generic plan a connection keeps from its sixth append on, if made while
# entries was small, took the session's entries by entries_seq and filtered them: every later
# append read the whole session (server instructions per append grew with it: 1.19M at 120
# entries, 1.43M at 420). Otherwise as migration 9's (the same signature: running processes of
# the previous release call it unchanged).
_JOINED = """              FROM entries p LEFT JOIN entries j ON j.session_id = p_sid AND j.entry_id = p.jump_id
             WHERE p.session_id = p_sid AND p.entry_id = p_parents[i];"""
_PROBED = """              FROM entries p LEFT JOIN LATERAL (SELECT jump_id, jump_depth FROM entries
                                                 WHERE session_id = p_sid AND entry_id = p.jump_id OFFSET 0) j ON true
             WHERE p.session_id = p_sid AND p.entry_id = p_parents[i];"""
APPEND_AT_PROBED = APPEND_AT_PROCEDURE.replace(_JOINED, _PROBED)

APPEND_CALL = (  # binary parameters (%b), as APPEND
    "CALL sm_append_call(%(sid)b::text, %(s0)b::text, %(s1)b::text, %(s2)b::text,"
    " %(updated_first)b::boolean, %(updated_text)b::text, %(added)b::bigint, %(hole)b::text, %(read_ids)b::text[],"
    " %(read_bodies)b::text[], %(ids)b::text[], %(parents)b::text[], %(bodies)b::text[],"
    " %(updated)b::bigint, %(leaf)b::text, %(instance)b::text,"
    " %(fids)b::text[], %(payloads)b::text[], %(channel)b::text, %(all)b::text[])"
)

APPEND_AT = APPEND_CALL.replace("CALL sm_append_call(", "CALL sm_append_at(")

APPEND = (  # binary parameters (%b): no text escaping of the arrays' JSON, client or server side
    "SELECT o_leaf, o_count FROM sm_append(%(sid)b::text, %(s0)b::text, %(s1)b::text, %(s2)b::text,"
    " %(updated_first)b::boolean, %(updated_text)b::text, %(added)b::bigint, %(hole)b::text, %(read_ids)b::text[],"
    " %(read_bodies)b::text[], %(ids)b::text[], %(parents)b::text[], %(bodies)b::text[], %(status)b::text,"
    " %(created)b, %(updated)b, %(metadata)b::jsonb, %(leaf)b::text, %(instance)b::text,"
    " %(fids)b::text[], %(payloads)b::text[], %(channel)b::text, %(all)b::text[])"
)


@dataclass(frozen=True)
class AtLeaf:
    """The known meta text cut at its two numbers an append changes."""

    s0: str
    s1: str
    s2: str
    updated_first: bool
    added: int  # messages the append adds to message_count

    def text(self, updated: int, count: int) -> str:
        """The meta text with these two numbers (as ``sm_append`` builds it)."""
        a, b = (str(updated), str(count)) if self.updated_first else (str(count), str(updated))
        return self.s0 + a + self.s1 + b + self.s2


def segments(known: Known, resolved: Commit, first_body: str) -> tuple[AtLeaf, str] | None:
    """The cut of ``known.text`` for ``resolved`` (an append resolved on the hole, its first
    entry's text ``first_body``) and the text of its meta (exactly the encoder's), or ``None``
    when it cannot be made exactly (then the optimistic path applies)."""
    meta, entries = resolved.meta, resolved.entries
    known_meta = known.meta
    u, c = known_meta.get("updated_at"), known_meta.get("message_count")
    if meta is None or not entries or type(u) is not int or type(c) is not int:
        return None
    new_u, new_c = meta.get("updated_at"), meta.get("message_count")
    if type(new_u) is not int or type(new_c) is not int:
        return None
    # A meta derived from the known one (append_commit's, as resolve trusts it) is that meta, in
    # its order, with these two numbers: its text is the cut's with them, not encoded again. Any
    # other is checked: equal but for them, and its encoding the cut's.
    derived = resolved.derived_from is known_meta
    if not derived and {**known_meta, "updated_at": new_u, "message_count": new_c} != meta:
        return None
    cut = known.cut
    if cut is None:
        cut = _cut(known_meta, known.text, u, c)
        if cut is None:
            return None
        # The session's next appends cut the text they leave (these pieces around new numbers) alike.
        known.cut = cut
    meta_text = cut.text(new_u, new_c)
    if (not derived and meta_text != json_text(meta)) or first_body.count(_HOLE_JSON) != 1:
        return None
    # (the last append's cut is kept: one message after one message, the same one serves)
    return (cut if cut.added == new_c - c else AtLeaf(cut.s0, cut.s1, cut.s2, cut.updated_first, new_c - c),
            meta_text)


def _cut(known_meta: Meta, known_text: str, u: int, c: int) -> AtLeaf | None:
    """``known_text`` cut at its two numbers (``added`` 0), if the meta's encoding with
    those numbers as holes gives it back exactly."""
    holed = json_text({**known_meta, "updated_at": _HOLE_U, "message_count": _HOLE_C})
    hu, hc = _HOLE_U_JSON, _HOLE_C_JSON
    if holed.count(hu) != 1 or holed.count(hc) != 1:
        return None
    i, j = holed.index(hu), holed.index(hc)
    first, second = (hu, hc) if i < j else (hc, hu)
    s0, rest = holed.split(first)
    s1, s2 = rest.split(second)
    cut = AtLeaf(s0, s1, s2, i < j, 0)
    return cut if cut.text(u, c) == known_text else None


def fill(commit: Commit, bodies: list[str], leaf: str | None, count: int, response: Any = None,
         events: tuple[Event, ...] | list[Event] = (), first: str | None = None) -> None:
    """Put the leaf chosen (by the server; or the known one, checked under the lock
    on the transactional path) where the hole was: the first entry, its stored
    text (``first`` when the caller made it already), the response, the events; and the
    count in the meta. Idempotent."""
    commit.entries[0]["parent_id"] = leaf
    if first is not None:
        bodies[0] = first
    elif bodies:
        bodies[0] = bodies[0].replace(_HOLE_JSON, json_text(leaf))
    if commit.meta is not None:
        commit.meta["message_count"] = count
    if isinstance(response, dict) and response.get("parent_id") == HOLE:
        response["parent_id"] = leaf
    for event in events:
        # A payload not built yet is left so: built later (if ever: most appends are observed by
        # nobody), it reads the entry filled in above (the event's, the commit's first).
        payload = event.built()
        if payload is not None and payload.get("parent_id") == HOLE:
            payload["parent_id"] = leaf


def fill_known(plan: Plan, response: Any = None, events: list[Event] | None = None) -> None:
    """A plain append left to the server but committed on the transactional path: its
    leaf is the known one (checked under the session's lock before writing)."""
    if plan.at_leaf is not None and plan.commit is not None and plan.known is not None:
        count = plan.commit.meta["message_count"] if plan.commit.meta is not None else 0
        fill(plan.commit, plan.bodies, plan.known.leaf, count, response, events or ())


def resolve_at_leaf(plan: Plan, commit: Commit, meta: Meta | None, leaf: str | None,
                    entry: Callable[[str], Entry | None], plain: bool = False) -> Commit:
    """``commit`` as decided on the plan's knowledge; a plain append is resolved on
    the hole (``plan.at_leaf`` is then set by :func:`choose_at_leaf`, once its texts
    are made) whenever the server may choose its leaf; with ``plain`` (it will try the
    plain statement, plain.py, whose parent is the known leaf) on that leaf, ``plan.plain`` set."""
    at_leaf = bool(commit.append and commit.chain and plan.known is not None and meta is not None)
    plan.plain = at_leaf and plain
    plan.holed = at_leaf and not plain
    return resolve(commit, meta, HOLE if plan.holed else leaf, entry)


def hold_off(plan: Plan, response: Any, events: list[Event]) -> bool:
    """A plain append resolved on the known leaf (``plan.plain``: for the plain statement, which
    did not write it) held off for the server after all, as :func:`resolve_at_leaf` would have:
    its parent made the hole where the chosen one is filled in (its entry, the response, the
    events: the call's own, made on the known leaf), its texts and cut made (``plan.at_leaf``).
    ``False`` when its meta cannot be cut: then it stays on the known leaf (checked by ``sm_apply``)."""
    commit, known = plan.commit, plan.known
    assert commit is not None and known is not None and commit.meta is not None
    leaf = known.leaf
    commit.entries[0]["parent_id"] = HOLE
    # (a response naming a parent: append-many's has none, which .get would take for a leaf None)
    if isinstance(response, dict) and "parent_id" in response and response["parent_id"] == leaf:
        response["parent_id"] = HOLE
    for event in events:
        payload = event.built()  # (one not built yet reads the entry when it is)
        if payload is not None and payload.get("parent_id") == leaf:
            payload["parent_id"] = HOLE
    bodies = [json_text(e) for e in commit.entries]
    plan.plain = False
    meta_text = choose_at_leaf(plan, commit, bodies)
    if meta_text is None:
        fill(commit, bodies, leaf, commit.meta["message_count"], response, events)  # (back on the known leaf)
        plan.bodies = bodies
        return False
    plan.bodies, plan.meta_text = bodies, meta_text
    return True


def choose_at_leaf(plan: Plan, resolved: Commit, bodies: list[str]) -> str | None:
    """The text of the meta of the append resolved on the hole (:func:`resolve_at_leaf`) when
    it is left to the server (``plan.at_leaf`` set: its meta text can be cut exactly), else ``None``."""
    known = plan.known
    plan.holed = False
    if known is None or not bodies:
        return None
    leaf = known.leaf
    if leaf is not None and not _ENCODED(leaf):
        # The server names the parent only as the JSON of a leaf it writes unescaped (the
        # procedures' '^[A-Za-z0-9_.:-]+$'; else SM409): a known leaf it would refuse stays
        # the parent, checked by sm_apply (review 19: the refusal cost the call a second run).
        return None
    cut = segments(known, resolved, bodies[0])
    if cut is None:
        return None
    plan.at_leaf, meta_text = cut
    return meta_text
