"""data_dir's listing taken at a writable open, reused by the first list.

A writable open lists data_dir (to finish interrupted deletes and remove
rewrite temps: :func:`._delete.recover`), and the first ``list`` needs the
same names; listing 10k entries twice costs a cold list ~10%. The first list
reuses the open's names only while the directory provably has not changed
since: creating, removing or renaming an entry (by this store, the Rust
reference or anyone) sets the directory's mtime and ctime to the current
time, so a stamp (device, inode, mtime_ns, ctime_ns) still equal to the one
taken *before* the listing means the same entries. That holds only if the
stamp was older than the listing by more than the file system's timestamp
granularity; a younger one ("racy", as git calls it: a change in the same
clock tick could leave it equal) is never reused, and the first list lists
again. Nothing else is reused: an append changes no directory entry, so the
first list still stats every log (:mod:`._coldlist`).
"""

from __future__ import annotations

import operator
import os
import time
from dataclasses import dataclass

from ._fsio import Ops

# FAT's 2 s, the coarsest granularity a data_dir may sit on (ext4, xfs, btrfs
# and tmpfs tick in milliseconds); it also absorbs a clock stepped back a little.
RACY_NS = 2_000_000_000

Stamp = tuple[int, int, int, int]
_now = time.time_ns  # (a test moves it on instead of sleeping past RACY_NS)


def _stamp(st: os.stat_result) -> Stamp:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class OpenedListing:
    """The log names data_dir listed at open, joined by ``/`` (no file name
    holds one; one string holds 10k names in a third of a list's memory), and
    the stamp that vouches for them (``None``: racy, never reused)."""

    logs: str
    stamp: Stamp | None

    def current_logs(self, ops: Ops, data_dir: str) -> list[str] | None:
        """The log names, if they are still data_dir's (one stat of the directory)."""
        if self.stamp is None:
            return None
        try:
            if _stamp(ops.stat(data_dir)) != self.stamp:
                return None
        except OSError:
            return None
        return self.logs.split("/") if self.logs else []


def take(ops: Ops, data_dir: str, suffix: str) -> tuple[list[str], OpenedListing]:
    """Every entry of data_dir, and its logs (``*suffix``) as the first list may
    reuse them; the stamp is taken before the listing. An :class:`OSError` propagates."""
    now = _now()
    st = ops.stat(data_dir)
    names = ops.listdir(data_dir)
    racy = max(st.st_mtime_ns, st.st_ctime_ns) > now - RACY_NS
    logs = "/".join(filter(operator.methodcaller("endswith", suffix), names))
    return names, OpenedListing(logs, None if racy else _stamp(st))
