"""Wire data types: content blocks, messages, entries, session metadata.

Field names, optionality and enum values follow the golden schemas the
reference worker registers, so existing clients' payloads validate and our
output reads back in theirs. Models are strict (no silent coercion of
``"5"`` to ``5``) and ignore unknown keys, as the reference's serde types do.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Protocol, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer
from pydantic_core import PydanticSerializationError

from ..errors import UnstorableValue

JsonObject = dict[str, Any]

Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1, description="Milliseconds since epoch.")]
UInt64 = Annotated[int, Field(ge=0, le=2**64 - 1)]

Role = Literal["user", "assistant", "function_result", "custom"]
SessionStatus = Literal["idle", "working", "done", "error"]
StopReason = Literal["end", "length", "function_call", "aborted", "error"]
ErrorKind = Literal["auth_expired", "rate_limited", "context_overflow", "transient", "permanent"]
ListOrder = Literal["created_asc", "created_desc", "updated_desc"]

ROLES: tuple[str, ...] = get_args(Role)
STATUSES: tuple[str, ...] = get_args(SessionStatus)


class Wire(BaseModel):
    """Base of every wire model: strict types, unknown keys ignored.

    Serialized, an optional field that is ``None`` is left out (as the
    reference's ``skip_serializing_if``), except the fields a model names in
    ``_keep_null``, which the reference always writes (``null`` included).
    """

    # defer_build: validators are built on a model's first use, not at import,
    # so `import session_manager` stays cheap (most programs touch a few models).
    model_config = ConfigDict(strict=True, extra="ignore", defer_build=True)
    _keep_null: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            keep = self._keep_null
            return {k: v for k, v in data.items() if v is not None or k in keep}
        return data


# --------------------------------------------------------------------------
# Content blocks
# --------------------------------------------------------------------------


class TextBlock(Wire):
    type: Literal["text"]
    text: str


class ImageBlock(Wire):
    type: Literal["image"]
    mime: str = Field(description="MIME type, e.g. `image/png`.")
    data: str = Field(
        description="Base64 image bytes; empty when read with include_image_data: false "
        "and the block carries an attachment_id."
    )
    attachment_id: str | None = Field(
        default=None, description="The stored original this inline copy was made from."
    )


class FileBlock(Wire):
    type: Literal["file"]
    attachment_id: str
    name: str
    mime: str
    size: UInt64


class ThinkingBlock(Wire):
    type: Literal["thinking"]
    text: str
    signature: str | None = None


class RedactedThinkingBlock(Wire):
    """Reasoning the provider returned encrypted (Anthropic's ``redacted_thinking``):
    opaque ``data`` that must go back to the provider unchanged. The golden
    schemas predate it; real clients (the harness) write it."""

    type: Literal["redacted_thinking"]
    data: str = Field(description="Opaque provider payload, stored and returned byte for byte.")


class FunctionCallBlock(Wire):
    _keep_null = frozenset({"arguments"})
    type: Literal["function_call"]
    id: str = Field(description="Unique per call, echoed by the result.")
    function_id: str
    arguments: Any = Field(default=None, description="Model-produced arguments (JSON).")


class FunctionResultBlock(Wire):
    type: Literal["function_result"]
    function_call_id: str
    content: list[ContentBlock]
    is_error: bool | None = None


ContentBlock = Annotated[
    Union[TextBlock, ImageBlock, FileBlock, ThinkingBlock, RedactedThinkingBlock, FunctionCallBlock,
          FunctionResultBlock],
    Field(discriminator="type"),
]
# FunctionResultBlock refers to ContentBlock before it exists: resolved at its deferred first build.


# --------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------


class Usage(Wire):
    """Token / cost accounting reported by providers."""

    input: UInt64 | None = None
    output: UInt64 | None = None
    cache_read: UInt64 | None = None
    cache_write: UInt64 | None = None
    reasoning: UInt64 | None = None
    cost_usd: float | None = Field(default=None, strict=False)


class _HasContent(Protocol):
    @property
    def content(self) -> list[ContentBlock]: ...


class HasText:
    """``.text`` for the message models (a property: no field, no change to the wire form)."""

    @property
    def text(self: _HasContent) -> str:
        """The message's ``text`` blocks joined by newlines (``""`` when it has
        none); thinking, calls, results, images and files are left out."""
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))


class UserMessage(Wire, HasText):
    role: Literal["user"]
    content: list[ContentBlock]
    timestamp: Int64


class AssistantMessage(Wire, HasText):
    role: Literal["assistant"]
    content: list[ContentBlock]
    stop_reason: StopReason
    native_stop_reason: str | None = None
    error_message: str | None = None
    error_kind: ErrorKind | None = None
    warnings: list[str] | None = None
    usage: Usage | None = None
    agent: str | None = Field(default=None, description="The agent worker that produced this turn.")
    model: str
    provider: str
    timestamp: Int64


class FunctionResultMessage(Wire, HasText):
    _keep_null = frozenset({"details"})
    role: Literal["function_result"]
    function_call_id: str
    function_id: str
    content: list[ContentBlock]
    details: Any = None
    is_error: bool = False
    timestamp: Int64


class CustomMessage(Wire, HasText):
    role: Literal["custom"]
    custom_type: str
    content: list[ContentBlock]
    display: str | None = None
    details: Any = None
    timestamp: Int64


AgentMessage = Annotated[
    Union[UserMessage, AssistantMessage, FunctionResultMessage, CustomMessage],
    Field(discriminator="role"),
]
MESSAGE_MODELS: dict[str, type[Wire]] = {
    "user": UserMessage,
    "assistant": AssistantMessage,
    "function_result": FunctionResultMessage,
    "custom": CustomMessage,
}


class CustomPayload(Wire):
    """Bookkeeping payload of a ``kind: "custom"`` entry."""

    _keep_null = frozenset({"data"})
    custom_type: str
    data: Any = None


# --------------------------------------------------------------------------
# Entries and sessions (response-side shapes; stored as plain JSON dicts)
# --------------------------------------------------------------------------


class _EntryHeader(Wire):
    """What every entry carries; ``kind`` is narrowed by each variant (its
    position, first, is kept: the stored key order depends on it)."""

    _keep_null = frozenset({"parent_id"})  # null marks a root; stored entries always carry it
    kind: str
    id: str
    parent_id: str | None = None
    timestamp: Int64
    revision: UInt64 = 0
    origin: JsonObject | None = None


class MessageEntry(_EntryHeader):
    kind: Literal["message"]
    message: AgentMessage


class CustomEntry(_EntryHeader):
    _keep_null = frozenset({"parent_id", "data"})
    kind: Literal["custom"]
    custom_type: str
    data: Any = None


SessionEntry = Annotated[Union[MessageEntry, CustomEntry], Field(discriminator="kind")]
ENTRY_MODELS: dict[str, type[Wire]] = {"message": MessageEntry, "custom": CustomEntry}


class AttachmentMeta(Wire):
    attachment_id: str
    session_id: str
    name: str
    mime: str
    size: UInt64
    sha256: str
    created_at: Int64


class SessionMeta(Wire):
    """A session's metadata record."""

    session_id: str
    title: str
    description: str
    status: SessionStatus
    status_reason: str | None = None
    metadata: JsonObject | None = Field(
        default=None, description="App-defined; the tenancy hook observers and list filter on."
    )
    forked_from: str | None = None
    draft: str | None = None
    draft_attachments: list[AttachmentMeta] | None = None
    created_at: Int64
    updated_at: Int64
    message_count: UInt64


def dump(model: BaseModel) -> JsonObject:
    """The JSON-compatible form we store and return (see :class:`Wire` on nulls)."""
    try:
        out: JsonObject = model.model_dump(mode="json")
    except (PydanticSerializationError, RecursionError):
        raise UnstorableValue("a value is nested too deeply to be stored") from None
    return out
