"""The postgres adapter's defaults: one definition for the configuration model
and the adapter (importable without the postgres extra: the package imports nothing on its own)."""

POOL_SIZE = 10
CONNECT_TIMEOUT_MS = 5000
STATEMENT_TIMEOUT_MS = 30000
POOL_TIMEOUT_MS = 5000
SCHEMA = "public"
OUTBOX_RETENTION_MS = 600_000
TIMEOUT_MS = 30_000
