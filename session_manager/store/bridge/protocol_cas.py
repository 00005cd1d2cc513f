"""The atomic calls of the ``session::store::*`` protocol: ids and wire models
(ours; a Rust main lacks them; the main serves them from
:mod:`session_manager.store.bridge.server_atomic`).

* ``session::store::commit``: one :class:`~session_manager.store.base.Commit`
  (a batch of entries, the leaf, the meta) applied whole or not at all under
  the main's session lock, with compare-and-set: ``expect_meta_version`` is
  the hash (:func:`~session_manager.store._cas.meta_version`) of the meta the
  decision read (``null``: the session must not exist), ``expect_revisions``
  the revisions of rewritten entries; ``append`` lets the main derive the
  meta (``message_count``, ``updated_at``) from its own, ``chain`` parents
  the first entry on the main's active leaf. A stale commit writes nothing
  and answers ``{committed: false, conflict}`` (a typed outcome, not an
  error): the bridged service re-reads and decides again. Replaying a call
  never applies it twice (the entry exists / the meta moved: a conflict).
* ``session::store::delete-session``: the whole session in one call. ``op``
  (the caller's id for this delete) makes a repeat exact: a delete the main
  carried out answers ``deleted: true`` again to the same ``op`` (its first
  answer was lost), and ``false`` to every other caller.
* ``session::store::read-path``: a window of the root -> leaf path, walked on
  the main, so a bridged read fetches only what it returns.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from ..._wire.models import SessionEntry, SessionMeta, Wire

COMMIT = "session::store::commit"
DELETE_SESSION = "session::store::delete-session"
READ_PATH = "session::store::read-path"
MAX_WINDOW = 1000


class CommitRequest(Wire):
    session_id: str
    entries: list[SessionEntry] = Field(default_factory=list, description="Entry snapshots to write, in order.")
    leaf: Optional[str] = Field(default=None, description="The new active leaf, when it moves.")
    meta: Optional[SessionMeta] = Field(default=None, description="The new meta (ignored with append).")
    append: bool = Field(default=False, description="New entries: the main derives the meta from its own.")
    chain: bool = Field(default=False, description="With append: the first entry's parent is the main's leaf.")
    expect_meta_version: Optional[str] = Field(
        default=None, description="Hash of the meta the commit was decided on; null: the session must not "
        "exist; absent: no expectation.")
    expect_revisions: dict[str, int] = Field(default_factory=dict,
                                             description="entry id -> the revision the commit was decided on.")


class CommitResponse(Wire):
    committed: bool = Field(description="false: refused as stale; nothing was written.")
    conflict: Optional[str] = Field(default=None, description="Why the commit was refused.")
    entries: list[SessionEntry] = Field(default_factory=list, description="The entries as written.")
    leaf: Optional[str] = None
    meta: Optional[SessionMeta] = Field(default=None, description="The meta as written.")


OP_DESCRIPTION = ("The caller's id for this delete: sent again (the first answer was lost), it answers as the "
                  "first call did.")


class DeleteSessionRequest(Wire):
    session_id: str
    op: Optional[str] = Field(default=None, description=OP_DESCRIPTION)


class DeleteSessionResponse(Wire):
    deleted: bool = Field(description="false: there was nothing to delete.")


class ReadPathRequest(Wire):
    session_id: str
    leaf: Optional[str] = Field(description="The path's leaf (null: the empty path).")
    start: int = Field(default=0, description="First index of the window; negative counts from the end "
                       "(or, with `around`, from that entry's index).")
    count: int = Field(ge=0, le=MAX_WINDOW, description="Entries in the window.")
    around: Optional[str] = Field(default=None, description="Locate this entry on the path; the window "
                                  "starts `start` entries from it.")


class ReadPathResponse(Wire):
    length: int = Field(ge=0, description="Entries on the root -> leaf path.")
    start: int = Field(ge=0, description="Index of the first entry returned.")
    index: Optional[int] = Field(default=None, description="Index of `around` (null: not on the path).")
    entries: list[SessionEntry]
