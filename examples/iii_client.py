"""An iii worker that calls session-manager and observes its events over the engine.

    III_ENGINE_WS_URL=ws://127.0.0.1:49134 python examples/iii_client.py

Needs an iii engine (or the stand-in: see docs/worker.md) with a session-manager
worker attached (``session-manager --url "$III_ENGINE_WS_URL"``). Without
``III_ENGINE_WS_URL`` it says so and exits with status 0.

Two observers show what a remote observer receives: by default the engine's
envelope (the event under ``input``, and again under ``output``), with
``"deliver": "input"`` the bare event, as an in-process ``sm.observe`` handler
gets it. Filters address the envelope (``input.…``) either way.
"""

from __future__ import annotations

import os
import sys
import threading
import uuid
from typing import Any

from iii import InitOptions
from iii.iii import III


def main(url: str) -> dict[str, Any]:
    name = f"example-client-{uuid.uuid4().hex[:8]}"
    client = III(url, InitOptions(worker_name=name, otel={"enabled": False}))
    received: dict[str, list[Any]] = {"envelope": [], "bare": []}
    both = threading.Event()

    def target(kind: str) -> Any:
        def receive(payload: Any) -> dict[str, Any]:  # called by the engine once per event
            received[kind].append(payload)
            if received["envelope"] and received["bare"]:
                both.set()
            return {}
        return receive

    handles = []
    try:
        for kind, deliver in (("envelope", {}), ("bare", {"deliver": "input"})):
            fid = f"{name}::on-user-message-{kind}"
            client.register_function(fid, target(kind))
            source = {"function_id": "session::on-message-added",
                      "filters": {"input.message.role": {"$eq": "user"}}, **deliver}
            handle = client.observe(source, fid)
            handle.ready(timeout=10)
            handles.append(handle)

        sid = client.trigger({"function_id": "session::create", "payload": {"title": "From an iii client"}})[
            "session_id"]
        client.trigger({"function_id": "session::append", "payload": {"session_id": sid, "message": {
            "role": "user", "content": [{"type": "text", "text": "hello over the engine"}], "timestamp": 0}}})
        page = client.trigger({"function_id": "session::messages", "payload": {"session_id": sid}})
        if not both.wait(10):
            raise SystemExit("no event arrived within 10 s")
        envelope, bare = received["envelope"][0], received["bare"][0]
        print("messages:", [m["message"]["content"][0]["text"] for m in page["messages"]])
        print("envelope keys:", sorted(envelope))
        print("bare event keys:", sorted(bare))
        assert envelope["input"] == bare and bare["session_id"] == sid
        return {"session_id": sid, "envelope": envelope, "bare": bare}
    finally:
        for handle in handles:
            handle.dispose()
        client.shutdown()


if __name__ == "__main__":
    engine = os.environ.get("III_ENGINE_WS_URL")
    if not engine:
        print("III_ENGINE_WS_URL is not set: start an engine (or the iii stand-in) with a session-manager "
              "worker and point it there; nothing to do.")
        sys.exit(0)
    main(engine)
