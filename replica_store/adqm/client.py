"""Opening the ClickHouse behind a replica URL, with one client library for both kinds:

* `chdb:///path/to/dir`: the embedded engine, in this process (one process per directory:
  a second is refused with `DatamartInUseError`, naming the directory);
* `clickhouse://user:password@host:8123` (`clickhouses://` or `https://…` for TLS): a
  server, through `clickhouse-connect`'s HTTP client.

The URL is never logged as given: `redacted` drops its password.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
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


def _in_use(directory: Path, holder: str) -> DatamartInUseError:
    by = f" ({holder})" if holder else ""
    return DatamartInUseError(
        f"the ClickHouse directory {directory} is in use by another process{by}: the "
        "embedded engine takes one process per directory"
    )


def _refuse_if_held(directory: Path) -> None:
    """`DatamartInUseError` if another process runs the embedded engine on `directory`: the
    engine holds an exclusive `flock` on its `status` file while it runs (the kernel drops
    it when that process ends, kill -9 included). Asked first, since the engine's own
    refusal does not always say why."""
    status = directory / "status"
    try:
        fd = os.open(status, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip().replace("\n", ", ")
        raise _in_use(directory, holder) from None
    finally:
        os.close(fd)  # (closing drops a lock taken here)


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
        _refuse_if_held(Path(path))
        try:
            return clickhouse_connect.get_client(dsn=f"chdb://{path}")
        except Exception as exc:
            if "Cannot lock file" in str(exc) or "already running" in str(exc):
                raise _in_use(Path(path), "") from None
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
