"""Keeping the DSN's password out of logs, errors and status.

The password may sit in the DSN (expanded from a ``${VAR}`` placeholder by
the configuration worker) or come from libpq's own sources (``PGPASSWORD``,
a passfile), which never reach us. Whatever text we show (a log line, an
error a caller receives, a rejected reload's reason) passes :func:`redact`.
"""

from __future__ import annotations

from psycopg import conninfo

MASK = "********"


def password_of(dsn: str) -> str | None:
    """The password the DSN carries, if any (``None`` when it does not parse)."""
    try:
        return conninfo.conninfo_to_dict(dsn).get("password") or None  # type: ignore[return-value]
    except Exception:
        return None


def safe_dsn(dsn: str) -> str:
    """The DSN as it may be shown: password masked (unparseable ones wholly)."""
    try:
        parts = conninfo.conninfo_to_dict(dsn)
    except Exception:
        return MASK
    if parts.get("password"):
        parts["password"] = MASK
    return conninfo.make_conninfo("", **parts)


def redact(text: str, dsn: str) -> str:
    """``text`` with the DSN and its password masked wherever they appear
    (a DSN that does not parse may be quoted in pieces: the text is withheld)."""
    if dsn:
        try:
            conninfo.conninfo_to_dict(dsn)
        except Exception:
            return "the configured dsn does not parse (details withheld: they may quote its password)"
    out = text.replace(dsn, safe_dsn(dsn)) if dsn else text
    secret = password_of(dsn)
    if secret:
        out = out.replace(secret, MASK)
    return out
