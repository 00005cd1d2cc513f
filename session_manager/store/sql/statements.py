"""Splitting an SQL script into its statements for ``execute`` one at a time (a
trigger's body holds semicolons: split where a statement is complete). Not
``executescript``: it would commit the caller's transaction."""

from __future__ import annotations

import sqlite3

__all__ = ["statements"]


def statements(script: str) -> list[str]:
    """The complete statements of ``script``, in order (a trailing incomplete one too)."""
    out, pending = [], ""
    for part in script.split(";"):
        pending += part + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                out.append(pending)
            pending = ""
    if pending.strip(" \n;"):
        out.append(pending)
    return out
