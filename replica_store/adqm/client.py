"""Opening the ClickHouse behind a replica URL, with one client library for both kinds:

* `chdb:///path/to/dir`: the embedded engine, in this process (one process per directory:
  a second is refused with `DatamartInUseError`, naming the directory);
* `clickhouse://user:password@host:8123` (`clickhouses://` or `https://…` for TLS): a
  server, through `clickhouse-connect`'s HTTP client.

The URL is never logged as given: `redacted` drops its password.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import clickhouse_connect

from replica_store.errors import DatamartInUseError, LoaderError
from replica_store.kind import CLICKHOUSE_SCHEMES

SCHEMES = (*CLICKHOUSE_SCHEMES, "http", "https")


def is_clickhouse_url(url: str) -> bool:
    return urlsplit(url).scheme in SCHEMES


def redacted(url: str) -> str:
    """The URL without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def open_client(url: str) -> Any:
    """A `clickhouse-connect` client for the replica URL."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise LoaderError(
            f"not a ClickHouse replica URL: {redacted(url)} (chdb:// or clickhouse://)"
        )
    if parts.scheme == "chdb":
        path = parts.path
        if not path or path == "/":
            raise LoaderError("a chdb:// replica URL names a directory: chdb:///path/to/dir")
        try:
            return clickhouse_connect.get_client(dsn=f"chdb://{path}")
        except Exception as exc:
            if "Cannot lock file" in str(exc) or "already running" in str(exc):
                raise DatamartInUseError(
                    f"the ClickHouse directory {path} is in use by another process (the "
                    "embedded engine takes one process per directory)"
                ) from None
            raise
    secure = parts.scheme in ("clickhouses", "https")
    return clickhouse_connect.get_client(
        host=parts.hostname or "localhost",
        port=parts.port,
        username=parts.username,
        password=parts.password or "",
        database=parts.path.lstrip("/") or None,
        secure=secure,
    )
