"""The typed API: generated from the function table, checked against it, and
storing exactly what the equivalent dict call stores; strict embedded call()."""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path
from typing import Any

import pytest

import session_manager
from session_manager import aio, types
from session_manager._hosts import typed_gen as _typed_gen
from session_manager._hosts.surface import FUNCTIONS
from session_manager._hosts.typed import AsyncTypedMethods, TypedMethods
from session_manager._hosts.typed_support import as_content
from session_manager._wire.events import ON_MESSAGE_ADDED
from session_manager.clock import ManualClock
from session_manager.errors import INVALID_REQUEST, NOT_FOUND, SessionError
from session_manager.ids import SequentialIds
from session_manager.messages import (
    assistant_message,
    custom,
    custom_message,
    function_call,
    function_result_message,
    text,
    user_message,
)
from session_manager.types import CustomPayload, Usage

START_MS = 1_000_000
TX = re.compile(rb'"tx":"[0-9a-f]+"')


def open_store(where: Path) -> session_manager.SessionManager:
    return session_manager.open(where, ids=SequentialIds(), clock=ManualClock(START_MS))


def typed_rows() -> list[Any]:
    return [f for f in FUNCTIONS if f.id not in _typed_gen.UNTYPED]


# -- drift: the table, the generated file and the methods agree ----------------------------------


def test_checked_in_typed_module_is_what_the_generator_writes_from_the_table() -> None:
    # Prevents: a table or model change (new function, new field, renamed response) that the
    # checked-in typed methods silently miss; fix with `python -m session_manager._hosts.typed_gen`.
    assert _typed_gen.TARGET.read_text(encoding="utf-8") == _typed_gen.render()
    assert _typed_gen.main(["--check"]) == 0


def test_every_table_row_but_the_mention_provider_has_a_method_and_nothing_else_does() -> None:
    # Prevents: a function reachable through call() but missing from the typed API (or a stale
    # method for a function the table no longer has).
    table = {f.id for f in FUNCTIONS}
    assert table >= _typed_gen.UNTYPED
    assert len(typed_rows()) == 24  # the 21 of the spec, session::purge, session::delete-tree, session::search
    for cls in (TypedMethods, AsyncTypedMethods):
        defined = {n for n, v in vars(cls).items() if inspect.isfunction(v) and not n.startswith("_") and n != "call"}
        assert defined == {_typed_gen.method_name(f.id) for f in typed_rows()}


@pytest.mark.parametrize("cls", [session_manager.SessionManager, aio.AsyncSessionManager])
@pytest.mark.parametrize("function", typed_rows(), ids=lambda f: f.id)
def test_method_parameters_and_return_match_the_request_and_response_models(cls: type, function: Any) -> None:
    # Prevents: a method whose parameters drift from the request model's fields (a field missing,
    # renamed, re-typed, required-ness flipped) or whose return type is not the response model.
    method = getattr(cls, _typed_gen.method_name(function.id))
    assert inspect.iscoroutinefunction(method) == (cls is aio.AsyncSessionManager)
    signature = inspect.signature(method)
    params = list(signature.parameters.values())[1:]
    fields = function.request.model_fields
    assert [p.name for p in params] == list(fields)
    hints = typing.get_type_hints(method, include_extras=True)
    model_hints = typing.get_type_hints(function.request, include_extras=True)
    for p in params:
        info = fields[p.name]
        assert (p.default is inspect.Parameter.empty) == info.is_required(), p.name
        if not info.is_required():
            assert p.default is None and info.default is None, p.name
        # A required session_id is positional; an optional one (search's filter) keyword-only.
        positional = p.name == "session_id" and info.is_required()
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if positional else inspect.Parameter.KEYWORD_ONLY
        assert p.kind == kind, p.name
        if p.name == "content":  # widened: a string, or strings among the blocks (typed_gen.CONTENT_ANNOTATION)
            assert hints[p.name] == typing.get_type_hints(as_content, include_extras=True)["content"]
        else:
            assert hints[p.name] == model_hints[p.name], p.name
    expected = function.response | None if function.nullable else function.response
    assert hints["return"] == expected


