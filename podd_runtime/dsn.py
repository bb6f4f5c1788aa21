"""A PostgreSQL DSN as it may be shown: in logs, messages and reports, never its password."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict


def safe_dsn(dsn: str) -> str:
    """The DSN with any password removed, for logs and messages."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    parts.pop("password", None)
    shown = " ".join(f"{k}={v}" for k, v in sorted(parts.items()) if v is not None)
    return shown or "<default connection>"
