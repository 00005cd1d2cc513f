"""Steps for the ownership feature: a second opener of the scenario's data
dir (writable or read-only), and calls through the read-only one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytest_bdd import given, parsers, then, when

import session_manager
from tests.steps.common import World, contains


@pytest.fixture
def second(world: World) -> Iterator[dict[str, object]]:
    holder: dict[str, object] = {}
    yield holder
    other = holder.get("store")
    if isinstance(other, session_manager.SessionManager):
        other.close()


@when("a second writable store opens the data dir")
def _second_writable(world: World, second: dict[str, object]) -> None:
    try:
        second["store"] = session_manager.open(world.data_dir)
    except session_manager.SessionError as e:
        second["error"] = e


@then(parsers.parse('the second open fails with "{code}" containing "{text}"'))
def _second_failed(world: World, second: dict[str, object], code: str, text: str) -> None:
    error = second.get("error")
    assert isinstance(error, session_manager.SessionError), f"the second open succeeded: {second}"
    assert error.code == code and world.substitute(f'"{text}"') in str(error), str(error)


@given("a read-only store opens the data dir")
@when("a read-only store opens the data dir")
def _read_only(world: World, second: dict[str, object]) -> None:
    second["store"] = session_manager.open(world.data_dir, read_only=True)


@when(parsers.parse('I call "{fid}" on the read-only store with:'))
def _call_read_only(world: World, second: dict[str, object], fid: str, docstring: str) -> None:
    store = second["store"]
    assert isinstance(store, session_manager.SessionManager)
    second.pop("result", None)
    second.pop("error", None)
    try:
        second["result"] = store.call(fid, world.substitute(docstring))
    except session_manager.SessionError as e:
        second["error"] = e


@then("the read-only call succeeds with:")
def _read_only_ok(world: World, second: dict[str, object], docstring: str) -> None:
    assert "error" not in second, second.get("error")
    contains(second["result"], world.substitute(docstring))


@then(parsers.parse('the read-only call fails with "{code}" containing "{text}"'))
def _read_only_failed(second: dict[str, object], code: str, text: str) -> None:
    error = second.get("error")
    assert isinstance(error, session_manager.SessionError), second.get("result")
    assert error.code == code and text in str(error), str(error)
