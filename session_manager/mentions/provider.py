"""The provider descriptor: how a worker declares a mention provider.

It rides in the registration metadata of the provider's *get* function under
:data:`METADATA_KEY`; consumers (the console, the judge's mention hook) find
providers by listing functions, internal ones included, and reading that key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ProviderError as ProviderError  # (re-exported: the old import path keeps working)
from .token import RESERVED_NAMES, is_valid_name

METADATA_KEY = "mention"
CONTRACT_VERSION = 1


@dataclass(frozen=True)
class MentionDetails:
    """The agent-facing function returning an item's full details, called
    with ``{<id_field>: "<id>"}``."""

    function_id: str
    id_field: str = "id"

    def payload(self, mention_id: str) -> dict[str, Any]:
        return {self.id_field: mention_id}


@dataclass(frozen=True)
class MentionProvider:
    """A mention provider: the token ``name``, a plural ``label`` for menu
    headers, the ``search`` function id, and optional description, default
    icon and color, and details function."""

    name: str
    label: str
    search: str
    description: str | None = None
    icon: str | None = None
    color: str | None = None
    details: MentionDetails | None = None
    v: int = field(default=CONTRACT_VERSION)

    def validate(self) -> None:
        """Raise :class:`ProviderError` when a field every consumer relies on is wrong."""
        if self.name in RESERVED_NAMES:
            raise ProviderError(f"mention name {self.name!r} is reserved ({', '.join(sorted(RESERVED_NAMES))})")
        if not is_valid_name(self.name):
            raise ProviderError(
                f"mention name {self.name!r} must be lowercase letters, digits or '-', start with a letter, "
                "at most 40 characters"
            )
        for what, value in (("label", self.label), ("search", self.search)):
            if not value.strip():
                raise ProviderError(f"mention {what} must not be empty")
        if self.details is not None:
            if not self.details.function_id.strip():
                raise ProviderError("mention details.function_id must not be empty")
            if not self.details.id_field.strip():
                raise ProviderError("mention details.id_field must not be empty")

    def to_json(self) -> dict[str, Any]:
        """The descriptor object; absent optionals left out."""
        out: dict[str, Any] = {"v": self.v, "name": self.name, "label": self.label}
        for key in ("description", "icon", "color"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        out["search"] = self.search
        if self.details is not None:
            out["details"] = {"function_id": self.details.function_id, "id_field": self.details.id_field}
        return out

    def metadata(self) -> dict[str, Any]:
        """Registration metadata for the get function: the descriptor, plus
        ``internal`` (agents reach items through ``details``, not the mention
        functions) and ``trace_hidden`` (search runs on every keystroke)."""
        return {"internal": True, "trace_hidden": True, METADATA_KEY: self.to_json()}

    @classmethod
    def from_metadata(cls, metadata: Any) -> MentionProvider | None:
        """The descriptor in a function's metadata; ``None`` when absent or invalid."""
        raw = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
        if not isinstance(raw, dict):
            return None
        try:
            details_raw = raw.get("details")
            details = None
            if details_raw is not None:
                if not isinstance(details_raw, dict):
                    return None
                details = MentionDetails(
                    function_id=_text(details_raw["function_id"]),
                    id_field=_text(details_raw.get("id_field", "id")),
                )
            provider = cls(
                name=_text(raw["name"]),
                label=_text(raw["label"]),
                search=_text(raw["search"]),
                description=_optional_text(raw.get("description")),
                icon=_optional_text(raw.get("icon")),
                color=_optional_text(raw.get("color")),
                details=details,
                v=_version(raw.get("v", CONTRACT_VERSION)),
            )
            provider.validate()
        except (KeyError, TypeError, ProviderError):
            return None
        return provider


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _version(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError("expected a non-negative integer")
    return value
