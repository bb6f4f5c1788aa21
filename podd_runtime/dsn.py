"""A PostgreSQL DSN as it may be shown: in logs, messages and reports, never its password."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo


def with_session_bounds(
    dsn: str,
    *,
    connect_timeout: int,
    statement_timeout_ms: int,
    lock_timeout_ms: int,
    keepalives_idle: int,
    client_check_ms: int | None = None,
) -> str:
    """The DSN with connect timeout, TCP keepalives (both ends: the server probes a silent
    client too, so a dead host's sessions and locks end in about a minute, not the kernel's
    two hours) and statement/lock timeouts added, so every connection made from it (driver
    and executors alike) is bounded in time, and named after this process (unless the DSN
    names it) so its sessions can be told apart in `pg_stat_activity`. Options the DSN
    already sets are kept; the bounds come after them.

    `client_check_ms` (PostgreSQL 14 or later only: an older server refuses the whole
    connection over an unknown setting) has the server check, while a query runs, that its
    client is still there: a statement of a killed client ends then, not when it finishes."""
    parts = conninfo_to_dict(dsn)
    interval = max(1, keepalives_idle // 3)
    options = " ".join(
        o
        for o in (
            str(parts.get("options") or ""),
            f"-c statement_timeout={statement_timeout_ms}",
            f"-c lock_timeout={lock_timeout_ms}",
            f"-c tcp_keepalives_idle={keepalives_idle}",
            f"-c tcp_keepalives_interval={interval}",
            "-c tcp_keepalives_count=3",
            f"-c client_connection_check_interval={client_check_ms}" if client_check_ms else "",
        )
        if o
    )
    return make_conninfo(
        dsn,
        connect_timeout=str(connect_timeout),
        keepalives="1",
        keepalives_idle=str(keepalives_idle),
        keepalives_interval=str(interval),
        keepalives_count="3",
        options=options,
        fallback_application_name=process_name("podd"),
    )


#: `server_version_num` of the first release with `client_connection_check_interval`.
CLIENT_CHECK_SINCE = 140000


def server_version(dsn: str, *, connect_timeout: int) -> int | None:
    """The server's `server_version_num`, or None when it cannot be reached now."""
    try:
        with psycopg.connect(dsn, connect_timeout=connect_timeout, autocommit=True) as conn:
            return int(conn.info.server_version)
    except psycopg.Error:
        return None


def process_name(role: str) -> str:
    """`<role> on <host> pid <pid>`: who a database session (or a lock file) belongs to."""
    return f"{role} on {socket.gethostname()} pid {os.getpid()}"[:63]


def split_password(dsn: str) -> tuple[str, str | None]:
    """(the DSN without its password, the password or None)."""
    parts = conninfo_to_dict(dsn)
    password = parts.pop("password", None)
    if password is None:
        return dsn, None
    return make_conninfo(**{k: str(v) for k, v in parts.items() if v is not None}), str(password)


def with_passfile(dsn: str, path: Path) -> str:
    """`dsn` without its password, which goes into `path` (mode 0600, libpq's passfile
    format) for whoever connects with the returned DSN: no secret travels with it."""
    bare, password = split_password(dsn)
    if password is None:
        return dsn
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    escaped = password.replace("\\", "\\\\").replace(":", "\\:")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"*:*:*:*:{escaped}\n")
    path.chmod(0o600)
    return make_conninfo(bare, passfile=str(path.resolve()))


def safe_dsn(dsn: str) -> str:
    """The DSN with any password removed, for logs and messages."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    parts.pop("password", None)
    shown = " ".join(f"{k}={v}" for k, v in sorted(parts.items()) if v is not None)
    return shown or "<default connection>"
