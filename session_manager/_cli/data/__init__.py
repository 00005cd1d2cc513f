"""``session-manager data``: a data_dir's sessions without an engine.

    session-manager data ls DATA_DIR [--status S] [--meta K=V] [--sort ORDER]
    session-manager data show DATA_DIR SESSION [--tree]
    session-manager data export DATA_DIR [SESSION ...] [--attachments] [--markdown | --html]
                                [--all-branches | --active-path] [-o FILE]
    session-manager data serve DATA_DIR [--host 127.0.0.1] [--port 8765] [--token TOKEN]
    session-manager data import DATA_DIR FILE
    session-manager data fsck DATA_DIR [--repair]
    session-manager data compact DATA_DIR
    session-manager data call DATA_DIR FUNCTION JSON
    session-manager data schema FUNCTION

Every subcommand takes ``--json``. Exit status: 0 done (fsck: healthy), 1
failed (fsck: not healthy), 2 bad arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

from .commands import run


def main(argv: Sequence[str]) -> int:
    """Run one ``data`` subcommand; returns the exit status."""
    return run(argv)


__all__ = ["main"]
