"""One session-manager instance in its own process, for the multi-instance tests.

``python -m tests.pg_worker <schema> <job> <args as JSON>``: opens the
embedded host over the postgres adapter, observes every event function,
prints ``ready``, waits for a line on stdin, runs the job, then (when told
how many events to expect) waits for them and prints them as one JSON line
``events <list>``. Every acknowledged call is printed as ``ack <json>`` the
moment it returns, so a test that kills the process knows what was
acknowledged.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import session_manager
from session_manager._wire.events import EVENT_FUNCTIONS
from tests import pg_support


def say(tag: str, *values: Any) -> None:
    sys.stdout.write(" ".join([tag, *(json.dumps(v) for v in values)]) + "\n")
    sys.stdout.flush()


def text(s: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": s}], "timestamp": 1}


def main() -> None:
    schema_name, job, raw = sys.argv[1], sys.argv[2], sys.argv[3]
    args: dict[str, Any] = json.loads(raw)
    store = pg_support.open_store(schema_name)
    sm = session_manager.open(store=store)
    seen: list[list[Any]] = []
    lock = threading.Lock()

    def record(fid: str, payload: dict[str, Any]) -> None:
        with lock:
            seen.append([fid, payload])

    for fid in EVENT_FUNCTIONS:
        sm.observe({"function_id": fid}, lambda e, fid=fid: record(fid, e))
    say("ready")
    sys.stdin.readline()

    sid = args.get("session_id")
    if job == "append":
        # Own entries, plus (interleaved) shared ids every instance sends too.
        shared = args.get("shared", 0)
        for i in range(args["n"]):
            eid = f"{args['tag']}-{i}"
            sm.call("session::append", {"session_id": sid, "entry_id": eid, "message": text(eid)})
            say("ack", eid)
            if i < shared:
                sm.call("session::append", {"session_id": sid, "entry_id": f"shared-{i}",
                                            "message": text(f"shared-{i}")})
    elif job == "set-meta":
        for i in range(args["n"]):
            sm.call("session::set-meta", {"session_id": sid, "title": f"t{i}", "metadata": {"n": i}})
    elif job == "cas":
        # Move the entry from revision k to k + 1, for every k in order: of all
        # instances trying the same k, exactly one may win the compare-and-set.
        won = 0
        for k in range(args["n"]):
            out = sm.call("session::update-message", {
                "session_id": sid, "entry_id": args["entry_id"], "expected_revision": k,
                "content": [{"type": "text", "text": f"{args['tag']}@{k}"}]})
            won += int(out["updated"])
        say("ack", won)
    elif job == "mix":
        # Every kind of event: created, added, updated, status, meta, deleted.
        created = sm.call("session::create", {"title": args["tag"], "metadata": {"by": args["tag"]}})
        new = created["session_id"]
        added = sm.call("session::append", {"session_id": new, "message": text("hello")})
        sm.call("session::update-message", {"session_id": new, "entry_id": added["entry_id"],
                                            "content": [{"type": "text", "text": "hello!"}]})
        sm.call("session::set-status", {"session_id": new, "status": "working"})
        sm.call("session::set-meta", {"session_id": new, "title": "renamed"})
        big = "x" * 20000  # over NOTIFY's 8000-byte payload limit
        sm.call("session::append", {"session_id": new, "message": text(big)})
        sm.call("session::delete", {"session_id": new})
        say("ack", new)
    elif job == "idle":
        pass
    else:
        raise SystemExit(f"unknown job {job}")

    expect = args.get("expect_events")
    if expect is not None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if len(seen) >= expect:
                    break
            time.sleep(0.02)
        time.sleep(0.3)  # anything beyond the expected count would be a duplicate: let it show
    with lock:
        say("events", seen)
    sm.close()


if __name__ == "__main__":
    main()
