"""Chat mentions: the ``@<name>(id="<id>")`` token, the provider wire
contract, and this worker's ``@session`` provider."""

from ..errors import ProviderError
from .provider import CONTRACT_VERSION, METADATA_KEY, MentionDetails, MentionProvider
from .token import (
    MAX_ID_LEN,
    MAX_NAME_LEN,
    RESERVED_NAMES,
    MentionRef,
    format_mention,
    is_valid_name,
    parse_mentions,
    parse_prose_mentions,
)
from .wire import (
    DEFAULT_SEARCH_LIMIT,
    MAX_SEARCH_LIMIT,
    MentionField,
    MentionGetRequest,
    MentionItem,
    MentionOpen,
    MentionSearchContext,
    MentionSearchRequest,
    MentionSearchResponse,
    MentionView,
    OpenPage,
    OpenSession,
    OpenUrl,
)

__all__ = [
    "CONTRACT_VERSION",
    "DEFAULT_SEARCH_LIMIT",
    "MAX_ID_LEN",
    "MAX_NAME_LEN",
    "MAX_SEARCH_LIMIT",
    "METADATA_KEY",
    "RESERVED_NAMES",
    "MentionDetails",
    "MentionField",
    "MentionGetRequest",
    "MentionItem",
    "MentionOpen",
    "MentionProvider",
    "MentionRef",
    "MentionSearchContext",
    "MentionSearchRequest",
    "MentionSearchResponse",
    "MentionView",
    "OpenPage",
    "OpenSession",
    "OpenUrl",
    "ProviderError",
    "format_mention",
    "is_valid_name",
    "parse_mentions",
    "parse_prose_mentions",
]
