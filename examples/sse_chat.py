"""A chat web app whose page updates live from session-manager's events (Server-Sent Events).

    python examples/sse_chat.py [--port 8000] [--workers 2] [--db chat.db]   # needs the viewer extra

Starlette under uvicorn with two worker processes, both over one sqlite
database (``session_manager.open("sqlite:///…")``): a message posted to one
process is stored there, and every process's observers receive its events,
so a browser connected to the other process sees it appear and the reply
grow as it streams. Open http://127.0.0.1:8000/ in two tabs.

Endpoints: ``GET /`` the page; ``POST /messages`` ``{"text": …}`` stores the
user message and streams a (scripted) assistant reply; ``GET /events`` the
Server-Sent Events of the chat session (``message-added`` and
``message-updated``, each a JSON event payload, plus a ``hello`` naming the
process that serves the stream).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, StreamingResponse
from starlette.routing import Route

import session_manager
from session_manager.messages import assistant_message, blocks, user_message

DB_ENV = "SSE_CHAT_DB"
CHAT_ID = "chat-1"
EVENTS = {"session::on-message-added": "message-added", "session::on-message-updated": "message-updated"}
PAGE = """<!doctype html><meta charset="utf-8"><title>session-manager chat</title>
<ul id="log"></ul><form id="f"><input id="t" autofocus><button>Send</button></form>
<script>
const log = document.getElementById("log"), items = {};
const es = new EventSource("/events");
function show(e) {
  const ev = JSON.parse(e.data), m = ev.message;
  const text = m.content.filter(b => b.type === "text").map(b => b.text).join("");
  let li = items[ev.entry_id];
  if (!li) { li = items[ev.entry_id] = document.createElement("li"); log.appendChild(li); }
  li.textContent = m.role + ": " + text;
}
es.addEventListener("message-added", show);
es.addEventListener("message-updated", show);
document.getElementById("f").onsubmit = async (e) => {
  e.preventDefault();
  const t = document.getElementById("t");
  await fetch("/messages", {method: "POST", body: JSON.stringify({text: t.value})});
  t.value = "";
};
</script>"""


def store() -> session_manager.SessionManager:
    sm: session_manager.SessionManager = app.state.sm
    return sm


async def page(request: Request) -> HTMLResponse:
    return HTMLResponse(PAGE)


async def post_message(request: Request) -> JSONResponse:
    body = json.loads(await request.body() or b"{}")
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        return JSONResponse({"error": "text: a non-empty string is required"}, status_code=400)
    sm = store()
    await asyncio.to_thread(sm.append, CHAT_ID, message=user_message(text))
    added = await asyncio.to_thread(sm.append, CHAT_ID, message=assistant_message(model="echo", provider="example"))
    reply = ""
    for word in f"You said: {text}".split(" "):  # a scripted model streaming word by word
        reply = f"{reply} {word}".strip()
        await asyncio.to_thread(sm.update_message, CHAT_ID, entry_id=added.entry_id, content=blocks([reply]))
    return JSONResponse({"entry_id": added.entry_id, "served_by": os.getpid()})


async def events(request: Request) -> StreamingResponse:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue(maxsize=1000)
    sm = store()

    def handler(name: str) -> Any:
        def put(event: dict[str, Any]) -> None:  # called on a store thread: hand over to the loop
            loop.call_soon_threadsafe(queue.put_nowait, (name, event))
        return put

    observations = [sm.observe({"function_id": fid, "filters": {"input.session_id": {"$eq": CHAT_ID}}},
                               handler(name)) for fid, name in EVENTS.items()]

    async def stream() -> AsyncIterator[str]:
        try:
            yield f"event: hello\ndata: {json.dumps({'pid': os.getpid()})}\n\n"
            while True:
                name, event = await queue.get()
                yield f"event: {name}\ndata: {json.dumps(event)}\n\n"
        finally:
            for observation in observations:
                observation.dispose()

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    path = Path(os.environ.get(DB_ENV, "chat.db")).resolve()
    app.state.sm = session_manager.open(f"sqlite:///{path}")  # one store per worker process
    app.state.sm.ensure(CHAT_ID, title="Live chat")
    try:
        yield
    finally:
        app.state.sm.close()


app = Starlette(routes=[Route("/", page), Route("/messages", post_message, methods=["POST"]),
                        Route("/events", events)], lifespan=lifespan)


def main(argv: list[str]) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--db", default="chat.db", help="the sqlite database file (default: ./chat.db)")
    args = parser.parse_args(argv)
    os.environ[DB_ENV] = str(Path(args.db).resolve())  # the worker processes inherit it
    uvicorn.run("sse_chat:app", host=args.host, port=args.port, workers=args.workers,
                app_dir=str(Path(__file__).resolve().parent), log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
