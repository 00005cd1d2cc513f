"""The files a scripted session leaves on disk, pinned byte for byte.

Refactors of how records, entries and metas are built must not move a byte
(field order, nulls kept or left out, number types): a data_dir moves
between this worker and the reference in both directions. The golden file
was written by the code before the refactor; regenerate it only for a
deliberate format change: ``python -m tests.unit.test_disk_bytes``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from tests.unit.scripted import data_dir_bytes, run

GOLDEN = Path(__file__).parent / "golden" / "scripted_data_dir.json"


def test_a_scripted_session_leaves_exactly_the_pinned_bytes(tmp_path: Path) -> None:
    # Prevents: a change to how records are built that moves a field, drops a null or turns 3 into 3.0 on disk.
    run(tmp_path / "data")
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert data_dir_bytes(tmp_path / "data") == expected


def test_the_same_script_twice_writes_the_same_bytes(tmp_path: Path) -> None:
    # Prevents: randomness (a uuid-drawn commit id) leaking into files written with injected ids.
    run(tmp_path / "one")
    run(tmp_path / "two")
    assert data_dir_bytes(tmp_path / "one") == data_dir_bytes(tmp_path / "two")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        run(Path(tmp) / "data")
        GOLDEN.write_text(json.dumps(data_dir_bytes(Path(tmp) / "data"), indent=1, ensure_ascii=False) + "\n",
                          encoding="utf-8")
    sys.stdout.write(f"wrote {GOLDEN}\n")
