"""What a writable open knows of data_dir's entries, for the first list.

A writable open needs data_dir's entries (to finish interrupted deletes and
remove rewrite temps: :func:`._removal.recover`), and so does the first
``list``; listing 10k entries costs a cold list ~10% each time. Both rely on
one fact: creating, removing or renaming an entry (by this store, the Rust
reference or anyone) sets the directory's mtime and ctime to the current
time. So a stamp (device, inode, mtime_ns, ctime_ns) of data_dir taken
*before* a listing, and equal to data_dir's stamp later, proves the entries
are still those listed -- provided the stamp was older than the listing by
more than the file system's timestamp granularity. A younger one is "racy"
(as git calls it: a change in the same clock tick could leave it equal) and
vouches for nothing.

The sessions index records the stamp under which its log names were listed
(when that listing held nothing left half done and every log in it was
recorded). An open whose data_dir still has that stamp lists nothing: the
entries are the index's logs and nothing to recover. Otherwise the open
lists, and the first list reuses those names while the stamp still holds,
then records it. Nothing about a log's contents is vouched for: an append
changes no directory entry, so the first list still stats every log
(:mod:`._cold_list`).
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass

from ._fileops import Ops
from ._sessions_index import Stamp

# How much older than its listing a stamp must be: ten times the coarsest tick of
# a file system keeping sub-second times (ext4, xfs, btrfs and tmpfs tick with the
# kernel clock, <= 10 ms; exFAT 10 ms); it absorbs a clock stepped back a little.
# One keeping whole seconds (FAT, HFS+, ext4 with small inodes, SFTP) shows it in
# the stamp (its nanoseconds are 0) and is never trusted: every change within that
# second leaves the stamp equal, so only the clock could say the second is over --
# and a clock stepped back since, or a server's lagging ours, says it too early.
RACY_NS = 100_000_000
_now = time.time_ns  # (a test moves it on instead of sleeping past RACY_NS)


def stamp_of(ops: Ops, data_dir: str) -> Stamp | None:
    """data_dir's stamp now (``None`` when it cannot be read)."""
    try:
        st = ops.stat(data_dir)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class OpenedListing:
    """data_dir's log names as the open found them: joined by ``/`` (no file
    name holds one; one string holds 10k names in a third of a list's memory),
    or ``None``: the sessions index's names, whose recorded stamp was data_dir's.
    ``stamp`` vouches for them (``None``: racy, never reused)."""

    logs: str | None
    stamp: Stamp | None

    def current(self, ops: Ops, data_dir: str) -> bool:
        """Whether the names are still data_dir's (one stat of the directory)."""
        return self.stamp is not None and stamp_of(ops, data_dir) == self.stamp

    def names(self) -> list[str]:
        assert self.logs is not None
        return self.logs.split("/") if self.logs else []


def take(ops: Ops, data_dir: str, suffix: str) -> tuple[list[str], OpenedListing]:
    """Every entry of data_dir, and its logs (``*suffix``) as the first list may
    reuse them; the stamp is taken before the listing. An :class:`OSError` propagates."""
    now = _now()
    st = ops.stat(data_dir)
    names = ops.listdir(data_dir)
    whole_seconds = not (st.st_mtime_ns % 10**9 and st.st_ctime_ns % 10**9)
    racy = whole_seconds or max(st.st_mtime_ns, st.st_ctime_ns) > now - RACY_NS
    logs = "/".join(filter(operator.methodcaller("endswith", suffix), names))
    return names, OpenedListing(logs, None if racy else (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns))
