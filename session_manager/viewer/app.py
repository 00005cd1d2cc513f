"""The viewer's web app: pages, their JSON, the live event stream, the static files.

Routes: ``/`` (the session list), ``/sessions/{id}`` (one conversation, every
branch), ``/sessions/{id}/attachments/{aid}`` (an attachment's bytes),
``/api/sessions``, ``/api/sessions/{id}``, ``/api/events`` (SSE) and
``/static/*``. A page asked for with the ``X-Viewer-Fragment`` header answers
only its live region's HTML: the page's script swaps that in when an event
touches what it shows, so the rendering (and its escaping) stays here.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from .._hosts.embedded import SessionManager
from ..errors import NOT_FOUND, SessionError
from . import reads
from .guard import Guard, check_bind
from .live import Hub
from .render import INLINE_IMAGES, Assets, list_body, page, session_body, session_rows
from .render import e as esc

STATIC = Path(__file__).with_name("static")
FRAGMENT = "x-viewer-fragment"


def _error(e: SessionError) -> JSONResponse:
    status = 404 if e.code == NOT_FOUND else 400
    return JSONResponse({"error": {"code": e.code, "message": e.detail}}, status_code=status)


def _html_error(e: SessionError) -> HTMLResponse:
    status = 404 if e.code == NOT_FOUND else 400
    body = f'<h1>{"Not found" if status == 404 else "Bad request"}</h1><p class="muted">{esc(e.detail)}</p>'
    return HTMLResponse(page("session-manager", body, Assets(), kind="error"), status_code=status)


class Viewer:
    """The handlers, bound to one open store."""

    def __init__(self, sm: SessionManager) -> None:
        self.sm = sm
        self.hub = Hub(sm)

    async def list_page(self, request: Request) -> Response:
        try:
            view = await run_in_threadpool(reads.list_view, self.sm, request.query_params,
                                           request.query_params.getlist("meta"))
        except SessionError as e:
            return _html_error(e)
        if request.headers.get(FRAGMENT):
            return HTMLResponse(session_rows(view.metas))
        return HTMLResponse(page("Sessions · session-manager", list_body(view), Assets(), kind="list"))

    async def session_page(self, request: Request) -> Response:
        sid = request.path_params["session_id"]

        def url(aid: str) -> str:
            return f"/sessions/{quote(sid, safe='')}/attachments/{quote(aid, safe='')}"

        try:
            view = await run_in_threadpool(reads.session_view, self.sm, sid, url)
        except SessionError as e:
            return _html_error(e)
        body = session_body(view)
        if request.headers.get(FRAGMENT):
            return HTMLResponse(body)
        title = f"{view.meta.get('title') or sid} · session-manager"
        return HTMLResponse(page(title, body, Assets(), kind="session", data={"session_id": sid}))

    async def attachment(self, request: Request) -> Response:
        try:
            meta, data = await run_in_threadpool(reads.attachment, self.sm, request.path_params["session_id"],
                                                 request.path_params["attachment_id"])
        except SessionError as e:
            return _error(e)
        mime = str(meta.get("mime", ""))
        if mime in INLINE_IMAGES:
            return Response(data, media_type=mime)
        # Anything else is a download, never rendered as a page of this origin.
        name = quote(str(meta.get("name") or "attachment"), safe="")
        return Response(data, media_type="application/octet-stream",
                        headers={"content-disposition": f"attachment; filename*=UTF-8''{name}"})

    async def api_sessions(self, request: Request) -> Response:
        try:
            body = await run_in_threadpool(self._list, request.query_params, request.query_params.getlist("meta"))
        except SessionError as e:
            return _error(e)
        return JSONResponse(body)

    def _list(self, query: Any, metas: list[str]) -> Any:
        return reads.read_call(self.sm, "session::list", reads.list_request(query, metas))

    async def api_session(self, request: Request) -> Response:
        try:
            body = await run_in_threadpool(reads.api_session, self.sm, request.path_params["session_id"])
        except SessionError as e:
            return _error(e)
        return JSONResponse(body)

    async def api_events(self, request: Request) -> Response:
        sid = request.query_params.get("session_id") or None
        return StreamingResponse(self.hub.stream(sid), media_type="text/event-stream",
                                 headers={"cache-control": "no-store", "x-accel-buffering": "no"})


def create_app(sm: SessionManager, *, host: str = "127.0.0.1", token: str | None = None) -> ASGIApp:
    """The viewer over ``sm`` (which the caller opened and closes), behind its guard
    (:mod:`.guard`): raises :class:`~.guard.BindRefused` for a non-loopback ``host``
    without ``token``."""
    return _build(sm, host, token)[0]


def server(sm: SessionManager, *, host: str = "127.0.0.1", port: int = 8765,
           token: str | None = None) -> uvicorn.Server:
    """A uvicorn server of the viewer whose shutdown first ends the open event streams
    (a browser tab keeps one open for ever: without this the shutdown would cancel it)."""
    app, hub = _build(sm, host, token)

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            hub.close()
            await super().shutdown(sockets)

    return Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on",
                                 timeout_graceful_shutdown=5))


def _build(sm: SessionManager, host: str, token: str | None) -> tuple[ASGIApp, Hub]:
    check_bind(host, token)  # before the hub observes anything
    viewer = Viewer(sm)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            viewer.hub.close()

    app = Starlette(routes=[
        Route("/", viewer.list_page),
        # A session id is any non-empty string (an imported one may hold "/"): one percent-encoded path
        # segment in the links, decoded back whole here (the attachment route first: it is the longer).
        Route("/sessions/{session_id:path}/attachments/{attachment_id}", viewer.attachment),
        Route("/sessions/{session_id:path}", viewer.session_page),
        Route("/api/sessions", viewer.api_sessions),
        Route("/api/sessions/{session_id:path}", viewer.api_session),
        Route("/api/events", viewer.api_events),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ], lifespan=lifespan)
    return Guard(app, host=host, token=token), viewer.hub


__all__ = ["create_app", "server"]
