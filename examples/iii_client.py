"""An iii worker that calls session-manager and observes its events over the engine.

    III_ENGINE_WS_URL=ws://127.0.0.1:49134 python examples/iii_client.py [--start-worker]

Needs an iii engine (or the stand-in: see docs/worker.md) with a session-manager
worker attached (``session-manager --url "$III_ENGINE_WS_URL"``). With
``--start-worker`` and none attached, the script starts one itself and stops it at the
end: seeded with an fs data_dir under the system's temp folder, which the engine's
configuration worker keeps, so it applies only where no session-manager configuration
is stored yet (a bare stand-in); elsewhere the started worker serves the stored one,
the same data a ``session-manager`` you start there would serve. Without
``III_ENGINE_WS_URL`` it says so and exits with status 0.

Two observers show what a remote observer receives: by default the engine's
envelope (the event under ``input``, and again under ``output``), with
``"deliver": "input"`` the bare event, as an in-process ``sm.observe`` handler
gets it. Filters address the envelope (``input.…``) either way.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from iii import InitOptions
from iii.iii import III

USED = {"session::create", "session::append", "session::messages", "session::on-message-added"}


def attached(client: III) -> bool:
    """Whether a session-manager worker serves the engine (every function used here is listed)."""
    listed = client.trigger({"function_id": "engine::functions::list",
                             "payload": {"prefix": "session::", "include_internal": True}})
    return {f.get("function_id") for f in listed.get("functions", [])} >= USED


# Where a worker started by --start-worker keeps its sessions when its seed applies (one fixed folder:
# the engine keeps the first seed, so every later run is served from the same place).
EXAMPLE_HOME = Path(tempfile.gettempdir()) / "session-manager-iii-client-example"


@contextlib.contextmanager
def session_manager_worker(client: III, url: str, start: bool) -> Iterator[None]:
    """A session-manager worker on the engine for the block: the one attached, or one started here."""
    if attached(client):
        yield
        return
    if not start:
        raise SystemExit(f"no session-manager worker is attached to the engine at {url}: start one "
                         f"(session-manager --url {url}) or run this with --start-worker")
    EXAMPLE_HOME.mkdir(parents=True, exist_ok=True)
    seed = EXAMPLE_HOME / "seed.yaml"
    seed.write_text(f"adapter:\n  name: fs\n  config:\n    data_dir: {EXAMPLE_HOME / 'data'}\n", encoding="utf-8")
    worker = subprocess.Popen([sys.executable, "-m", "session_manager", "--url", url, "--config", str(seed),
                               "--log-level", "warning"])
    try:
        deadline = time.monotonic() + 30
        while not attached(client):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the session-manager worker did not register (exit status {worker.poll()})")
            time.sleep(0.1)
        print("started a session-manager worker on the engine")
        yield
    finally:
        worker.terminate()  # SIGTERM: it withdraws its functions and stops
        worker.wait(timeout=30)


def main(url: str, start_worker: bool = False) -> dict[str, Any]:
    name = f"example-client-{uuid.uuid4().hex[:8]}"
    client = III(url, InitOptions(worker_name=name, otel={"enabled": False}))
    try:
        with session_manager_worker(client, url, start_worker):
            return call_and_observe(client, name)
    finally:
        client.shutdown()


def call_and_observe(client: III, name: str) -> dict[str, Any]:
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


if __name__ == "__main__":
    engine = os.environ.get("III_ENGINE_WS_URL")
    if not engine:
        print("III_ENGINE_WS_URL is not set: start an iii engine (or the iii stand-in, docs/worker.md) and "
              "point it there; nothing to do.")
        sys.exit(0)
    main(engine, start_worker="--start-worker" in sys.argv[1:])