def test_every_request_and_response_model_is_exported_publicly() -> None:
    # Prevents: users importing models from private modules that move.
    for f in typed_rows():
        assert getattr(types, f.request.__name__) is f.request
        assert getattr(types, f.response.__name__) is f.response
    assert set(types.__all__) == {n for n in dir(types) if not n.startswith("_") and n != "annotations"}


# -- behaviour ------------------------------------------------------------------------------------


def _dict_script(sm: session_manager.SessionManager) -> list[Any]:
    out: list[Any] = []
    out.append(sm.call("session::create", {"title": "T", "metadata": {"b": 1, "a": 1.0, "n": None}}))
    sid = out[-1]["session_id"]
    out.append(sm.call("session::append", {"session_id": sid, "message": {
        "timestamp": 7, "content": [{"text": "hi", "type": "text"}], "role": "user"}}))
    call = {"type": "function_call", "id": "c1", "function_id": "f", "arguments": {"x": 1.0, "y": 2}}
    out.append(sm.call("session::append", {"session_id": sid, "origin": {"by": "me"}, "message": {
        "role": "assistant", "content": [call], "stop_reason": "function_call", "model": "m", "provider": "p",
        "usage": {"input": 3, "cost_usd": 1}, "timestamp": 8}}))
    out.append(sm.call("session::append-many", {"session_id": sid, "messages": [
        {"role": "function_result", "function_call_id": "c1", "function_id": "f",
         "content": [{"type": "text", "text": "ok"}], "details": {"z": [1.5, 2]}, "is_error": False,
         "timestamp": 9},
        {"role": "custom", "custom_type": "note", "content": [], "details": None, "timestamp": 10}]}))
    out.append(sm.call("session::append", {"session_id": sid, "custom": {"custom_type": "k", "data": {"v": 0.0}}}))
    out.append(sm.call("session::update-message", {"session_id": sid, "entry_id": "e_003",
                                                   "content": [{"type": "text", "text": "done"}],
                                                   "details": {"q": 1}}))
    out.append(sm.call("session::set-status", {"session_id": sid, "status": "working", "reason": "r"}))
    out.append(sm.call("session::messages", {"session_id": sid, "include_custom": True}))
    return out


def _typed_script(sm: session_manager.SessionManager) -> list[Any]:
    out: list[Any] = []
    created = sm.create(title="T", metadata={"b": 1, "a": 1.0, "n": None})
    out.append(created)
    sid = created.session_id
    out.append(sm.append(sid, message=user_message("hi", timestamp=7)))
    call = function_call("f", {"x": 1.0, "y": 2}, id="c1")
    out.append(sm.append(sid, origin={"by": "me"}, message=assistant_message(
        call, model="m", provider="p", usage=Usage(input=3, cost_usd=1), timestamp=8)))
    out.append(sm.append_many(sid, messages=[
        function_result_message(call, "ok", details={"z": [1.5, 2]}, timestamp=9),
        custom_message("note", timestamp=10)]))
    out.append(sm.append(sid, custom=custom("k", {"v": 0.0})))
    out.append(sm.update_message(sid, entry_id="e_003", content=[text("done")], details={"q": 1}))
    out.append(sm.set_status(sid, status="working", reason="r"))
    out.append(sm.messages(sid, include_custom=True))
    return out


