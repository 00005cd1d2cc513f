"""The generic step library every feature file uses.

A scenario drives a real embedded session store (real handlers, real fs
store in a temp dir) with sequential ids (``s_001``, ``e_001``, ``a_001``)
and a manual clock starting at 1000000 ms. Every call's result or error is
kept, and every event the call delivered is recorded, so a scenario can
assert the response, the events fired and not fired, and the state read
back, before and after a restart.

JSON docstrings may use ``${name}`` for values kept with
``I remember "<path>" as "<name>"``.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pytest_bdd import given, parsers, then, when

import session_manager
from session_manager._wire.events import EVENT_FUNCTIONS
from session_manager.clock import ManualClock
from session_manager.ids import SequentialIds
from session_manager.store.fs._encoding import encode_id
from session_manager.store.fs._lock import LOCK_NAME
from tests import pg_support

ABSENT = "<absent>"
ANY = "<any>"
START_MS = 1_000_000


class World:
    """One scenario's store, clock, ids, last call and recorded events."""

    def __init__(self, tmp_path: Path, pg_schema: str | None = None, sqlite: bool = False) -> None:
        self.data_dir = tmp_path / "data"
        self.pg_schema = pg_schema  # set: the store is the postgres adapter over this schema
        # set: the store is the sqlite adapter over this file (beside data_dir, which stays empty)
        self.sqlite_path = str(tmp_path / "store.db") if sqlite else None
        self.ids = SequentialIds()
        self.clock = ManualClock(START_MS)
        self.options: dict[str, Any] = {}
        self.sm: session_manager.SessionManager | None = None
        self.result: Any = None
        self.error: session_manager.SessionError | None = None
        self.last_events: list[tuple[str, dict[str, Any]]] = []
        self.all_events: list[tuple[str, dict[str, Any]]] = []
        self.observed: dict[str, list[dict[str, Any]]] = {}
        # Every live subscription per observer name (one name may watch
        # several functions), and what each watched, so a restart can
        # re-subscribe exactly the live ones and a dispose ends them all.
        self.observers: dict[str, list[session_manager.Observation]] = {}
        self.observer_sources: dict[str, list[tuple[str, Any]]] = {}
        self.saved: dict[str, Any] = {}

    # -- store lifecycle --------------------------------------------------

    def open(self) -> None:
        if self.pg_schema is not None:
            store = pg_support.open_store(self.pg_schema)
            self.sm = session_manager.open(store=store, ids=self.ids, clock=self.clock, **self.options)
        elif self.sqlite_path is not None:
            self.sm = session_manager.open(f"sqlite:///{self.sqlite_path}", ids=self.ids, clock=self.clock,
                                           **self.options)
        else:
            self.sm = session_manager.open(self.data_dir, ids=self.ids, clock=self.clock, **self.options)
        for fid in EVENT_FUNCTIONS:
            self.sm.observe({"function_id": fid}, lambda e, fid=fid: self._record(fid, e))
        for name, sources in self.observer_sources.items():
            self.observers[name] = [self._subscribe(name, fid, filters) for fid, filters in sources]

    def restart(self) -> None:
        assert self.sm is not None
        self.sm.close()
        self.open()

    def _record(self, fid: str, payload: dict[str, Any]) -> None:
        self.last_events.append((fid, payload))
        self.all_events.append((fid, payload))

    def watch(self, name: str, fid: str, filters: Any) -> None:
        self.observer_sources.setdefault(name, []).append((fid, filters))
        self.observers.setdefault(name, []).append(self._subscribe(name, fid, filters))

    def _subscribe(self, name: str, fid: str, filters: Any) -> session_manager.Observation:
        assert self.sm is not None
        box = self.observed.setdefault(name, [])
        return self.sm.observe({"function_id": fid, "filters": filters}, box.append)

    # -- calls ------------------------------------------------------------

    def call(self, fid: str, payload: Any) -> None:
        assert self.sm is not None
        self.last_events = []
        self.result, self.error = None, None
        try:
            self.result = self.sm.call(fid, payload)
        except session_manager.SessionError as e:
            self.error = e

    def expect_ok(self) -> Any:
        assert self.error is None, f"call failed: {self.error}"
        return self.result

    def substitute(self, text: str) -> Any:
        def value(match: re.Match[str]) -> str:
            return json.dumps(self.saved[match.group(1)])

        quoted = re.sub(r'"\$\{([A-Za-z0-9_]+)\}"', value, text)
        bare = re.sub(r"\$\{([A-Za-z0-9_]+)\}", lambda m: str(self.saved[m.group(1)]), quoted)
        return json.loads(bare)

    def session_file(self, session_id: str) -> Path:
        return self.data_dir / f"{encode_id(session_id)}.jsonl"


