"""Case-insensitive file systems (macOS and Windows defaults): ids that
differ only in letter case would share one file, so the second is refused.

Detection needs no probe file: the lock file exists in every data_dir a
writer opened, and if its upper-case name reaches the same file, names fold.
The encoding stays the reference's; only ASCII letters can differ in case in
an encoded stem (every other byte is ``%XX``, always upper-case), so the
folded name is the lower-cased stem.
"""

from __future__ import annotations

import os
import threading

from ...errors import UnstorableValue
from ._encoding import decode_id, encode_id
from ._fileops import Ops

_STRIPES = 64


def names_fold(ops: Ops, data_dir: str, existing: str) -> bool:
    """Whether ``existing`` (a file in ``data_dir``) is also reached by its upper-case name."""
    try:
        a = ops.stat(os.path.join(data_dir, existing))
        b = ops.stat(os.path.join(data_dir, existing.upper()))
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class FoldIndex:
    """Which session owns each folded stem; check-and-claim is serialized on
    the folded name (a session's attachment folder shares its stem, so it is
    covered too)."""

    def __init__(self, log_names: list[str], suffix: str) -> None:
        self._owner: dict[str, str] = {}
        self._locks = [threading.Lock() for _ in range(_STRIPES)]
        for name in log_names:
            sid = decode_id(name[: -len(suffix)])
            if sid is not None:
                self._owner[encode_id(sid).lower()] = sid

    def claim(self, session_id: str) -> None:
        folded = encode_id(session_id).lower()
        if self._owner.get(folded) == session_id:
            return
        with self._locks[hash(folded) % _STRIPES]:
            owner = self._owner.get(folded)
            if owner is not None and owner != session_id:
                raise UnstorableValue(
                    "session_id: on this case-insensitive file system it names the same file as an "
                    "existing session's id (ids that differ only in letter case cannot both be stored)")
            self._owner[folded] = session_id

    def release(self, session_id: str) -> None:
        folded = encode_id(session_id).lower()
        with self._locks[hash(folded) % _STRIPES]:
            if self._owner.get(folded) == session_id:
                del self._owner[folded]
