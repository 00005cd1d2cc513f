"""A loopback TCP relay to the test server that misbehaves on demand.

The network faults the postgres adapter must survive, without touching the
shared server: a peer that accepts bytes and never answers (:meth:`Relay.silence`),
packet loss from some byte on (:meth:`Relay.drop_after`), and a connection cut
right after (or right before) the client's ``COMMIT`` reaches the server
(:meth:`Relay.cut_at_commit`). It also counts the client's round trips at
the wire (:attr:`Relay.round_trips`: every ``Sync`` or simple ``Query`` a
client sends, which the client then waits on; health checks included).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

import psycopg

from tests import pg_support

__all__ = ["PLAIN_APPEND", "Relay"]

# What ends a write: a transaction's COMMIT, or the adapter's one-statement commit.
_COMMITS = (b"COMMIT", b"sm_apply(", b"sm_append(", b"sm_append_call(", b"sm_append_at(")
# The plain append's pipeline (store/postgres/plain.py: committed at its Sync, in the same chunk):
# cut only when asked (``cut_at_commit(on=(PLAIN_APPEND,))``), never by default.
PLAIN_APPEND = b"upd AS (UPDATE sessions SET meta"  # (plain.APPEND and plain.LINKED)
_MARKS = (*_COMMITS, PLAIN_APPEND)


class Relay:
    """A TCP relay from a loopback port to the test server."""

    def __init__(self) -> None:
        parts = psycopg.conninfo.conninfo_to_dict(pg_support.DSN)
        self.target = (str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432))
        self._lock = threading.Lock()
        self._silent = False
        self._budget: int | None = None  # client bytes still forwarded before everything is dropped
        self._cut: str | None = None  # "after" | "before": the next commit's connection is cut
        self._cut_on: tuple[bytes, ...] = _COMMITS
        self.cuts = 0
        self.round_trips = 0
        self._cut_clients: set[int] = set()  # their server's answers are never forwarded
        self._sockets: list[socket.socket] = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def dsn(self) -> str:
        return psycopg.conninfo.make_conninfo(pg_support.DSN, host="127.0.0.1", port=str(self.port))

    # -- faults -----------------------------------------------------------------------

    def silence(self, on: bool = True) -> None:
        """Every connection, open or new, is accepted and read but never forwarded nor answered."""
        with self._lock:
            self._silent = on

    def drop_after(self, n: int | None) -> None:
        """Forward ``n`` more bytes from clients, then drop everything both ways (``None``: stop dropping)."""
        with self._lock:
            self._budget = n

    def cut_at_commit(self, when: str = "after", on: tuple[bytes, ...] = _COMMITS) -> None:
        """Cut the connection that carries the next commit (a ``COMMIT``, or an ``sm_apply``
        call, prepared or not): ``after`` forwarding it to the server (it commits, its
        answer is lost) or ``before`` (the server never runs it). ``on``: which statements count."""
        with self._lock:
            self._cut = when
            self._cut_on = on

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            _end(s)

    # -- the relay --------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._up, args=(client, server), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client), daemon=True).start()

    def _passes(self, data: bytes) -> bytes | None:
        """What of a client chunk goes on (``None``: dropped)."""
        with self._lock:
            if self._silent:
                return None
            if self._budget is None:
                return data
            keep, self._budget = data[: self._budget], max(0, self._budget - len(data))
            return keep or None

    def _up(self, client: socket.socket, server: socket.socket) -> None:
        reader = _Frontend()
        try:
            while data := client.recv(65536):
                trips, commits = reader.feed(data)
                with self._lock:
                    self.round_trips += trips
                    cut = self._cut if commits & set(self._cut_on) else None
                    if cut is not None:
                        self._cut = None
                        self.cuts += 1
                        self._cut_clients.add(id(client))
                if cut is not None:
                    if cut == "after":
                        server.sendall(data)
                    # The server reads what it got, then a clean end of stream (a reset could
                    # discard the COMMIT unread); the client sees its connection lost.
                    with contextlib.suppress(OSError):
                        server.shutdown(socket.SHUT_WR)
                    _end(client)
                    return
                forward = self._passes(data)
                if forward is not None:
                    server.sendall(forward)
        except OSError:
            pass
        _end(client)
        _end(server)

    def _down(self, server: socket.socket, client: socket.socket) -> None:
        try:
            while data := server.recv(65536):
                with self._lock:
                    dropped = self._silent or self._budget == 0 or id(client) in self._cut_clients
                if not dropped:
                    client.sendall(data)
        except OSError:
            pass
        _end(client)
        _end(server)


class _Frontend:
    """Splits a client's byte stream into protocol messages: counts those it then
    waits on (Sync, Query), and the commits among them (by query text, or by the
    name of a statement prepared with that text)."""

    def __init__(self) -> None:
        self._buf = b""
        self._started = False
        self._commit_statements: dict[bytes, bytes] = {}  # prepared name -> the commit marker in it

    def _commits(self, kind: bytes, body: bytes) -> set[bytes]:
        if kind == b"Q":
            return {c for c in _MARKS if c in body}
        if kind == b"P":  # Parse: statement name, query
            name, _, rest = body.partition(b"\x00")
            found = {c for c in _MARKS if c in rest.split(b"\x00")[0]}
            if found and name:  # prepared now, run by a later Bind
                self._commit_statements[name] = next(iter(found))
                return set()
            return found  # the unnamed statement: run by the Bind/Execute that follow
        if kind == b"B":  # Bind: portal name, statement name
            _, _, rest = body.partition(b"\x00")
            marker = self._commit_statements.get(rest.split(b"\x00")[0])
            return {marker} if marker is not None else set()
        return set()

    def feed(self, data: bytes) -> tuple[int, set[bytes]]:
        self._buf += data
        trips, commits = 0, set()
        while True:
            if not self._started:  # untyped: startup, or an SSL / GSS encryption request first
                if len(self._buf) < 8:
                    return trips, commits
                size = int.from_bytes(self._buf[:4], "big")
                if len(self._buf) < size:
                    return trips, commits
                code = int.from_bytes(self._buf[4:8], "big")
                self._started = code not in (80877103, 80877104)
                self._buf = self._buf[size:]
                continue
            if len(self._buf) < 5:
                return trips, commits
            size = int.from_bytes(self._buf[1:5], "big")
            if len(self._buf) < 1 + size:
                return trips, commits
            kind = self._buf[:1]
            if kind in (b"S", b"Q"):
                trips += 1
            commits |= self._commits(kind, self._buf[5 : 1 + size])
            self._buf = self._buf[1 + size:]


def _end(s: Any) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
