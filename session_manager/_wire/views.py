"""What the typed helpers return beside the wire models: a transcript item
whose message is never absent, and one version of a turn."""

from __future__ import annotations

from dataclasses import dataclass

from .api import MessageItem
from .models import AgentMessage, CustomEntry, MessageEntry, Wire


class TranscriptItem(MessageItem):
    """A :class:`MessageItem` of a transcript read without custom entries:
    ``message`` is always there, so ``item.message.text`` type-checks as is."""

    message: AgentMessage


class TranscriptPage(Wire):
    """A ``session::messages`` answer read without custom entries."""

    messages: list[TranscriptItem]
    next_cursor: str | None = None


@dataclass(frozen=True)
class Alternative:
    """One version of a turn, as ``sm.alternatives`` lists them."""

    entry: MessageEntry | CustomEntry
    active: bool  # on the session's active path (at most one of a turn's versions is)

    @property
    def entry_id(self) -> str:
        return self.entry.id

    @property
    def message(self) -> AgentMessage | None:
        """The message (``None`` for a custom entry)."""
        return self.entry.message if isinstance(self.entry, MessageEntry) else None

    @property
    def text(self) -> str:
        """The message's text blocks joined by newlines (``""`` for a custom entry)."""
        message = self.message
        return message.text if message is not None else ""
