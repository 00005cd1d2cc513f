"""``session-manager``: the console script. ``session-manager data …`` runs a data
subcommand (:mod:`.data`); anything else is the worker's command line
(:func:`session_manager._worker.main.main`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .._args import suggest
from .._worker.manifest import NAME

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``session-manager`` console script; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["data"]:
        from .data import main as data_main

        return data_main(args[1:])
    # The worker takes no positional argument: a word close to "data" is a typo of it.
    if args and not args[0].startswith("-") and suggest(args[0], ("data",)):
        sys.stderr.write(f"{NAME}: error: unknown command {args[0]!r}; did you mean 'data'? (see --help)\n")
        return 2
    from .._worker.main import main as worker_main  # (the worker loads only when it runs)

    return worker_main(args)
