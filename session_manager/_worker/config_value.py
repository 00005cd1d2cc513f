"""The worker configuration (configuration id ``session-manager``).

Shape (same as the reference worker, so a stored value moves between them)::

    adapter:                 # adjacently tagged: a name plus that adapter's config
      name: fs               # fs | bridge
      config: {data_dir: data/session-manager}
    default_list_limit: 50
    max_list_limit: 500
    max_attachment_bytes: 52428800

Unknown keys are rejected at every level so a typo fails loudly instead of
silently running on defaults. The JSON Schema registered with the
configuration worker is written by hand (:func:`config_schema`) so the
adapter renders as a ``oneOf`` variant picker in the console.
"""

from __future__ import annotations

import copy
import logging
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._service.limits import DEFAULT_LIST_LIMIT, MAX_ATTACHMENT_BYTES, MAX_LIST_LIMIT, Limits

log = logging.getLogger("session_manager.config")

CONFIG_ID = "session-manager"
DEFAULT_DATA_DIR = "data/session-manager"
DEFAULT_BRIDGE_TIMEOUT_MS = 5000
U64_MAX = 2**64 - 1

_Strict = ConfigDict(extra="forbid", strict=True)


class FsConfig(BaseModel):
    model_config = _Strict
    data_dir: str = DEFAULT_DATA_DIR


class BridgeConfig(BaseModel):
    model_config = _Strict
    url: str
    timeout_ms: Annotated[int, Field(ge=0, le=U64_MAX)] = DEFAULT_BRIDGE_TIMEOUT_MS


class FsAdapter(BaseModel):
    model_config = _Strict
    name: Literal["fs"]
    config: FsConfig = Field(default_factory=FsConfig)


class BridgeAdapter(BaseModel):
    model_config = _Strict
    name: Literal["bridge"]
    config: BridgeConfig


Adapter = Annotated[Union[FsAdapter, BridgeAdapter], Field(discriminator="name")]
Count = Annotated[int, Field(ge=0, le=U64_MAX)]


