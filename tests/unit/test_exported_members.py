"""Each public package's names leave it through its ``__all__``, pinned here
(the model: httpx's ``tests/test_exported_members.py``): a name added to or
dropped from the public API is a deliberate change to this file."""

from __future__ import annotations

import importlib
import inspect
import types

import pytest

import session_manager
from session_manager import errors

PINNED: dict[str, list[str]] = {
    "session_manager": [
        "EVENT_FUNCTIONS", "ON_CREATED", "ON_DELETED", "ON_MESSAGE_ADDED", "ON_MESSAGE_UPDATED", "ON_META_UPDATED",
        "ON_STATUS_CHANGED", "BridgeStore", "Clock", "Commit", "EntryPath", "Event", "FsStore", "IdGen", "ManualClock",
        "MemoryStore", "Observation", "SequentialIds", "SessionError", "SessionManager", "SessionService",
        "SessionStore", "SystemClock", "UuidIds", "__version__", "open",
    ],
    "session_manager.store": [
        "DEFAULT_CACHE_BYTES", "BridgeStore", "Commit", "EntryPath", "FsStore", "MemoryStore", "SessionStore",
    ],
    "session_manager.types": [
        "AgentMessage", "Alternative", "AppendManyRequest", "AppendManyResponse", "AppendRequest", "AppendResponse",
        "AssistantMessage", "AttachmentMeta", "ContentBlock", "CreateRequest", "CreateResponse", "Cursor",
        "CustomEntry", "CustomMessage", "CustomPayload", "DeleteAttachmentRequest", "DeleteAttachmentResponse",
        "DeleteRequest", "DeleteResponse", "DeleteTreeRequest", "DeleteTreeResponse", "EnsureRequest",
        "EnsureResponse", "ErrorKind", "FileBlock", "ForkRequest", "ForkResponse", "FunctionCallBlock",
        "FunctionResultBlock", "FunctionResultMessage", "GetAttachmentRequest", "GetAttachmentResponse",
        "GetMessageRequest", "GetMessageResponse", "GetRequest", "GetResponse", "Id", "ImageBlock", "Int64",
        "JsonObject", "Limit", "ListAttachmentsRequest", "ListAttachmentsResponse", "ListOrder", "ListRequest",
        "ListResponse", "MessageEntry", "MessageItem", "MessagesRangeRequest", "MessagesRangeResponse",
        "MessagesRequest", "MessagesResponse", "MessagesTailRequest", "MessagesTailResponse", "PurgeLimit",
        "PurgeRequest", "PurgeResponse", "PutAttachmentRequest", "PutAttachmentResponse", "Role", "SearchHit",
        "SearchQueryText", "SearchRequest", "SearchResponse", "SessionEntry", "SessionMeta", "SessionStatus",
        "SetActiveLeafRequest", "SetActiveLeafResponse", "SetDraftRequest", "SetDraftResponse", "SetMetaRequest",
        "SetMetaResponse", "SetStatusRequest", "SetStatusResponse", "StopReason", "TailItem", "TenantFilter",
        "TextBlock", "ThinkingBlock", "TranscriptItem", "UInt64", "UpdateMessageRequest", "UpdateMessageResponse",
        "Usage", "UserMessage", "Wire",
    ],
    "session_manager.messages": [
        "AssistantMessage", "Content", "ContentBlock", "CustomMessage", "CustomPayload", "ErrorKind",
        "FunctionCallBlock", "FunctionResultMessage", "StopReason", "TextBlock", "Usage", "UserMessage",
        "assistant_message", "blocks", "custom", "custom_message", "function_call", "function_result_message",
        "now_ms", "text", "user_message",
    ],
    "session_manager.aio": [
        "DEFAULT_MAX_QUEUED", "DEFAULT_WORKERS", "AsyncSessionManager", "EventStream", "EventStreamOverflow",
        "Opening", "open",
    ],
    "session_manager.testing": [
        "FakeConnection", "FakeEngine", "FakeHandle", "FakeObserver", "ManualClock", "Registration",
        "SequentialIds", "StoreContract", "serve",
    ],
    "session_manager.adapters": [],
    "session_manager.errors": [
        "ATTACHMENT_IN_USE", "ATTACHMENT_TOO_LARGE", "CODES", "DETAILS_NOT_SUPPORTED", "EMPTY_BATCH",
        "ENTRY_NOT_FOUND", "INVALID_CURSOR", "INVALID_ENTRY_KIND", "INVALID_REQUEST", "NOT_FOUND",
        "PARENT_NOT_FOUND", "STORAGE", "BindRefused", "BridgeUnavailable", "BuildError", "ConfigError",
        "ConfigurationRefused", "ConfigurationUnavailable", "Conflict", "DataDirError", "DataDirLocked",
        "DataDirLost", "EventStreamOverflow", "LimitWarning", "NotFound", "NotRegular", "ProviderError",
        "ReadOnlyStore", "RemoteError", "SeedError", "SessionError", "StoreError", "Unavailable",
        "UnstorableValue", "UsageError", "Vanished", "entry_not_found", "invalid_request", "not_found",
    ],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(PINNED))
