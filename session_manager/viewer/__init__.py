"""A live local web viewer of a data_dir (``session-manager data serve``) and the
self-contained HTML export (``data export --html``). See docs/viewer.md.

The server needs the ``viewer`` extra (Starlette, uvicorn); the export needs
nothing beyond the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .export import export_html

if TYPE_CHECKING:
    from .._hosts.embedded import SessionManager


def serve(sm: SessionManager, *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None) -> None:
    """Serve the viewer over ``sm`` until interrupted (uvicorn); refuses a non-loopback
    ``host`` without ``token`` (:class:`~.guard.BindRefused`)."""
    from .app import server

    server(sm, host=host, port=port, token=token).run()


__all__ = ["export_html", "serve"]
