"""The worker configuration (configuration id ``session-manager``).

Shape (same as the reference worker, so a stored value moves between them)::

    adapter:                 # adjacently tagged: a name plus that adapter's config
      name: fs               # fs | bridge | postgres
      config: {data_dir: data/session-manager}
    default_list_limit: 50
    max_list_limit: 500
    max_attachment_bytes: 52428800
    max_request_bytes: 67108864
    max_batch_entries: 10000
    durability: flush        # ours (flush | fsync); left out of the value while it is flush
    retention: {idle_days: 90, statuses: [done]}   # ours; absent (the default): no retention sweep

Unknown keys are rejected at every level so a typo fails loudly instead of
silently running on defaults. The models below are the one definition of
the value: the parser validates against them and the JSON Schema
registered with the configuration worker is generated from them
(:func:`config_schema`), in the draft-07 shapes the console renders (the
adapter as a ``oneOf`` variant picker, one-value ``enum`` names).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from .._hosts.retention import RetentionConfig, RetentionPolicy
from .._service.limits import (
    DEFAULT_LIST_LIMIT,
    MAX_ATTACHMENT_BYTES,
    MAX_BATCH_ENTRIES,
    MAX_LIST_LIMIT,
    MAX_REQUEST_BYTES,
    Limits,
)
from ..errors import ConfigError as ConfigError  # (re-exported: the old import path keeps working)
from ..store.fs import DEFAULT_CACHE_BYTES, Durability
from ..store.postgres import defaults as pg_defaults
from ..store.sqlite import settings as sqlite_settings

log = logging.getLogger("session_manager.config")

CONFIG_ID = "session-manager"
DEFAULT_DATA_DIR = "data/session-manager"
DEFAULT_BRIDGE_TIMEOUT_MS = 5000
DEFAULT_DURABILITY: Durability = "flush"
U64_MAX = 2**64 - 1

_Strict = ConfigDict(extra="forbid", strict=True, frozen=True)

# Unsigned counts, with the format the reference's schema gives its usize / u64 fields.
Count = Annotated[int, Field(ge=0, le=U64_MAX, json_schema_extra={"format": "uint"})]
Count64 = Annotated[int, Field(ge=0, le=U64_MAX, json_schema_extra={"format": "uint64"})]


class FsConfig(BaseModel):
    model_config = _Strict
    data_dir: str = Field(default=DEFAULT_DATA_DIR,
                          description="Directory of the session files; relative to III_COMPOSE_DIR.")


class BridgeConfig(BaseModel):
    model_config = _Strict
    url: str = Field(description="The main instance's engine WebSocket URL.")
    timeout_ms: Count64 = Field(default=DEFAULT_BRIDGE_TIMEOUT_MS, description="Per store/publish call timeout.")


class FsAdapter(BaseModel):
    """One append-only JSONL file per session under data_dir."""

    model_config = _Strict
    name: Literal["fs"]
    config: FsConfig = FsConfig()


class BridgeAdapter(BaseModel):
    """Store through a main fs-mode session-manager on another engine."""

    model_config = _Strict
    name: Literal["bridge"]
    config: BridgeConfig


class PostgresConfig(BaseModel):
    model_config = _Strict
    # The password belongs in PGPASSWORD, a passfile or a ${VAR} placeholder
    # the configuration worker expands; it is masked wherever the DSN is shown.
    dsn: str = Field(description="libpq connection string or postgresql:// URI; keep the password in "
                                 "PGPASSWORD, a passfile or a ${VAR} placeholder (masked when shown).")
    pool_size: Annotated[int, Field(ge=1, le=1000)] = Field(default=pg_defaults.POOL_SIZE,
                                                            description="Connections per instance.")
    connect_timeout_ms: Count64 = Field(default=pg_defaults.CONNECT_TIMEOUT_MS,
                                        description="Connecting to the server.")
    statement_timeout_ms: Annotated[int, Field(ge=0, le=2**31 - 1)] = Field(
        default=pg_defaults.STATEMENT_TIMEOUT_MS, description="Any one statement (0: none).")
    pool_timeout_ms: Count64 = Field(default=pg_defaults.POOL_TIMEOUT_MS,
                                     description="Waiting for a free connection before session/storage.")
    schema_: str = Field(default=pg_defaults.SCHEMA, alias="schema", min_length=1, max_length=63,
                         description="The database schema holding the tables.")
    # At least a second: a row pruned before a listener fetched it would be
    # an event lost without a resync. At most ~24 days: far larger values
    # overflow PostgreSQL's interval in the prune.
    outbox_retention_ms: Annotated[int, Field(ge=1000, le=2**31 - 1)] = Field(
        default=pg_defaults.OUTBOX_RETENTION_MS,
        description="How long event rows stay in the outbox; a listener away longer resyncs.")
    # At most ~24 days: it is also the server's idle_in_transaction_session_timeout (an int of ms).
    timeout_ms: Annotated[int, Field(ge=1, le=2**31 - 1001)] = Field(
        default=pg_defaults.TIMEOUT_MS,
        description="Every call answers within it (then session/storage), whatever the network does.")


class PostgresAdapter(BaseModel):
    """PostgreSQL: any number of instances over one database (Python worker only)."""

    model_config = _Strict
    name: Literal["postgres"]
    config: PostgresConfig


class SqliteConfig(BaseModel):
    model_config = _Strict
    path: str = Field(description="The SQLite database file (created if missing); relative to III_COMPOSE_DIR.")
    poll_ms: Annotated[int, Field(ge=1, le=60_000)] = Field(
        default=sqlite_settings.POLL_MS, description="How often each process checks for other processes' events.")
    busy_timeout_ms: Annotated[int, Field(ge=0, le=2**31 - 1)] = Field(
        default=sqlite_settings.BUSY_TIMEOUT_MS,
        description="How long a mutation waits for another process's write before session/storage.")
    # At least a second, as postgres's: shorter would count a live but busy follower dead.
    outbox_retention_ms: Annotated[int, Field(ge=1000, le=2**31 - 1)] = Field(
        default=int(sqlite_settings.OUTBOX_RETENTION_S * 1000),
        description="How long event rows stay in the outbox at most; a process away longer resyncs.")


class SqliteAdapter(BaseModel):
    """SQLite: any number of processes on one machine over one file (Python worker only)."""

    model_config = _Strict
    name: Literal["sqlite"]
    config: SqliteConfig


Adapter = Annotated[Union[FsAdapter, BridgeAdapter, PostgresAdapter, SqliteAdapter], Field(discriminator="name")]


# Keys this worker adds to the reference's configuration value (see to_value).
EXTENSION_KEYS = ("max_request_bytes", "max_batch_entries", "durability", "cache_bytes", "retention")
# Ends each of their descriptions: the console form is where an operator meets them.
NOT_IN_RUST = " Not known to the Rust worker: remove it before switching back."


class WorkerConfig(BaseModel):
    """session-manager runtime settings; every field hot-reloads."""

    model_config = _Strict
    adapter: Adapter = Field(default=FsAdapter(name="fs"),
                             description="Storage adapter: fs (local JSONL files), bridge (a main instance), "
                                         "sqlite (many processes on one machine) or postgres (many instances "
                                         "over one database).")
    default_list_limit: Count = Field(default=DEFAULT_LIST_LIMIT,
                                      description="Page size when session::list / session::messages omit `limit`.")
    max_list_limit: Count = Field(default=MAX_LIST_LIMIT, description="Hard cap on any requested `limit`.")
    max_attachment_bytes: Count64 = Field(default=MAX_ATTACHMENT_BYTES,
                                          description="Largest decoded upload session::put-attachment accepts.")
    max_request_bytes: Count64 = Field(
        default=MAX_REQUEST_BYTES,
        description="Largest request (UTF-8 bytes of its JSON) a mutating function accepts." + NOT_IN_RUST)
    max_batch_entries: Count = Field(default=MAX_BATCH_ENTRIES,
                                     description="Most entries one batch (append-many messages, ...) may carry."
                                                 + NOT_IN_RUST)
    # Top-level (not fs-adapter config) so changing it hot-reloads without a
    # store rebuild; a bridge instance stores through its main, whose own
    # setting applies.
    durability: Durability = Field(
        default=DEFAULT_DURABILITY,
        description="fs and sqlite writes: flush (survives a crash of the worker) or fsync (also survives power "
                    "loss; slower)." + NOT_IN_RUST)
    cache_bytes: Count64 = Field(default=DEFAULT_CACHE_BYTES,
                                 description="Memory budget for loaded sessions of the fs adapter; least "
                                             "recently used ones are dropped past it and read again when touched."
                                             + NOT_IN_RUST)
    retention: RetentionConfig | None = Field(
        default=None,
        description="Delete sessions not updated for idle_days (only in statuses when given) in a background "
                    "sweep, at most once a minute, each firing session::on-deleted; absent: off."
                    + NOT_IN_RUST)

    def retention_policy(self) -> RetentionPolicy | None:
        return self.retention.policy() if self.retention is not None else None

    def limits(self) -> Limits:
        return Limits(
            default_list_limit=self.default_list_limit,
            max_list_limit=self.max_list_limit,
            max_attachment_bytes=self.max_attachment_bytes,
            max_request_bytes=self.max_request_bytes,
            max_batch_entries=self.max_batch_entries,
        )

    def to_value(self) -> dict[str, Any]:
        """The JSON value, as stored by the configuration worker. Our own keys
        (:data:`EXTENSION_KEYS`, unknown to the reference) appear only when set
        away from their default: the reference worker refuses keys it does not
        know, so a default value stays readable there."""
        value = self.model_dump(mode="json", by_alias=True)
        for key in EXTENSION_KEYS:
            if value[key] == type(self).model_fields[key].default:
                del value[key]
        return value

    def adapter_value(self) -> dict[str, Any]:
        """The boot signature: two configs with equal adapters differ only in tuning."""
        return self.adapter.model_dump(mode="json", by_alias=True)

    def adapter_label(self) -> str:
        """The adapter as logs show it: a DSN's password masked."""
        value = self.adapter_value()
        if isinstance(self.adapter, PostgresAdapter):
            from ..store.postgres.secrets import safe_dsn  # only with the postgres extra

            value["config"]["dsn"] = safe_dsn(self.adapter.config.dsn)
        return str(value)


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


class _ConsoleSchema(GenerateJsonSchema):
    """pydantic's schema in the shapes the console renders: a literal as a
    one-value ``enum`` (its variant picker keys on it), a tagged union as a
    plain ``oneOf`` (no OpenAPI ``discriminator``), no per-field titles."""

    def literal_schema(self, schema: core_schema.LiteralSchema) -> JsonSchemaValue:
        out = super().literal_schema(schema)
        if "const" in out:
            out["enum"] = [out.pop("const")]
        return out

    def tagged_union_schema(self, schema: core_schema.TaggedUnionSchema) -> JsonSchemaValue:
        out = super().tagged_union_schema(schema)
        out.pop("discriminator", None)
        return out

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def config_schema() -> dict[str, Any]:
    """The JSON Schema (draft-07) registered with ``configuration::register``,
    generated from :class:`WorkerConfig`, with the default value as its example."""
    schema = WorkerConfig.model_json_schema(ref_template="#/definitions/{model}", schema_generator=_ConsoleSchema)
    definitions = schema.pop("$defs", {})
    return {"$schema": "http://json-schema.org/draft-07/schema#", **schema, "definitions": definitions,
            "example": default_config_value()}
