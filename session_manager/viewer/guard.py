"""Who may talk to the viewer: the Host check (DNS rebinding), the access token, the headers.

- Bound to loopback, a request whose ``Host`` is not a loopback name or the
  address served is refused (403): a page on another site that rebinds its
  name to 127.0.0.1 cannot read the viewer.
- Bound to anything else, a token is mandatory (:func:`check_bind`): every
  request, API and SSE included, carries it as ``Authorization: Bearer``, a
  ``?token=`` query (whose first use sets an HttpOnly cookie, so links and the
  page's own fetches work), or that cookie; otherwise 401.
- Every answer carries a Content-Security-Policy that lets the page run only
  the viewer's own script file (no inline script), and no referrer (a
  ``?token=`` URL must not leak through one).
"""

from __future__ import annotations

import hmac
import ipaddress
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import BindRefused as BindRefused  # (re-exported: the old import path keeps working)

COOKIE = "session_manager_viewer"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
           (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY")]
LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve a non-loopback address without an access token."""
    if not is_loopback(host) and not token:
        raise BindRefused(f"--host {host} is not loopback: the viewer needs an access token there (--token)")


def _host_name(value: str) -> str:
    """The name part of a Host header (``[::1]:8765`` -> ``::1``)."""
    if value.startswith("["):
        return value[1:].split("]", 1)[0].lower()
    return value.rsplit(":", 1)[0].lower() if value.count(":") == 1 else value.lower()


class Guard:
    """ASGI middleware applying the rules above to every HTTP request."""

    def __init__(self, app: ASGIApp, *, host: str, token: str | None) -> None:
        check_bind(host, token)
        self.app = app
        self.token = token
        self.loopback = is_loopback(host)
        served = host.strip("[]").lower()
        self.allowed = {"localhost", "127.0.0.1", "::1", served}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.loopback and _host_name(headers.get("host", "")) not in self.allowed:
            await _plain(send, 403, "this viewer answers only to its loopback name or address (Host refused)")
            return
        set_cookie = None
        if self.token is not None:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given = self._given(headers, query)
            if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
                await _plain(send, 401, "an access token is needed (Authorization: Bearer, ?token= or its cookie)")
                return
            if query.get("token"):
                set_cookie = f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict".encode()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [*HEADERS, *([(b"set-cookie", set_cookie)] if set_cookie else [])]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    @staticmethod
    def _given(headers: dict[str, str], query: dict[str, Any]) -> str | None:
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        if query.get("token"):
            return str(query["token"][0])
        cookie: SimpleCookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except CookieError:  # a malformed Cookie header carries no token
            return None
        morsel = cookie.get(COOKIE)
        return morsel.value if morsel is not None else None


async def _plain(send: Send, status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *HEADERS]})
    await send({"type": "http.response.body", "body": body})


__all__ = ["CSP", "BindRefused", "Guard", "check_bind", "is_loopback"]
