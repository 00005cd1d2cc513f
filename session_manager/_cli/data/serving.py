"""``session-manager data serve``: the live web viewer over a data_dir or database."""

from __future__ import annotations

import argparse
import secrets
import sys

from ...errors import DataDirError, UsageError
from .opening import open_for
from .outcome import Outcome


def cmd_serve(args: argparse.Namespace) -> Outcome:
    try:
        from ...viewer import serve
        from ...viewer.guard import check_bind, is_loopback
    except ImportError as e:  # starlette / uvicorn: the optional extra
        raise DataDirError("data serve needs the viewer extra (Starlette and uvicorn: pip install '.[viewer]' in "
                           f"a clone): {e}") from None
    token = args.token
    if token is None and not is_loopback(args.host):
        token = secrets.token_urlsafe(24)  # generated and printed, as Jupyter does
    try:
        check_bind(args.host, token)
    except ValueError as e:
        raise UsageError(str(e)) from None
    with open_for(args.data_dir, writable=False) as sm:
        shown = f"[{args.host}]" if ":" in args.host else args.host
        url = f"http://{shown}:{args.port}/" + (f"?token={token}" if token else "")
        sys.stderr.write(f"session-manager viewer of {args.data_dir} (read-only) at {url}\n")
        sys.stderr.flush()
        serve(sm, host=args.host, port=args.port, token=token)
    return Outcome(None, "")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--port", type=int, default=8765, help="port (default: %(default)s; 0: any free one)")
    p.add_argument("--token", help="access token; generated and printed when binding beyond loopback, where "
                                   "one is required")


__all__ = ["add_arguments", "cmd_serve"]
