"""The mention token grammar against the project's fixture (every parse and
format case; the fixture is checked against the reference's cases when they
sit beside the repository), plus the provider descriptor, the wire defaults and the
timestamp format the session provider relies on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from session_manager.mentions import (
    MentionDetails,
    MentionField,
    MentionProvider,
    MentionSearchRequest,
    MentionView,
    format_mention,
    is_valid_name,
    parse_mentions,
    parse_prose_mentions,
)
from session_manager.mentions.sessions import PROVIDER, rfc3339_from_ms
from tests.material import require_reference
from tests.steps.mention_steps import load_token_fixture, run_parse_case

FIXTURE = load_token_fixture()  # the repository's own file: a fresh clone has it


@pytest.mark.parametrize("case", FIXTURE["parse"], ids=lambda c: c["why"])
def test_parse_case(case: dict[str, Any]) -> None:
    # Prevents: a token the console renders as a pill that we miss, or the reverse.
    assert run_parse_case(case) == case["found"]


@pytest.mark.reference
def test_fixture_holds_every_reference_case() -> None:
    # Prevents: our fixture drifting from the reference's shared grammar cases (skips without them).
    shared = json.loads(require_reference("mention-tokens.json").read_text(encoding="utf-8"))
    theirs = [(c["text"], bool(c.get("prose")), [[m["name"], m["id"], m["token"]] for m in c["mentions"]])
              for c in shared["parse"]]
    ours = [(c["text"], c["reader"] == "code_aware", c["found"]) for c in FIXTURE["parse"]]
    assert sorted(map(repr, theirs)) == sorted(map(repr, ours))
    assert sorted(map(repr, shared["format"])) == sorted(map(repr, FIXTURE["format"]))


@pytest.mark.parametrize("case", FIXTURE["format"], ids=lambda c: c["token"])
def test_format_case(case: dict[str, Any]) -> None:
    # Prevents: writing a token other parsers read differently.
    token = format_mention(case["name"], case["id"])
    assert token == case["token"]
    assert [(m.name, m.id, m.token) for m in parse_mentions(token)] == [(case["name"], case["id"], token)]


def test_strict_parse_reads_tokens_inside_code() -> None:
    # Prevents: the code-skipping rule leaking into the plain parser.
    text = '`@kanban(id="1")`'
    assert [m.id for m in parse_mentions(text)] == ["1"]
    assert parse_prose_mentions(text) == []


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ('@kanban(id="\\ud800")', []),  # a lone surrogate is not text
        ("@kanban(id=\"" + "x" * 512 + "\")", ["x" * 512]),
        ("@kanban(id=\"" + "x" * 513 + "\")", []),
        ('@kanban(id="a\u0085b)', []),  # a C1 control in the tolerated form
        ('é@kanban(id="1")', []),  # a non-ASCII letter is a word character too
    ],
)
def test_id_bounds(text: str, ids: list[str]) -> None:
    # Prevents: ids no other implementation accepts.
    assert [m.id for m in parse_mentions(text)] == ids


def test_names() -> None:
    # Prevents: a provider name the token grammar cannot carry.
    assert is_valid_name("a" * 40) and not is_valid_name("a" * 41)
    assert is_valid_name("my-worker2")
    assert not any(is_valid_name(n) for n in ("", "fn", "file", "skill", "Kanban", "1x", "-a", "a_b"))


def test_provider_round_trips_through_metadata() -> None:
    # Prevents: a descriptor consumers reject or read differently.
    meta = PROVIDER.metadata()
    assert meta["internal"] is True and meta["trace_hidden"] is True
    back = MentionProvider.from_metadata(meta)
    assert back == PROVIDER
    assert back is not None and back.details == MentionDetails("session::get", "session_id")
    assert back.details.payload("s_1") == {"session_id": "s_1"}


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"mention": {"name": "fn", "label": "x", "search": "a::b"}},
        {"mention": {"name": "Bad", "label": "x", "search": "a::b"}},
        {"mention": {"name": "ok", "label": " ", "search": "a::b"}},
        {"mention": {"name": "ok", "label": "x", "search": ""}},
        {"mention": {"name": "ok", "label": "x", "search": "a::b", "details": {"function_id": ""}}},
        {"mention": {"name": "ok", "label": 3, "search": "a::b"}},
        {"mention": "session"},
    ],
)
def test_invalid_descriptors_are_ignored(raw: dict[str, Any]) -> None:
    # Prevents: a malformed descriptor registering a broken provider.
    assert MentionProvider.from_metadata(raw) is None


def test_details_id_field_defaults_to_id() -> None:
    provider = MentionProvider.from_metadata(
        {"mention": {"name": "kanban", "label": "Tickets", "search": "k::s", "details": {"function_id": "k::get"}}}
    )
    assert provider is not None and provider.details == MentionDetails("k::get", "id") and provider.v == 1


@pytest.mark.parametrize(("limit", "effective"), [(None, 8), (0, 1), (1, 1), (50, 50), (51, 50), (10**12, 50)])
def test_search_limit(limit: int | None, effective: int) -> None:
    # Prevents: a menu of unbounded or zero rows.
    assert MentionSearchRequest(limit=limit).effective_limit() == effective


def test_agent_summary_defaults_to_label_hint_description_and_fields() -> None:
    view = MentionView(
        id="1", label='Fix "login"', hint="KAN-12", description="In progress",
        fields=[MentionField(label="Priority", value="high", tone="warning")],
    )  # fmt: skip
    assert view.agent_summary() == 'KAN-12 "Fix \\"login\\"" — In progress · Priority: high'
    assert view.model_copy(update={"summary": "  written  "}).agent_summary() == "written"
    assert "fields" not in MentionView(id="1", label="x").to_json()


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (951_782_400_123, "2000-02-29T00:00:00.123Z"),
        (1_791_244_800_000, "2026-10-06T00:00:00.000Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
    ],
)
def test_rfc3339(ms: int, text: str) -> None:
    # Prevents: wrong dates around leap days, the epoch and negative times.
    assert rfc3339_from_ms(ms) == text


@pytest.mark.parametrize("before", ["\u093f", "\u24b6", "\u0e35", "x", "7", "_"])
def test_no_token_right_after_a_unicode_alphanumeric(before: str) -> None:
    # Prevents: a mention read out of the middle of a word in scripts whose vowel signs and
    # circled letters Rust's is_alphanumeric counts as letters (Devanagari, Thai, Ⓐ).
    assert parse_mentions(before + '@kanban(id="1")') == []
    assert [m.id for m in parse_mentions(before + ' @kanban(id="1")')] == ["1"]


def test_title_words_split_as_the_reference_splits_them() -> None:
    # Prevents: word-prefix search missing Indic and Thai titles (vowel signs taken as breaks).
    from session_manager.mentions.sessions import search_metas

    def meta(sid: str, title: str) -> dict[str, object]:
        return {"session_id": sid, "title": title, "description": "", "status": "idle",
                "created_at": 0, "updated_at": 1, "message_count": 0}

    metas = [meta("s_hi", "hello दुनिया"), meta("s_th", "ภาษาไทย ดี")]
    assert [m["session_id"] for m in search_metas(metas, "hel दुनि", None, 8)] == ["s_hi"]
    assert [m["session_id"] for m in search_metas(metas, "ดี ภาษา", None, 8)] == ["s_th"]


def test_backtick_runs_without_partners_are_read_right() -> None:
    # Prevents: parse_prose_mentions misreading a 1 MB text of unpartnered backtick runs of distinct
    # lengths once their partners are found by bisect (each run used to search the rest of the text,
    # a minute of CPU: `python bench/bench_mentions.py` prints what it costs now; tests time nothing).
    text = " ".join("`" * k for k in range(1, 1415)) + ' @kanban(id="1")'
    assert len(text) > 1_000_000
    assert [m.id for m in parse_prose_mentions(text)] == ["1"]


def test_many_unclosed_token_starts_are_read_right() -> None:
    # Prevents: the `)` search of the tolerated unclosed form, now stopped 512 characters on (the
    # longest id; it searched the rest of the text from every token start, ~20 s on 2 MB), accepting
    # less or more than before (the bench prints its cost).
    text = '@a(id="' * 300_000 + ")"
    assert [(m.id, m.token) for m in parse_mentions(text)] == [("@a(id=", '@a(id="@a(id=")')]
    far = '@a(id="' + "x" * 512 + ")" + ' @a(id="' + "y" * 513 + ")"
    assert [m.id for m in parse_mentions(far)] == ["x" * 512]  # the bound is the id's, no tighter
