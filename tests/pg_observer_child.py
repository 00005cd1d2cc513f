"""One observing (and optionally appending) instance in its own process, for the observer attacks.

``python -m tests.pg_observer_child <schema> <options as JSON>``. Options: ``read_only``,
``retention`` (the outbox retention, seconds), ``stop_at_gate`` (the process stops itself,
SIGSTOP, right after a statement taking the registration's gate returns), ``append`` (a
session id: append to it in a loop, ``ack <id>`` per acknowledged append, until stdin closes;
``tag`` prefixes the ids), ``observe`` (false: observes nothing).
Prints ``ready`` once its listener is registered, then ``seen <entry id>`` per message-added
event it observes. Run by tests/unit/test_postgres_observer_attacks.py (also under an older
release's package, put first on ``sys.path`` by the test).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import Any

import psycopg

import session_manager
from tests import pg_support

GATE = "pg_advisory_xact_lock(hashtext(current_schema()), 1)"


def say(*parts: str) -> None:
    sys.stdout.write(" ".join(parts) + "\n")
    sys.stdout.flush()


def stop_at_gate() -> None:
    execute = psycopg.Connection.execute

    def stopping(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        cur = execute(self, query, *args, **kwargs)
        text = query if isinstance(query, str) else query.as_string(self)
        if GATE in text:
            os.kill(os.getpid(), signal.SIGSTOP)
        return cur

    psycopg.Connection.execute = stopping  # type: ignore[method-assign]


def main() -> None:
    schema_name, options = sys.argv[1], json.loads(sys.argv[2])
    if options.get("stop_at_gate"):
        stop_at_gate()
    overrides: dict[str, Any] = {"read_only": bool(options.get("read_only"))}
    if "retention" in options:
        overrides["outbox_retention_s"] = float(options["retention"])
    sm = session_manager.open(store=pg_support.open_store(schema_name, **overrides))
    if options.get("observe", True):
        sm.observe({"function_id": "session::on-message-added"}, lambda e: say("seen", e["entry_id"]))
        sm.service.store.events_ready()
    say("ready")
    sid = options.get("append")
    if sid is None:
        sys.stdin.read()
        return
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    i = 0
    while not done.is_set():
        eid = f"{options.get('tag', 'old')}-{i}"
        i += 1
        sm.call("session::append", {"session_id": sid, "entry_id": eid, "message": pg_support.text(eid)})
        say("ack", eid)
    sm.close()
    say("closed")


if __name__ == "__main__":
    main()
