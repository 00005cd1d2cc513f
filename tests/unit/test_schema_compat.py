"""Wire compatibility with the reference worker's registered schemas.

For every golden schema (``golden-schemas`` of the reference material beside
the repository; every test here skips, with the reason, without it) of a
function our surface registers:

* requests: instances generated from the golden request schema are accepted
  by our request model with the same meaning (every value we keep equals the
  value sent; no golden property is unknown to us);
* responses: what our handlers answer validates against the golden response
  schema.

Deliberate differences (required by the seed or the issue) are listed in
``REQUEST_DIFFERENCES`` with the reason; an instance they explain must be
refused with ``session/invalid_request``, never accepted differently.
"""

from __future__ import annotations

import base64
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hypothesis.internal.conjecture.utils as _cu
import hypothesis_jsonschema._from_schema as _hjs_from_schema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis_jsonschema import from_schema
from jsonschema import Draft7Validator
from pydantic import BaseModel

import session_manager
from session_manager._hosts.surface import BY_ID
from session_manager._wire.validation import parse_request
from session_manager._worker.config_client import (
    ConfigStatusRequest,
    ConfigStatusResponse,
    OnConfigChangeRequest,
    OnConfigChangeResponse,
    ReloadStatus,
)
from session_manager.clock import ManualClock
from session_manager.errors import SessionError
from session_manager.ids import SequentialIds
from tests.material import golden_schemas

# Optional material: listed (the `reference` marker) so CI can subtract these from a fresh clone's count.
pytestmark = pytest.mark.reference

Golden = dict[str, dict[str, Any]]


@pytest.fixture(scope="session")
def golden() -> Golden:
    """The reference's golden schemas by function id (skips the test without them)."""
    return golden_schemas()


# Functions served outside the surface table (the iii host's configuration pair).
EXTRA_MODELS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "session::config-status": (ConfigStatusRequest, ConfigStatusResponse),
    "session::on-config-change": (OnConfigChangeRequest, OnConfigChangeResponse),
}


def request_model(fid: str) -> type[BaseModel]:
    return BY_ID[fid].request if fid in BY_ID else EXTRA_MODELS[fid][0]


# Known without the golden files, so a fresh clone collects the same tests (and skips them).
OURS = sorted({*(fid for fid, f in BY_ID.items() if f.reference), *EXTRA_MODELS})  # (ours alone: not in the golden set)


# -- deliberate differences -----------------------------------------------------------

MAX_I64 = 2**63 - 1


def _walk(value: Any) -> Any:
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def _empty_id(instance: dict[str, Any]) -> bool:
    ids = [v for k, v in instance.items() if k.endswith("_id")]
    ids += [v for v in instance.get("entry_ids") or []]
    return "" in ids


def _int_over_i64(instance: dict[str, Any]) -> bool:
    return any(isinstance(v, int) and not isinstance(v, bool) and not -MAX_I64 - 1 <= v <= MAX_I64
               for v in _walk(instance))


def _bad_unicode(instance: dict[str, Any]) -> bool:
    # Text with a lone UTF-16 surrogate has no UTF-8 form: it cannot be stored.
    return any(isinstance(v, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in v) for v in _walk(instance))


REQUEST_DIFFERENCES: list[tuple[str, Callable[[dict[str, Any]], bool]]] = [
    ("ids must be non-empty: we reject \"\" with session/invalid_request (seed: caller ids are "
     "non-empty; the reference would store/lookup an empty id)", _empty_id),
    ("integers beyond the signed 64-bit range: the golden schemas bound them only through `format` "
     "(int64 / uint64 / uint), which the reference's serde enforces too (2^64 and up fails there as "
     "well); we also cap `limit` at 2^63-1, where the reference's usize would clamp 2^63..2^64-1 to "
     "max_list_limit, which is what any such limit means anyway", _int_over_i64),
    ("text with lone surrogates cannot be encoded as UTF-8 JSONL", _bad_unicode),
]

RESPONSE_DIFFERENCES = {
    "session::set-draft": "adds `attachments` (the draft's resolved attachment list); the golden "
                          "SetDraftResponse allows extra properties, so it still validates",
}


def explained(instance: Any) -> str | None:
    if not isinstance(instance, dict):
        return None
    for reason, applies in REQUEST_DIFFERENCES:
        if applies(instance):
            return reason
    return None


# -- requests ---------------------------------------------------------------------------


def kept_subset(kept: Any, sent: Any, where: str) -> None:
    """Every value our model kept equals the value sent (JSON equality)."""
    if isinstance(kept, dict):
        assert isinstance(sent, dict), f"{where}: {sent!r} became an object"
        for key, value in kept.items():
            assert key in sent, f"{where}.{key}: invented by our model ({value!r})"
            kept_subset(value, sent[key], f"{where}.{key}")
    elif isinstance(kept, list):
        assert isinstance(sent, list) and len(sent) == len(kept), f"{where}: list changed: {sent!r}"
        for i, (k, s) in enumerate(zip(kept, sent, strict=True)):
            kept_subset(k, s, f"{where}[{i}]")
    else:
        assert kept == sent and (type(kept) is bool) == (type(sent) is bool), f"{where}: {sent!r} -> {kept!r}"