def lookup(value: Any, path: str) -> Any:
    """``a.b.0.c`` into nested JSON; raises KeyError when absent."""
    for part in path.split(".") if path else []:
        if isinstance(value, list):
            value = value[int(part)]
        elif isinstance(value, dict):
            value = value[part]
        else:
            raise KeyError(path)
    return value


def contains(actual: Any, expected: Any, where: str = "$") -> None:
    """Assert ``expected`` is a subset of ``actual``: objects by key (value
    ``"<absent>"`` demands the key be missing, ``"<any>"`` any value), lists
    element-wise with equal length, scalars equal with JSON types."""
    if expected == ANY:
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected an object, got {actual!r}"
        for key, want in expected.items():
            if want == ABSENT:
                assert key not in actual, f"{where}.{key}: expected absent, got {actual[key]!r}"
            else:
                assert key in actual, f"{where}.{key}: missing in {actual!r}"
                contains(actual[key], want, f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: expected a list, got {actual!r}"
        assert len(actual) == len(expected), f"{where}: expected {len(expected)} items, got {actual!r}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            contains(a, e, f"{where}[{i}]")
    else:
        assert type(actual) is type(expected) and actual == expected, f"{where}: {actual!r} != {expected!r}"


def same(actual: Any, expected: Any, where: str = "$") -> None:
    """Assert ``actual`` is exactly ``expected`` as JSON: the same keys, the
    same lengths, and scalars of the same JSON type. Python's ``==`` holds
    ``3 == 3.0 == True``, so it cannot see a float read back as an integer or
    a count that became a boolean."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected an object, got {actual!r}"
        assert sorted(actual) == sorted(expected), f"{where}: keys {sorted(actual)} != {sorted(expected)}"
        for key, want in expected.items():
            same(actual[key], want, f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: expected a list, got {actual!r}"
        assert len(actual) == len(expected), f"{where}: expected {len(expected)} items, got {actual!r}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            same(a, e, f"{where}[{i}]")
    else:
        assert type(actual) is type(expected) and actual == expected, f"{where}: {actual!r} != {expected!r}"


@pytest.fixture
def world_store() -> str:
    """The adapter scenarios run over (tests/test_features_postgres.py and _sqlite.py override it)."""
    return "fs"


@pytest.fixture
def world(tmp_path: Path, world_store: str) -> Any:
    if world_store == "postgres":
        with pg_support.schema() as name:
            w = World(tmp_path, pg_schema=name)
            w.open()
            yield w
            if w.sm is not None:
                w.sm.close()
        return
    w = World(tmp_path, sqlite=world_store == "sqlite")
    w.open()
    yield w
    if w.sm is not None:
        w.sm.close()


# -- setup and actions ----------------------------------------------------------


@given("a fresh session store")
def _fresh(world: World) -> None:
    assert world.sm is not None


@given(parsers.parse("the store limits are {options}"))
def _limits(world: World, options: str) -> None:
    world.options = {k: int(v) for k, v in (p.split("=") for p in options.split(","))}
    world.restart()


@given(parsers.parse("the clock is at {ms:d}"))
@when(parsers.parse("the clock is at {ms:d}"))
def _clock_at(world: World, ms: int) -> None:
    world.clock.set(ms)


@given(parsers.parse("the clock advances by {ms:d} ms"))
@when(parsers.parse("the clock advances by {ms:d} ms"))
def _clock_advance(world: World, ms: int) -> None:
    world.clock.advance(ms)


@given(parsers.parse('I call "{fid}" with:'))
@when(parsers.parse('I call "{fid}" with:'))
def _call_with(world: World, fid: str, docstring: str) -> None:
    world.call(fid, world.substitute(docstring))


@given(parsers.re(r'I call "(?P<fid>[^"]+)"$'))
@when(parsers.re(r'I call "(?P<fid>[^"]+)"$'))
def _call_bare(world: World, fid: str) -> None:
    world.call(fid, {})


@given("these calls succeed:")
@when("these calls succeed:")
def _calls_succeed(world: World, docstring: str) -> None:
    # The batch counts as one call for the event steps: "the call delivered
    # events" then names every event the whole batch fired, in order, so a
    # batch used as the action under test can be held to its exact events.
    batch: list[tuple[str, dict[str, Any]]] = []
    for fid, payload in world.substitute(docstring):
        world.call(fid, payload)
        world.expect_ok()
        batch += world.last_events
    world.last_events = batch


@given(parsers.parse('I remember "{path}" as "{name}"'))
@when(parsers.parse('I remember "{path}" as "{name}"'))
def _remember(world: World, path: str, name: str) -> None:
    world.saved[name] = lookup(world.expect_ok(), path)


@given("the store restarts")
@when("the store restarts")
def _restart(world: World) -> None:
    world.restart()


@given(parsers.re(r'an observer "(?P<name>[^"]+)" watches "(?P<fid>[^"]+)"$'))
def _observer(world: World, name: str, fid: str) -> None:
    world.watch(name, fid, {})


@given(parsers.parse('an observer "{name}" watches "{fid}" with filters:'))
def _observer_filtered(world: World, name: str, fid: str, docstring: str) -> None:
    world.watch(name, fid, world.substitute(docstring))


@when(parsers.parse('observer "{name}" is disposed'))
def _dispose(world: World, name: str) -> None:
    # A disposed observer stays gone across restarts too.
    for observation in world.observers.pop(name):
        observation.dispose()
    del world.observer_sources[name]



@given(parsers.parse('these bytes are appended to the file of session "{sid}":'))
@when(parsers.parse('these bytes are appended to the file of session "{sid}":'))
def _append_bytes(world: World, sid: str, docstring: str) -> None:
    # The docstring is the line text; "\\n" inside it stays literal JSON.
    with world.session_file(sid).open("ab") as f:
        f.write(docstring.encode("utf-8"))


@given(parsers.parse('the base64 bytes "{b64}" are appended to the file of session "{sid}"'))
@when(parsers.parse('the base64 bytes "{b64}" are appended to the file of session "{sid}"'))
def _append_raw(world: World, b64: str, sid: str) -> None:
    with world.session_file(sid).open("ab") as f:
        f.write(base64.b64decode(b64))


@given(parsers.parse('the file of session "{sid}" loses its last {n:d} bytes'))
@when(parsers.parse('the file of session "{sid}" loses its last {n:d} bytes'))
def _truncate(world: World, sid: str, n: int) -> None:
    path = world.session_file(sid)
    data = path.read_bytes()
    path.write_bytes(data[:-n])


# -- outcomes ------------------------------------------------------------------


@then("the call succeeds")
def _succeeds(world: World) -> None:
    world.expect_ok()


@then(parsers.parse('the call fails with "{code}"'))
def _fails(world: World, code: str) -> None:
    assert world.error is not None, f"expected {code}, got result {world.result!r}"
    assert world.error.code == code, f"expected {code}, got {world.error}"
    assert str(world.error).startswith(f"{code}: ")


@then(parsers.parse('the error message contains "{text}"'))
def _error_text(world: World, text: str) -> None:
    assert world.error is not None and text in str(world.error), f"{text!r} not in {world.error}"


@then("the result is:")
def _result_is(world: World, docstring: str) -> None:
    same(world.expect_ok(), world.substitute(docstring))


@then("the result contains:")
def _result_contains(world: World, docstring: str) -> None:
    contains(world.expect_ok(), world.substitute(docstring))


@then("the result is null")
def _result_null(world: World) -> None:
    assert world.expect_ok() is None


@then(parsers.parse('the result at "{path}" is:'))
def _result_at(world: World, path: str, docstring: str) -> None:
    same(lookup(world.expect_ok(), path), world.substitute(docstring), f"$.{path}")


@then(parsers.parse('the result at "{path}" has {n:d} items'))
def _result_len(world: World, path: str, n: int) -> None:
    assert len(lookup(world.expect_ok(), path)) == n


@then(parsers.parse('the result has no "{path}"'))
def _result_absent(world: World, path: str) -> None:
    # The parent must exist and be an object or list: a null or scalar
    # result would otherwise "lack" every key and pass vacuously.
    head, _, last = path.rpartition(".")
    parent = lookup(world.expect_ok(), head)
    assert isinstance(parent, (dict, list)), f"{head or '$'} is {parent!r}, not an object or list"
    if isinstance(parent, dict):
        assert last not in parent, f"{path}: expected absent, got {parent[last]!r}"
    else:
        assert int(last) >= len(parent), f"{path}: expected absent, got {parent[int(last)]!r}"



@then(parsers.parse('the entry ids at "{path}" are "{ids}"'))
def _entry_ids(world: World, path: str, ids: str) -> None:
    got = [m["entry_id"] for m in lookup(world.expect_ok(), path)]
    assert got == [i.strip() for i in ids.split(",") if i.strip()]


# -- events --------------------------------------------------------------------


@then("the call delivered no events")
def _no_events(world: World) -> None:
    assert world.last_events == [], f"unexpected events {world.last_events!r}"


@then(parsers.parse('the call delivered events "{fids}"'))
def _events_in_order(world: World, fids: str) -> None:
    assert [f for f, _ in world.last_events] == [f.strip() for f in fids.split(",")]


@then(parsers.parse('the call delivered "{fid}" with:'))
def _event_with(world: World, fid: str, docstring: str) -> None:
    matching = [p for f, p in world.last_events if f == fid]
    assert len(matching) == 1, f"expected one {fid}, got {world.last_events!r}"
    contains(matching[0], world.substitute(docstring))


@then(parsers.parse('the call delivered exactly "{fid}":'))
def _event_exact(world: World, fid: str, docstring: str) -> None:
    matching = [p for f, p in world.last_events if f == fid]
    assert len(matching) == 1, f"expected one {fid}, got {world.last_events!r}"
    same(matching[0], world.substitute(docstring))


@then(parsers.parse('{n:d} "{fid}" events were delivered in total'))
def _events_total(world: World, n: int, fid: str) -> None:
    assert sum(1 for f, _ in world.all_events if f == fid) == n


@then(parsers.parse('observer "{name}" received {n:d} events'))
def _observer_count(world: World, name: str, n: int) -> None:
    assert len(world.observed[name]) == n, world.observed[name]


@then(parsers.parse('observer "{name}" event {i:d} contains:'))
def _observer_event(world: World, name: str, i: int, docstring: str) -> None:
    contains(world.observed[name][i - 1], world.substitute(docstring))


# -- disk ------------------------------------------------------------------------


@then("the data dir holds the files:")
def _files(world: World, docstring: str) -> None:
    # The owner's lock file is the store's own, not a session's: scenarios list session files.
    names = sorted(p.name for p in world.data_dir.iterdir() if p.is_file() and p.name != LOCK_NAME)
    assert names == sorted(json.loads(docstring))


@then(parsers.parse('the file of session "{sid}" exists'))
def _file_exists(world: World, sid: str) -> None:
    path = world.session_file(sid)
    assert path.is_file() and path.resolve().parent == world.data_dir.resolve()


@then(parsers.parse('the file of session "{sid}" does not exist'))
def _file_gone(world: World, sid: str) -> None:
    assert not world.session_file(sid).exists()


@then(parsers.parse('the file of session "{sid}" has {n:d} lines'))
def _file_lines(world: World, sid: str, n: int) -> None:
    assert len(world.session_file(sid).read_bytes().splitlines()) == n


@then(parsers.parse('the last line of the file of session "{sid}" is a "{kind}" record'))
def _last_record(world: World, sid: str, kind: str) -> None:
    last = world.session_file(sid).read_bytes().splitlines()[-1]
    assert json.loads(last)["type"] == kind
