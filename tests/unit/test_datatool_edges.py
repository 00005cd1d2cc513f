"""``session-manager data`` at its edges: output into a pipe the reader already
closed, and maintenance commands pointed at a data_dir that does not exist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import session_manager
from session_manager._cli.data import main


def _tree(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    with session_manager.open(d) as sm:
        for n in range(3):
            sid = sm.call("session::create", {"title": f"chat {n}"})["session_id"]
            sm.call("session::append", {"session_id": sid, "message": {
                "role": "user", "content": [{"type": "text", "text": "hello " * 50}], "timestamp": 1}})
    return d


def _first_session(data_dir: Path) -> str:
    return sorted(p.stem for p in data_dir.glob("*.jsonl"))[0]


@pytest.mark.parametrize("args", [
    ["ls", "DIR"],
    ["ls", "DIR", "--json"],
    ["show", "DIR", "SID"],
    ["show", "DIR", "SID", "--tree"],
    ["export", "DIR"],
    ["export", "DIR", "SID", "--markdown"],
    ["fsck", "DIR"],
    ["call", "DIR", "session::list", "{}"],
    ["schema", "session::append"],
])
def test_output_into_a_closed_pipe_stops_quietly(data_dir: Path, args: list[str]) -> None:
    # Prevents: `session-manager data ls DIR | head -1` printing a BrokenPipeError traceback (or an
    # "error: [Errno 32] Broken pipe" line) once the reader has gone.
    sid = _first_session(data_dir)
    argv = [str(data_dir) if a == "DIR" else sid if a == "SID" else a for a in args]
    before = _tree(data_dir)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte: every write is EPIPE
    try:
        done = subprocess.run([sys.executable, "-m", "session_manager", "data", *argv], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert done.stderr == "", done.stderr
    assert done.returncode == 1  # the output did not all arrive: not "done"
    assert _tree(data_dir) == before  # a reader that lost its pipe still wrote nothing


def test_compact_of_a_missing_data_dir_fails_and_creates_nothing(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: a mistyped path to `compact` making an empty data_dir (lock file and all) and reporting
    # "compacted 0 of 0 session log(s)" with exit 0, as if the real data_dir had been maintained.
    missing = tmp_path / "no-such-dir"
    code = main(["compact", str(missing)])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1 and "does not exist" in err and str(missing) in err, err
    assert not missing.exists()
    code = main(["compact", str(missing), "--json"])
    out, _ = capsys.readouterr()
    assert code == 1 and '"error"' in out and not missing.exists()


def test_compact_of_an_existing_data_dir_still_runs(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prevents: the missing-dir check refusing a real data_dir (or one the worker never wrote a lock into).
    (data_dir / ".session-manager.lock").unlink()
    assert main(["compact", str(data_dir)]) == 0
    out, _ = capsys.readouterr()
    assert out.strip().endswith("compacted 0 of 3 session logs, 0 bytes saved")
    with session_manager.open(data_dir, read_only=True) as sm:
        assert len(sm.call("session::list", {})["sessions"]) == 3