def test_every_golden_function_is_checked_or_out_of_scope(golden: Golden) -> None:
    # Prevents: a function silently dropped from the compatibility check.
    not_ours = set(golden) - set(OURS)
    assert not_ours <= {fid for fid in golden if fid.startswith("session::store::")}
    assert set(OURS) <= set(golden) and len(OURS) >= 22


@pytest.mark.parametrize("fid", OURS)
def test_golden_properties_are_known(fid: str, golden: Golden) -> None:
    # Prevents: a reference request field our model would silently drop.
    theirs = golden[fid]["request_schema"].get("properties", {})
    ours = request_model(fid).model_fields
    assert sorted(set(theirs) - set(ours)) == []


class _LegacyMany:
    """hypothesis-jsonschema 0.23.1 drives ``cu.many`` with the old
    ``while elements.more()`` protocol, which newer hypothesis replaced with
    ``with many(...) as e: for _ in e``. This adapter speaks the old one on
    top of the new (test-only shim; drop it once hypothesis-jsonschema catches up)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._many = _cu.many(*args, **kwargs)
        if hasattr(self._many, "more"):  # an older hypothesis: nothing to adapt
            self.more, self.reject = self._many.more, self._many.reject
            return
        self._many.__enter__()
        self._it = iter(self._many)

    def more(self) -> bool:
        try:
            next(self._it)
            return True
        except StopIteration:
            self._many.__exit__(None, None, None)
            return False

    def reject(self, why: str | None = None) -> None:
        self._many.reject(why)


@pytest.fixture(autouse=True)
def _hypothesis_jsonschema_compat(monkeypatch: pytest.MonkeyPatch) -> None:
    shim = types.SimpleNamespace(**{k: getattr(_cu, k) for k in dir(_cu) if not k.startswith("__")})
    shim.many = _LegacyMany
    monkeypatch.setattr(_hjs_from_schema, "cu", shim)


def unrolled(schema: dict[str, Any], depth: int = 1) -> Any:
    """The schema with every ``$ref`` inlined; a definition nested in itself
    more than ``depth`` times becomes ``false`` (hypothesis-jsonschema cannot
    generate from recursive references; ContentBlock nests in itself)."""
    defs = schema.get("definitions", {})

    def inline(node: Any, stack: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                name = node["$ref"].rsplit("/", 1)[-1]
                if stack.count(name) >= depth:
                    return False
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return inline({**defs[name], **rest}, (*stack, name))
            return {k: inline(v, stack) for k, v in node.items() if k != "definitions"}
        if isinstance(node, list):
            return [inline(v, stack) for v in node]
        return node

    return inline(schema, ())


@pytest.mark.parametrize("fid", OURS)
def test_golden_requests_are_accepted_with_the_same_meaning(fid: str, golden: Golden) -> None:
    # Prevents: a caller of the reference worker's contract being refused or misread by ours.
    model = request_model(fid)
    schema = unrolled(golden[fid]["request_schema"])

    # append-many's generated batches are large: 8 of them cost more than 20 of any other request.
    @settings(max_examples=8 if fid == "session::append-many" else 20, deadline=None, database=None,
              derandomize=True, suppress_health_check=list(HealthCheck))
    @given(from_schema(schema))
    def check(instance: Any) -> None:
        try:
            parsed = parse_request(model, instance)
        except SessionError as e:
            assert e.code == "session/invalid_request"
            assert explained(instance), f"{fid} refused {instance!r}: {e}"
            return
        kept_subset(parsed.model_dump(mode="json", exclude_unset=True), instance, "$")

    check()


@pytest.mark.parametrize("fid", OURS)
def test_minimal_golden_request_is_accepted(fid: str, golden: Golden) -> None:
    # Prevents: a required field of ours that the reference treats as optional.
    schema = golden[fid]["request_schema"]
    required = set(schema.get("required", []))
    model = request_model(fid)
    ours_required = {name for name, f in model.model_fields.items() if f.is_required()}
    assert ours_required <= required, f"{fid}: we also require {ours_required - required}"


# -- responses ---------------------------------------------------------------------------


def _user(text: str, ts: int = 5) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "thinking", "text": "hm"}, {"type": "text", "text": text}],
            "stop_reason": "end", "model": "m", "provider": "p", "timestamp": 6,
            "usage": {"input": 3, "output": 4, "cost_usd": 0.5}}


def scripted_responses(data_dir: Path) -> dict[str, list[Any]]:
    """Calls every function (several shapes each) and keeps the answers."""
    out: dict[str, list[Any]] = {}
    sm = session_manager.open(data_dir, ids=SequentialIds(), clock=ManualClock(1_000_000))

    def call(fid: str, payload: dict[str, Any]) -> Any:
        result = sm.call(fid, payload)
        out.setdefault(fid, []).append(result)
        return result

    try:
        call("session::create", {"title": "t", "metadata": {"owner": "u_1"}})
        call("session::create", {})
        call("session::ensure", {"session_id": "mine", "title": "x"})
        call("session::ensure", {"session_id": "mine"})
        call("session::get", {"session_id": "s_001"})
        call("session::get", {"session_id": "nope"})
        call("session::set-meta", {"session_id": "s_001", "title": "t2", "metadata": {"owner": "u_2"}})
        call("session::set-status", {"session_id": "s_001", "status": "working", "reason": "busy"})
        call("session::append", {"session_id": "s_001", "message": _user("hi"), "entry_id": "u1"})
        call("session::append", {"session_id": "s_001", "message": _assistant(""), "origin": {"hook": "h"}})
        call("session::append", {"session_id": "s_001", "custom": {"custom_type": "note", "data": {"k": 1}}})
        call("session::append-many", {"session_id": "s_001", "messages": [
            _user("a"), {"role": "function_result", "function_call_id": "c1", "function_id": "f::x",
                         "content": [{"type": "text", "text": "r"}], "timestamp": 7}]})
        call("session::update-message", {"session_id": "s_001", "entry_id": "e_001",
                                         "content": [{"type": "text", "text": "It works."}]})
        data = base64.b64encode(b"hello").decode()
        put = call("session::put-attachment", {"session_id": "s_001", "name": "a.txt", "mime": "text/plain",
                                               "data": data})
        aid = put["attachment"]["attachment_id"]
        call("session::append", {"session_id": "s_001", "message": {
            "role": "user", "timestamp": 8, "content": [put["block"], {
                "type": "image", "mime": "image/png", "data": base64.b64encode(b"png").decode()}]}})
        call("session::set-draft", {"session_id": "s_001", "draft": "typing"})
        call("session::set-draft", {"session_id": "s_001"})
        call("session::get-attachment", {"session_id": "s_001", "attachment_id": aid})
        call("session::get-attachment", {"session_id": "s_001", "attachment_id": aid, "include_data": False})
        call("session::get-attachment", {"session_id": "s_001", "attachment_id": "a_none"})
        call("session::list-attachments", {"session_id": "s_001"})
        call("session::messages", {"session_id": "s_001"})
        call("session::messages", {"session_id": "s_001", "limit": 1, "include_custom": True})
        call("session::messages", {"session_id": "s_001", "roles": ["user"], "include_image_data": True})
        call("session::messages-tail", {"session_id": "s_001", "limit": 2})
        call("session::messages-tail", {"session_id": "s_001"})
        call("session::messages-range", {"session_id": "s_001", "from_entry_id": "u1", "to_entry_id": "e_001"})
        call("session::messages-range", {"session_id": "s_001", "entry_ids": ["u1", "e_001"], "limit": 1})
        call("session::get-message", {"session_id": "s_001", "entry_id": "u1"})
        call("session::get-message", {"session_id": "s_001", "entry_id": "e_002"})
        call("session::get-message", {"session_id": "s_001", "entry_id": "nope"})
        call("session::list", {})
        call("session::list", {"limit": 1, "status": "working"})
        call("session::list", {"metadata": {"owner": "u_2"}})
        call("session::fork", {"session_id": "s_001", "entry_id": "u1", "title": "branch"})
        call("session::set-active-leaf", {"session_id": "s_001", "entry_id": "u1"})
        call("session::delete-attachment", {"session_id": "s_001", "attachment_id": "a_none"})
        if "session::mention::search" in BY_ID:
            call("session::mention::search", {"query": "t2"})
            call("session::mention::search", {"query": "", "limit": 2, "context": {"session_id": "mine"}})
        if "session::mention::get" in BY_ID:
            call("session::mention::get", {"id": "s_001"})
            call("session::mention::get", {"id": "nope"})
        call("session::delete", {"session_id": "s_002"})
        call("session::delete", {"session_id": "s_002"})
    finally:
        sm.close()
    status = ReloadStatus()
    out["session::config-status"] = [status.snapshot()]
    status.rejected("cannot open data_dir /x")
    out["session::config-status"].append(status.snapshot())
    out["session::on-config-change"] = [{"ok": True}]
    return out


@pytest.fixture(scope="module")
def responses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    return scripted_responses(tmp_path_factory.mktemp("compat"))


@pytest.mark.parametrize("fid", OURS)
def test_our_responses_validate_against_golden(fid: str, golden: Golden, responses: dict[str, list[Any]]) -> None:
    # Prevents: an answer a client of the reference contract cannot read.
    assert fid in responses, f"{fid} has no scripted call"
    validator = Draft7Validator(golden[fid]["response_schema"])
    for response in responses[fid]:
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(response)]
        assert errors == [], f"{fid}: {response!r}"


def test_differences_are_real(golden: Golden, responses: dict[str, list[Any]]) -> None:
    # Prevents: a stale entry in the list of deliberate differences.
    with pytest.raises(SessionError) as err:
        parse_request(BY_ID["session::get"].request, {"session_id": ""})
    assert err.value.code == "session/invalid_request"
    assert any("attachments" in r for r in responses["session::set-draft"])
    assert "attachments" not in golden["session::set-draft"]["response_schema"].get("properties", {})
    assert RESPONSE_DIFFERENCES

