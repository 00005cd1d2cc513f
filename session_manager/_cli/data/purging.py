"""``purge``: delete whole sessions by age and/or tenant, by hand.

``--idle-days N`` takes sessions not updated for N days (the retention rule),
``--meta K=V`` (repeatable) a tenant (the ``session::purge`` rule), both
narrowed by ``--status``; at least one of the first two is required (a purge
of everything is not a typo away). Deletion goes through the service in
batches, each session firing ``session::on-deleted`` (recorded for other
instances on postgres), with a progress bar on a terminal. ``--dry-run``
lists what would go and opens the store read-only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..._browse import render
from ..._browse.filters import metadata_filter
from ..._wire.models import STATUSES
from ...errors import DataDirError, UsageError
from .opening import is_engine, is_uri, open_for
from .outcome import Outcome
from .progress import progress

__all__ = ["BATCH", "add_arguments", "cmd_purge"]

BATCH = 100  # sessions per service batch: the bar moves at least this often


def _days(value: str) -> int:
    try:
        days = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of days, got {value!r}") from None
    if days < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 day, got {days}")
    return days


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--idle-days", type=_days, metavar="N", help="sessions not updated for N days")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                   help="only sessions whose metadata has KEY equal to VALUE (JSON or text); repeatable; "
                        "required without --idle-days")
    p.add_argument("--status", choices=STATUSES, help="only sessions with this status")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted; delete nothing")
    p.set_defaults(parser=p)


def cmd_purge(args: argparse.Namespace) -> Any:

    if args.idle_days is None and not args.meta:
        args.parser.error("--meta KEY=VALUE is required without --idle-days (a purge names a tenant or an age)")
    if is_engine(args.data_dir) and not args.dry_run:
        # A usage error (exit 2), said before connecting: the engine URL is only ever opened read-only.
        raise UsageError("purge deletes; a ws:// engine URL is opened read-only (--dry-run lists what would go)")
    metadata = metadata_filter(args.meta) or None
    statuses = (args.status,) if args.status is not None else None
    if not is_uri(args.data_dir) and not Path(args.data_dir).is_dir():
        raise DataDirError(f"data_dir {args.data_dir} does not exist or is not a directory")
    with open_for(args.data_dir, writable=not args.dry_run) as sm:
        service = sm.service
        if args.idle_days is not None:
            selection = service.idle(args.idle_days, statuses, metadata)
        else:
            from ..._service.erasure import Selection

            selection = Selection(metadata, statuses, None)
        found = [m["session_id"] for m in service.select(selection, sys.maxsize)]
        if args.dry_run:
            lines = [f"would purge {render.plural(len(found), 'session')}", *found]
            return Outcome({"session_ids": found, "dry_run": True}, "\n".join(lines))

        def deletions() -> Iterator[str]:
            while True:
                ids, more = sm.erase_where(selection, BATCH)
                yield from ids
                if not more or not ids:
                    return

        deleted = list(progress(deletions(), len(found), "purge"))
    return Outcome({"session_ids": deleted, "dry_run": False}, f"purged {render.plural(len(deleted), 'session')}")