class WorkerConfig(BaseModel):
    """The parsed configuration value; every field has a default."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    adapter: Adapter = Field(default_factory=lambda: FsAdapter(name="fs"))
    default_list_limit: Count = DEFAULT_LIST_LIMIT
    max_list_limit: Count = MAX_LIST_LIMIT
    max_attachment_bytes: Count = MAX_ATTACHMENT_BYTES

    def limits(self) -> Limits:
        return Limits(
            default_list_limit=self.default_list_limit,
            max_list_limit=self.max_list_limit,
            max_attachment_bytes=self.max_attachment_bytes,
        )

    def to_value(self) -> dict[str, Any]:
        """The JSON value, as stored by the configuration worker."""
        return self.model_dump(mode="json")

    def adapter_value(self) -> dict[str, Any]:
        """The boot signature: two configs with equal adapters differ only in tuning."""
        return self.adapter.model_dump(mode="json")


class ConfigError(ValueError):
    """A configuration value that does not parse."""


def parse_config(value: Any) -> WorkerConfig:
    """Parse a stored value; ``None`` means the built-in defaults."""
    if value is None:
        return WorkerConfig()
    if not isinstance(value, dict):
        raise ConfigError(f"configuration `{CONFIG_ID}` must be an object, got {type(value).__name__}")
    try:
        return WorkerConfig.model_validate(value)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}"
            for err in e.errors(include_url=False)[:3]
        )
        raise ConfigError(f"invalid configuration `{CONFIG_ID}`: {problems}") from None


def default_config_value() -> dict[str, Any]:
    return WorkerConfig().to_value()


def resolve_data_dir(data_dir: str) -> Path:
    """``~`` expands to home; a relative path is under ``III_COMPOSE_DIR`` when set."""
    path = Path(os.path.expanduser(data_dir))
    base = os.environ.get("III_COMPOSE_DIR")
    if not path.is_absolute() and base:
        path = Path(base) / path
    return path


# --------------------------------------------------------------------------
# The registered JSON Schema
# --------------------------------------------------------------------------


def config_schema() -> dict[str, Any]:
    """The JSON Schema registered with ``configuration::register``.

    ``definitions.StorageAdapter.oneOf`` holds one object per adapter whose
    ``name`` is a one-value enum: the console renders a variant picker and
    only the chosen adapter's fields.
    """
    default = default_config_value()

    def count(description: str, default_value: int, fmt: str = "uint") -> dict[str, Any]:
        return {"description": description, "default": default_value, "type": "integer",
                "format": fmt, "minimum": 0}

    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "WorkerConfig",
        "description": "session-manager runtime settings; every field hot-reloads.",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "adapter": {
                "description": "Storage adapter: fs (local JSONL files) or bridge (a main instance).",
                "default": default["adapter"],
                "allOf": [{"$ref": "#/definitions/StorageAdapter"}],
            },
            "default_list_limit": count(
                "Page size when session::list / session::messages omit `limit`.", DEFAULT_LIST_LIMIT),
            "max_list_limit": count("Hard cap on any requested `limit`.", MAX_LIST_LIMIT),
            "max_attachment_bytes": count(
                "Largest decoded upload session::put-attachment accepts.", MAX_ATTACHMENT_BYTES, "uint64"),
        },
        "definitions": {
            "StorageAdapter": {
                "description": "Where sessions are stored (adjacently tagged: name + config).",
                "oneOf": [
                    {
                        "description": "One append-only JSONL file per session under data_dir.",
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string", "enum": ["fs"]},
                            "config": {"$ref": "#/definitions/FsBackendConfig"},
                        },
                    },
                    {
                        "description": "Store through a main fs-mode session-manager on another engine.",
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["config", "name"],
                        "properties": {
                            "name": {"type": "string", "enum": ["bridge"]},
                            "config": {"$ref": "#/definitions/BridgeBackendConfig"},
                        },
                    },
                ],
            },
            "FsBackendConfig": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "data_dir": {
                        "description": "Directory of the session files; relative to III_COMPOSE_DIR.",
                        "type": "string",
                        "default": DEFAULT_DATA_DIR,
                    },
                },
            },
            "BridgeBackendConfig": {
                "type": "object",
                "additionalProperties": False,
                "required": ["url"],
                "properties": {
                    "url": {"description": "The main instance's engine WebSocket URL.", "type": "string"},
                    "timeout_ms": {
                        "description": "Per store/publish call timeout.",
                        "type": "integer",
                        "format": "uint64",
                        "minimum": 0,
                        "default": DEFAULT_BRIDGE_TIMEOUT_MS,
                    },
                },
            },
        },
        "example": default,
    }


# --------------------------------------------------------------------------
# The --config seed file
# --------------------------------------------------------------------------

# ${NAME} is ours to expand; ${NAME:default} is left for the configuration
# worker, which expands it on every read.
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(text: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            log.warning("config seed: ${%s} is not set; using an empty string", name)
            return ""
        return os.environ[name]

    return _PLACEHOLDER.sub(value, text)


def _expand(value: Any) -> Any:
    if isinstance(value, str):
        return expand_env(value)
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    return value


def load_seed(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``--config`` YAML seed, env-expanded, or ``None`` (with a warning)
    when it cannot be read or is not a valid configuration."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        log.warning("config seed %s ignored: %s", path, e)
        return None
    value = _expand(copy.deepcopy(raw if raw is not None else {}))
    if not isinstance(value, dict):
        log.warning("config seed %s ignored: not a mapping", path)
        return None
    # A value still holding ${VAR:default} placeholders is only checked once
    # the configuration worker has expanded it (at fetch).
    if "${" not in repr(value):
        try:
            parse_config(value)
        except ConfigError as e:
            log.warning("config seed %s ignored: %s", path, e)
            return None
    return value
