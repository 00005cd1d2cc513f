"""Usage errors of ``session-manager data``: a command line the command cannot
run as given exits 2 (as argparse's own errors do), with a suggestion where
one is close; and which targets (directory, database URI, engine URL) each
subcommand takes, so its ``--help`` and its checks say the same thing."""

from __future__ import annotations

import argparse
import os
from collections.abc import Collection, Iterable

from ..._args import suggest
from ..._hosts.surface import Function
from ..._hosts.surface import function as lookup
from ...errors import SessionError
from ...errors import UsageError as UsageError  # (re-exported: the old import path keeps working)
from ...store.sqlite.settings import path_of
from .opening import is_engine, is_uri

DIR, POSTGRES, SQLITE, ENGINE = "dir", "postgres", "sqlite", "engine"
KINDS = (DIR, POSTGRES, SQLITE, ENGINE)
EVERY_TARGET = frozenset(KINDS)
_TARGET_HELP = {
    DIR: "the session store's directory",
    POSTGRES: "a postgresql:// URI (the postgres adapter)",
    SQLITE: "a sqlite:///FILE URI (the sqlite adapter)",
    ENGINE: "a ws:// URL (a main worker's sessions over its engine, read-only)",
}
_TARGET_NAME = {DIR: "a directory", POSTGRES: "a postgresql:// URI", SQLITE: "a sqlite:/// URI",
                ENGINE: "a ws:// engine URL"}


def target_help(accepts: Collection[str], engine: str | None = None) -> str:
    """The DATA_DIR help of a subcommand taking ``accepts`` (``engine``: its own words for a ws:// URL,
    where it takes one only with a flag)."""
    parts = [engine if k == ENGINE and engine else _TARGET_HELP[k] for k in KINDS if k in accepts]
    return parts[0] if len(parts) == 1 else parts[0] + ", or " + ", or ".join(parts[1:])


def target_kind(data_dir: str | os.PathLike[str]) -> str:
    if os.fspath(data_dir).startswith("sqlite://"):
        return SQLITE
    return ENGINE if is_engine(data_dir) else POSTGRES if is_uri(data_dir) else DIR


def check_target(command: str, data_dir: str | os.PathLike[str], accepts: Collection[str]) -> None:
    """Refuse a target kind the subcommand does not take, saying what it takes."""
    kind = target_kind(data_dir)
    if kind not in accepts:
        takes = " or ".join(_TARGET_NAME[k] for k in KINDS if k in accepts)
        if accepts == {DIR}:
            takes += " (an fs data_dir)"
        raise UsageError(f"{command} takes {takes}, not {_TARGET_NAME[kind]}")
    if kind == SQLITE:
        try:  # a malformed one (two slashes, a query) is the user's typo: one line, not a traceback
            path_of(os.fspath(data_dir))
        except ValueError as e:
            raise UsageError(str(e)) from None


def function(function_id: str) -> Function:
    """The function ``function_id``, or a usage error with the surface's own "did you mean"."""
    try:
        return lookup(function_id)
    except SessionError as e:
        raise UsageError(e.detail) from None


def check_subcommand(parser: argparse.ArgumentParser, argv: Iterable[str], names: Collection[str]) -> None:
    """A mistyped subcommand (``data lss``) gets "did you mean" instead of the list of every name."""
    first = next(iter(argv), None)
    if first is None or first.startswith("-") or first in names:
        return
    close = suggest(first, sorted(names))
    if close is not None:
        parser.error(f"unknown subcommand {first!r}; did you mean {close!r}?")
