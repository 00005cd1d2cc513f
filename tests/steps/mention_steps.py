"""Steps for the mention feature: seed sessions with chosen ids, parents,
kinds and update times; read search results as id lists; prove a text
(the parked draft) appears nowhere in a result; read registration metadata;
run the project's token-grammar fixture."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pytest_bdd import given, parsers, then, when

from session_manager._hosts.surface import BY_ID
from session_manager.mentions import format_mention, parse_mentions, parse_prose_mentions
from tests.material import FIXTURES
from tests.steps.common import World, same

TOKEN_FIXTURE = FIXTURES / "mention_tokens.json"
"""The project's own grammar cases (read on use, never at import)."""


def load_token_fixture() -> dict[str, Any]:
    """The shared grammar cases, or a skip naming where they were looked for
    (a clone with nothing beside it has no ``../shared``)."""
    if not TOKEN_FIXTURE.is_file():
        pytest.skip(f"the shared mention-token fixture is not at {TOKEN_FIXTURE}", allow_module_level=True)
    data: dict[str, Any] = json.loads(TOKEN_FIXTURE.read_text(encoding="utf-8"))
    return data


def run_parse_case(case: dict[str, Any]) -> list[list[str]]:
    """``[name, id, token]`` of every mention the case's reader finds in its text."""
    parse = parse_prose_mentions if case["reader"] == "code_aware" else parse_mentions
    return [[m.name, m.id, m.token] for m in parse(case["text"])]


@given("the mention sessions:")
def _mention_sessions(world: World, datatable: list[list[str]]) -> None:
    header, *rows = datatable
    for row in rows:
        cell = dict(zip(header, (c.strip() for c in row), strict=True))
        metadata: dict[str, Any] = {}
        if cell.get("parent"):
            metadata["parent_session_id"] = cell["parent"]
        if cell.get("kind"):
            metadata["kind"] = cell["kind"]
        payload: dict[str, Any] = {"session_id": cell["session_id"], "title": cell.get("title", "")}
        if cell.get("description"):
            payload["description"] = cell["description"]
        if metadata:
            payload["metadata"] = metadata
        world.clock.set(int(cell["updated_at"]))
        world.call("session::ensure", payload)
        assert world.expect_ok()["created"] is True


@given(parsers.parse("{n:d} plain sessions exist"))
def _plain_sessions(world: World, n: int) -> None:
    for i in range(n):
        world.clock.set(2_000_000 + i)
        world.call("session::create", {"title": f"plain {i:03d}"})
        world.expect_ok()


@then(parsers.re(r'the mention ids are "(?P<ids>[^"]*)"'))
def _mention_ids(world: World, ids: str) -> None:
    got = [row["id"] for row in world.expect_ok()["items"]]
    assert got == [i.strip() for i in ids.split(",") if i.strip()], got


@then(parsers.parse("the mention search returns {n:d} rows"))
def _mention_rows(world: World, n: int) -> None:
    assert len(world.expect_ok()["items"]) == n


@then(parsers.parse('the result does not contain the text "{text}"'))
def _no_text(world: World, text: str) -> None:
    rendered = json.dumps(world.expect_ok(), ensure_ascii=False)
    assert text not in rendered, f"{text!r} leaked into {rendered}"


@then(parsers.parse('the registration metadata of "{fid}" is:'))
def _registration_metadata(world: World, fid: str, docstring: str) -> None:
    same(BY_ID[fid].registration_metadata(), json.loads(docstring))


@when("every case of the mention token fixture is run", target_fixture="token_failures")
def _run_fixture() -> list[str]:
    fixture = load_token_fixture()
    failures = []
    for case in fixture["parse"]:
        got = run_parse_case(case)
        if got != case["found"]:
            failures.append(f"parse ({case['why']}): {got!r}")
    for case in fixture["format"]:
        got_token = format_mention(case["name"], case["id"])
        if got_token != case["token"]:
            failures.append(f"format {case['id']!r}: {got_token!r}")
        if [(m.name, m.id) for m in parse_mentions(got_token)] != [(case["name"], case["id"])]:
            failures.append(f"format {case['id']!r} does not parse back")
    assert len(fixture["parse"]) > 0 and len(fixture["format"]) > 0
    return failures


@then("no grammar case fails")
def _no_failures(token_failures: list[str]) -> None:
    assert token_failures == []