def test_typed_calls_store_the_same_bytes_and_answer_the_same_as_dict_calls(tmp_path: Path) -> None:
    # Prevents: the typed path changing stored values (1.0 -> 1, key order, a null written for an
    # absent field, an int cost turned differently) or answering differently from call().
    with open_store(tmp_path / "dict") as a, open_store(tmp_path / "typed") as b:
        dict_out = _dict_script(a)
        typed_out = _typed_script(b)
    assert [types.Wire.model_dump(r, mode="json") if isinstance(r, types.Wire) else r for r in typed_out] == [
        type(t).model_validate(d).model_dump(mode="json") for t, d in zip(typed_out, dict_out, strict=True)
    ]
    # Byte for byte, but for the random transaction id the fs store stamps on a batch (the .index
    # sidecars name inode numbers, so they differ by design; they are a cache of these logs).
    def files(side: str) -> list[Path]:
        root = tmp_path / side
        return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file() and ".index" not in p.parts)

    logs = files("dict")
    assert logs == files("typed")
    assert logs
    for name in logs:
        left, right = ((tmp_path / side / name).read_bytes() for side in ("dict", "typed"))
        assert TX.sub(b"", left) == TX.sub(b"", right), name
    # Read back after a restart: floats stay floats, ints stay ints.
    with open_store(tmp_path / "typed") as again:
        meta = again.get("s_001")
        assert meta is not None and meta.meta.metadata == {"b": 1, "a": 1.0, "n": None}
        assert type(meta.meta.metadata["a"]) is float and type(meta.meta.metadata["b"]) is int
        entry = again.get_message("s_001", entry_id="e_002")
        assert entry is not None and isinstance(entry.entry, types.MessageEntry)
        message = entry.entry.message
        assert isinstance(message, types.AssistantMessage)
        block = message.content[0]
        assert isinstance(block, types.FunctionCallBlock) and block.arguments == {"x": 1.0, "y": 2}
        assert type(block.arguments["x"]) is float and type(block.arguments["y"]) is int


def test_typed_errors_are_session_errors_and_unknown_reads_are_none(tmp_path: Path) -> None:
    # Prevents: a pydantic ValidationError (a traceback, no code) escaping the typed API, or a
    # nullable read raising instead of answering None.
    seen: list[Any] = []
    with open_store(tmp_path / "d") as sm:
        sm.observe({"function_id": ON_MESSAGE_ADDED}, seen.append)
        sid = sm.create().session_id
        with pytest.raises(SessionError) as bad:
            sm.messages(sid, limit=-1)
        assert bad.value.code == INVALID_REQUEST and "limit" in bad.value.detail
        with pytest.raises(SessionError) as missing:
            sm.append("s_none", message=user_message("x", timestamp=1))
        assert missing.value.code == NOT_FOUND
        with pytest.raises(SessionError) as neither:
            sm.append(sid)
        assert neither.value.code == INVALID_REQUEST
        assert sm.get("s_none") is None
        assert sm.get_message(sid, entry_id="e_404") is None
        assert sm.get_attachment(sid, attachment_id="a_404") is None
        assert sm.messages(sid).messages == []
        assert seen == []


def test_message_constructors_fill_the_required_fields_sensibly() -> None:
    # Prevents: constructors that build messages the store refuses, or stop reasons that lie.
    before = session_manager.messages.now_ms()
    u = user_message("hi", text("there"))
    assert u.role == "user" and [b.text for b in u.content] == ["hi", "there"]  # type: ignore[union-attr]
    assert before <= u.timestamp <= session_manager.messages.now_ms()
    a = assistant_message("ok", model="gpt", provider="openai", timestamp=5)
    assert (a.stop_reason, a.model, a.provider, a.timestamp) == ("end", "gpt", "openai", 5)
    call = function_call("get_weather", {"city": "Paris"})
    assert call.id.startswith("call_") and call.id != function_call("get_weather").id
    assert assistant_message(call).stop_reason == "function_call"
    assert assistant_message(call, stop_reason="length").stop_reason == "length"
    r = function_result_message(call, "sunny", is_error=False, timestamp=6)
    assert (r.function_call_id, r.function_id, r.details) == (call.id, "get_weather", None)
    assert custom("k") == CustomPayload(custom_type="k", data=None)


# -- strict embedded call() ---------------------------------------------------------------------


