"""Request and response shapes of a mention provider's search and get
functions, as every provider (in any language) writes them."""

from __future__ import annotations

import json
from typing import Annotated, Any, Union

from pydantic import Field

from .._wire.models import Wire

DEFAULT_SEARCH_LIMIT = 8
"""Rows a search returns when the caller names no limit."""
MAX_SEARCH_LIMIT = 50
"""Most rows a search returns, whatever the caller asks."""

COLORS: tuple[str, ...] = ("neutral", "blue", "purple", "teal", "green", "amber", "rose")
"""The palette for a provider's or an item's ``color``; surfaces map anything else to neutral."""
TONES: tuple[str, ...] = ("neutral", "info", "success", "warning", "danger")
"""The tones a preview-card field may carry."""


class MentionSearchContext(Wire):
    """The chat a search was asked from."""

    session_id: str | None = None
    working_dir: str | None = None


class MentionSearchRequest(Wire):
    """Input of a provider's search function."""

    query: str = Field(
        default="",
        description="What the user typed after `@<name>:`. Empty asks for the most relevant recent items.",
    )
    limit: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description=f"Maximum rows (default {DEFAULT_SEARCH_LIMIT}, at most {MAX_SEARCH_LIMIT})."
    )
    context: MentionSearchContext | None = Field(
        default=None, description="Where the search was asked from, for providers that rank by it."
    )

    def effective_limit(self) -> int:
        """``limit`` with the default applied, clamped to 1..MAX_SEARCH_LIMIT."""
        wanted = DEFAULT_SEARCH_LIMIT if self.limit is None else self.limit
        return max(1, min(wanted, MAX_SEARCH_LIMIT))

    def trimmed_query(self) -> str:
        return self.query.strip()

    def asking_session(self) -> str | None:
        return self.context.session_id if self.context is not None else None


class MentionItem(Wire):
    """One search row."""

    id: str = Field(description="The id written into the token; stable for the item's lifetime.")
    label: str = Field(description="The item's name.")
    hint: str | None = Field(default=None, description="A short human handle shown before the label.")
    description: str | None = Field(default=None, description="One line after the label.")
    icon: str | None = Field(default=None, description="Overrides the provider's icon for this row.")
    color: str | None = Field(default=None, description="Overrides the provider's color for this row.")


class MentionSearchResponse(Wire):
    """Output of a provider's search function, best match first."""

    items: list[MentionItem]


class MentionGetRequest(Wire):
    """Input of a provider's get function."""

    id: str = Field(description="The id from the token.")


class MentionField(Wire):
    """One labelled value of a preview card."""

    label: str
    value: str
    tone: str | None = Field(default=None, description="One of " + ", ".join(TONES) + ".")


class OpenPage(Wire):
    """Open an injected console page."""

    page: str = Field(description="Console page id (as registered with `host.pages`).")
    context: Any = None


class OpenSession(Wire):
    """Select a chat session."""

    session: str = Field(description="Session id to select.")


class OpenUrl(Wire):
    """Open an http(s) URL."""

    url: str


MentionOpen = Union[OpenPage, OpenSession, OpenUrl]
"""What clicking a mention opens."""


class MentionView(Wire):
    """What a chat surface renders for one mention, and what an agent reads.
    A get function answers null for an id it does not know."""

    id: str = Field(description="The canonical id (may differ from the one asked for).")
    label: str
    hint: str | None = None
    description: str | None = None
    icon: str | None = None
    color: str | None = None
    fields: list[MentionField] = Field(default_factory=list, description="Labelled values for the preview card.")
    open: MentionOpen | None = Field(default=None, description="What clicking the mention opens.")
    summary: str | None = Field(default=None, description="One line for an agent: what the item is and its state.")
    data: Any = Field(default=None, description="The domain object, for a worker's own preview renderer.")
    updated_at: str | None = Field(default=None, description="RFC 3339 time of the item's last change.")

    def to_json(self) -> dict[str, Any]:
        """The wire form: absent optionals and an empty field list left out."""
        out = self.model_dump(mode="json", exclude_none=True)
        if not out.get("fields"):
            out.pop("fields", None)
        return out

    def agent_summary(self) -> str:
        """``summary`` when written, else ``hint "label" — description · field: value …``."""
        if self.summary is not None and self.summary.strip():
            return self.summary.strip()
        line = json_text(self.label)
        if self.hint:
            line = f"{self.hint} {line}"
        if self.description:
            line += f" — {self.description}"
        for f in self.fields:
            line += f" · {f.label}: {f.value}"
        return line


def json_text(value: str) -> str:
    """``value`` as a JSON string literal, non-ASCII kept as is."""
    return json.dumps(value, ensure_ascii=False)