def test_all_is_pinned_and_every_name_resolves(name: str) -> None:
    # Prevents: a public name added or dropped by accident, or an __all__ naming what is not there.
    module = importlib.import_module(name)
    assert sorted(module.__all__) == sorted(PINNED[name])
    assert len(set(module.__all__)) == len(module.__all__)
    for member in module.__all__:
        assert getattr(module, member) is not None, f"{name}.{member}"


@pytest.mark.parametrize("name", sorted(PINNED))
def test_public_classes_and_functions_of_the_package_are_in_all(name: str) -> None:
    # Prevents: a public class or function defined in the package that leaves it without __all__.
    module = importlib.import_module(name)
    stray = [
        member for member, value in vars(module).items()
        if not member.startswith("_") and member not in module.__all__
        and not isinstance(value, types.ModuleType)
        and (inspect.isclass(value) or inspect.isfunction(value))
        and getattr(value, "__module__", "").startswith(name + ".")
    ]
    assert stray == []


def test_every_exception_class_lives_in_errors() -> None:
    # Prevents: a fifteenth module defining its own public exception class again (issue 22).
    import pkgutil

    private_control_flow = {"_Unusual", "_NotJson", "Unrepresentable", "TooDeep", "Fallback", "_Conflicted",
                            "_NotServed", "LeafMoved", "_NotPlain", "_PastBounds"}
    found = []
    for info in pkgutil.walk_packages(session_manager.__path__, "session_manager."):
        if info.name == "session_manager.__main__":
            continue  # it runs the console script
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            continue  # an optional extra whose framework or driver is absent here
        for member, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == info.name
                    and info.name != "session_manager.errors" and member not in private_control_flow):
                found.append(f"{info.name}.{member}")
    assert found == []


def test_the_old_homes_of_moved_errors_name_the_same_classes() -> None:
    # Prevents: an old import path breaking, or holding a second class callers' except clauses miss.
    from session_manager import aio
    from session_manager._cli.data import opening, usage
    from session_manager._worker import bridge_link, config_client, config_value, seed
    from session_manager.mentions import provider
    from session_manager.store import fs
    from session_manager.store.fs import _fileops, _lock
    from session_manager.viewer import guard

    assert aio.EventStreamOverflow is errors.EventStreamOverflow
    assert provider.ProviderError is errors.ProviderError
    assert guard.BindRefused is errors.BindRefused
    assert config_client.ConfigurationRefused is errors.ConfigurationRefused
    assert config_client.ConfigurationUnavailable is errors.ConfigurationUnavailable
    assert config_client.BuildError is errors.BuildError
    assert config_value.ConfigError is errors.ConfigError
    assert seed.SeedError is errors.SeedError
    assert bridge_link.BridgeUnavailable is errors.BridgeUnavailable
    assert fs.ReadOnlyStore is errors.ReadOnlyStore
    assert _lock.DataDirLocked is errors.DataDirLocked
    assert _lock.DataDirLost is errors.DataDirLost
    assert _fileops.NotRegular is errors.NotRegular
    assert usage.UsageError is errors.UsageError
    assert opening.DataDirError is errors.DataDirError