def test_embedded_call_refuses_unknown_top_level_keys_naming_them(tmp_path: Path) -> None:
    # Prevents: a misspelt key ("limt") being dropped silently, so the caller gets the default page
    # size (or, for a mutation, a write that ignored what the caller meant); nothing is half-applied.
    seen: list[Any] = []
    with open_store(tmp_path / "d") as sm:
        sm.observe({"function_id": ON_MESSAGE_ADDED}, seen.append)
        sid = sm.create().session_id
        with pytest.raises(SessionError) as misspelt:
            sm.call("session::messages", {"session_id": sid, "limt": 3})
        assert misspelt.value.code == INVALID_REQUEST
        assert misspelt.value.detail.startswith("limt: unknown field")
        with pytest.raises(SessionError) as two:
            sm.call("session::append", {"session_id": sid, "mesage": {}, "parnet_id": "e"})
        assert two.value.detail.startswith("mesage, parnet_id: unknown fields")
        assert seen == []
        assert sm.messages(sid).messages == []
        # The engine-injected key stays accepted (and is not stored).
        sm.call("session::append", {"session_id": sid, "_caller_worker_id": "w",
                                    "message": {"role": "user", "content": [], "timestamp": 1}})
        # Nested objects keep today's handling: unknown keys there are dropped, not refused.
        sm.call("session::append", {"session_id": sid, "message": {
            "role": "user", "content": [{"type": "text", "text": "t", "bold": True}], "timestamp": 2, "x": 1}})
        page = sm.call("session::messages", {"session_id": sid})["messages"]
        assert [m["message"] for m in page] == [
            {"role": "user", "content": [], "timestamp": 1},
            {"role": "user", "content": [{"type": "text", "text": "t"}], "timestamp": 2},
        ]
        assert len(seen) == 2
    with open_store(tmp_path / "d") as again:
        assert len(again.messages(sid).messages) == 2
        assert "_caller_worker_id" not in (tmp_path / "d" / f"{sid}.jsonl").read_text()


def test_the_wire_host_still_ignores_unknown_top_level_keys(tmp_path: Path) -> None:
    # Prevents: the strictness of the embedded call() leaking onto the wire, where the reference
    # (serde) ignores unknown keys and existing clients rely on it.
    from session_manager._worker.config_value import parse_config
    from session_manager._worker.iii_host import IIIHost
    try:  # the engine double moves into session_manager.testing with the architecture work
        from session_manager.testing import FakeEngine as Fake
    except ImportError:
        from tests.unit.fake_iii import FakeIII as Fake

    fake = Fake()
    config = parse_config({"adapter": {"name": "fs", "config": {"data_dir": str(tmp_path / "w")}}})
    host = IIIHost(fake, config, ids=SequentialIds(), clock=ManualClock(START_MS))
    host.register()
    try:
        sid = fake.invoke("session::create", {"title": "t", "limt": 3})["session_id"]
        page = fake.invoke("session::messages", {"session_id": sid, "limt": 3})
        assert page == {"messages": []}
        assert fake.invoke("session::get", {"session_id": sid})["meta"]["title"] == "t"
    finally:
        host.close()


@pytest.mark.parametrize(("make", "where"), [
    (lambda: {"custom": custom("k", float("nan"))}, "custom.data"),
    (lambda: {"custom": custom("k", {"x": [1, float("inf")]})}, "custom.data.x.1"),
    (lambda: {"message": assistant_message("hi", usage=Usage(cost_usd=float("nan")))}, "message.usage.cost_usd"),
    (lambda: {"message": function_result_message(function_call("f", id="c"), "r", details={"at": {1, 2}})},
     "message.details.at"),
    (lambda: {"custom": custom("k", _nested(5000))}, "custom"),  # the field, not a 5000-level path
])
def test_typed_calls_refuse_what_the_dict_call_refuses(tmp_path: Path, make: Any, where: str) -> None:
    # Prevents: the typed path's model dump turning NaN/inf into null (stored silently changed)
    # where the equivalent dict call is refused naming the field, or a too-deep value raising
    # UnstorableValue (not a SessionError) from a typed method.
    with open_store(tmp_path / "d") as sm:
        sid = sm.create().session_id
        seen: list[Any] = []
        sm.observe({"function_id": ON_MESSAGE_ADDED}, seen.append)
        with pytest.raises(SessionError) as typed:
            sm.append(sid, **make())
        with pytest.raises(SessionError) as raw:
            sm.call("session::append", {"session_id": sid, **{k: v.model_dump() for k, v in make().items()}})
        assert typed.value.code == raw.value.code == INVALID_REQUEST
        assert typed.value.detail.startswith(f"{where}: ") and raw.value.detail.startswith(f"{where}: ")
        assert seen == []
        assert sm.messages(sid, include_custom=True).messages == []


