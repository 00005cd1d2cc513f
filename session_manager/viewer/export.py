"""``data export --html``: one session as a self-contained HTML file.

The same rendering as the viewer's session page (:mod:`.render`), every
branch, with the stylesheet inline, images inline as ``data:`` URIs, no script
and no external URL: it opens from disk with no network. Its own
Content-Security-Policy (a ``<meta>``: a file has no headers) forbids every
script and every fetch.
"""

from __future__ import annotations

import base64
from pathlib import Path

from .._hosts.embedded import SessionManager
from . import reads
from .render import Assets, page, session_body

STYLE = Path(__file__).with_name("static") / "viewer.css"
FILE_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
MAX_INLINE = 8 * 1024 * 1024  # attachments up to this size travel inside the file


def export_html(sm: SessionManager, session_id: str, *, all_branches: bool = True) -> str:
    """The file's text: every branch (``all_branches=False``: the active path only);
    ``session/not_found`` for an unknown session."""
    store = sm.service.store

    def inline(attachment_id: str) -> str | None:
        meta = store.get_attachment_meta(session_id, attachment_id)
        if meta is None or int(meta.get("size", 0)) > MAX_INLINE:
            return None
        data = store.read_attachment(session_id, attachment_id)
        if data is None:
            return None
        return f"data:{meta.get('mime') or 'application/octet-stream'};base64,{base64.b64encode(data).decode()}"

    view = reads.session_view(sm, session_id, inline, link_sessions=False)
    view.all_branches = all_branches
    assets = Assets(css=STYLE.read_text(encoding="utf-8"), script=False, csp=FILE_CSP)
    title = f"{view.meta.get('title') or session_id} · session-manager"
    return page(title, session_body(view), assets, kind="export", data={"session_id": session_id})


__all__ = ["export_html"]