def _nested(depth: int) -> Any:
    value: Any = None
    for _ in range(depth):
        value = {"x": value}
    return value


def test_typed_arguments_keep_plain_containers_and_replace_only_the_models_in_them() -> None:
    # Prevents: to_json copying every plain dict and list of a typed call's arguments (call()
    # copies the payload once itself), or, handing plain containers back as they are,
    # changing the caller's objects where a model or a tuple inside had to be replaced.
    from session_manager._hosts.typed_support import to_json

    plain = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1, "n": 1.5}
    assert to_json(plain) is plain
    usage = Usage(input=1, output=2)
    mixed = {"a": [1, {"usage": usage}], "b": (1, 2), "c": {"d": None}}
    got = to_json(mixed)
    assert got == {"a": [1, {"usage": usage.model_dump(mode="python")}], "b": [1, 2], "c": {"d": None}}
    assert mixed["a"][1]["usage"] is usage and mixed["b"] == (1, 2)  # the caller's objects unchanged
    assert got["c"] is mixed["c"]  # a plain branch is shared


def test_typed_payloads_are_private_copies_built_once_or_the_plain_form_call_checks() -> None:
    # Prevents: the typed payload call() takes without a second copy (ProvenPayload) sharing a
    # container with the caller (a later change of theirs would reach the store), holding a tuple
    # or a model, or being claimed for a value a JSON copy refuses (NaN, a model inside a dict:
    # those must take call()'s exact path, which names the field).
    from session_manager._hosts.typed_support import payload
    from session_manager._wire.validation import ProvenPayload

    content = [{"type": "text", "text": "hi"}]
    message = {"role": "user", "content": content, "timestamp": 1}
    got = payload(session_id="s", message=message, parent_id=None, origin={"n": (1, 2.5)})
    assert type(got) is ProvenPayload
    assert got == {"session_id": "s", "message": message, "origin": {"n": [1, 2.5]}}
    assert got["message"] is not message and got["message"]["content"] is not content
    assert got["message"]["content"][0] is not content[0]
    blocks = payload(content=as_content(["a", text("b")]), usage=Usage(input=1))
    assert type(blocks) is ProvenPayload
    assert blocks == {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "usage": {"input": 1}}
    usage = Usage(input=1)
    for fallback in ({"x": float("nan")}, {"usage": usage}, [usage, (usage,)]):
        plain = payload(session_id="s", details=fallback)
        assert type(plain) is dict  # call() copies and checks it as any caller's payload
    assert payload(details={"usage": usage})["details"] == {"usage": {"input": 1}}


def test_a_typed_append_stores_what_its_dict_call_stores_and_nothing_the_caller_keeps(tmp_path: Path) -> None:
    # Prevents: the typed path's single copy keeping the caller's containers (or a tuple) in the
    # stored entry, or storing bytes other than the dict call's.
    with open_store(tmp_path / "d") as sm:
        sid = sm.create().session_id
        message: dict[str, Any] = {"role": "user", "content": ({"type": "text", "text": "hi"},), "timestamp": 1}
        origin = {"worker": "w", "tags": ("a",)}
        typed = sm.append(sid, message=message, origin=origin)
        raw = sm.call("session::append", {"session_id": sid, "message": message, "origin": origin})
        message["content"] = [{"type": "text", "text": "changed"}]
        origin["worker"] = "changed"
        stored = sm.call("session::messages", {"session_id": sid})["messages"]
        assert [m["entry_id"] for m in stored] == [typed.entry_id, raw["entry_id"]]
        for m in stored:
            assert m["message"]["content"] == [{"type": "text", "text": "hi"}]
            assert m["origin"] == {"worker": "w", "tags": ["a"]}
