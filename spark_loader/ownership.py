"""One writer per datamart: a process that writes a datamart's replica holds it for life.

The agent, `podd-loader apply` and `podd-restore run` each hold, for as long as they run,
a session advisory lock per datamart on a database session of their own (its
`application_name` says who it is, so a second process can name the holder), and a
`LockFile` in their staging root. A second process for the same datamart, or on the
same staging root, fails at start with a message naming the holder, before it consumes,
stages or loads anything: two agents in one consumer group no longer split a delta's
partitions between them, and two agents on one volume no longer delete each other's files.

The database lock lives as long as its session. The session asks the server to probe the
client's TCP connection (`tcp_keepalives_*`), so the session of a holder whose host died
ends in about a minute, not the two hours of the kernel's default. When the session ends
under a live holder (a restart, a failover), `check()` (called periodically) opens another
and takes the locks again; if another process took them meanwhile, `OwnershipLostError`:
the holder must stop writing. Loads keep their own per-load lock (`datamart_lock_key`);
this one has another key, so a holder's own loads never wait on it.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import structlog

from podd_runtime.lock_file import Hold, LockFile, holder_text
from spark_loader.errors import DatamartInUseError, OwnershipLostError

log = structlog.get_logger("spark_loader")

#: Server-side probes of the client's connection: a dead client's session (and its locks)
#: ends after about 30 + 3 x 10 seconds of silence.
KEEPALIVE_OPTIONS = (
    "-c tcp_keepalives_idle=30 -c tcp_keepalives_interval=10 -c tcp_keepalives_count=3"
)

_HOLDER_SQL = """
SELECT a.application_name, host(a.client_addr), l.pid, a.backend_start
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.classid::bigint = %s AND l.objid::bigint = %s
"""


def owner_key(datamart: str) -> int:
    digest = hashlib.sha256(f"podd-owner:{datamart}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class DatamartOwnership(Hold):
    """Held from `acquire` (or `with`) to `release`: `datamarts`, and the staging
    directory whose lock file is `lock_file`."""

    def __init__(
        self, dsn: str, datamarts: Sequence[str], lock_file: Path | None, role: str
    ) -> None:
        self.dsn = dsn
        self.datamarts = list(datamarts)
        self.role = role
        self._directory = LockFile(lock_file, role) if lock_file else None
        self._conn: psycopg.Connection | None = None

    def acquire(self) -> None:
        if self._directory is not None:
            self._directory.acquire()
        try:
            self._take()
        except BaseException:
            self.release()
            raise

    def _take(self) -> None:
        conn = psycopg.connect(
            self.dsn, autocommit=True, application_name=holder_text(self.role)[:63],
            options=KEEPALIVE_OPTIONS, keepalives=1, keepalives_idle=30,
            keepalives_interval=10, keepalives_count=3,
        )  # fmt: skip
        try:
            _end_stale_sessions(conn)
            for datamart in self.datamarts:
                key = owner_key(datamart)
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
                if not row or not row[0]:
                    raise DatamartInUseError(
                        f"datamart {datamart} is already written by {_holder(conn, key)}; "
                        "one process at a time may write a datamart (stop that one first)"
                    )
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def check(self) -> None:
        """Still held? If the session ended, take the locks again in a new one;
        `OwnershipLostError` if another process holds them now. A replica that cannot be
        reached is logged and checked again at the next call."""
        conn = self._conn
        if conn is not None and not conn.closed:
            try:
                conn.execute("SELECT 1")
                return
            except psycopg.Error:
                conn.close()
        self._conn = None
        try:
            self._take()
        except DatamartInUseError as exc:
            raise OwnershipLostError(f"this process lost its hold: {exc}") from None
        except psycopg.OperationalError as exc:
            log.warning("the replica cannot be reached to keep the datamarts' lock",
                        error=type(exc).__name__)  # fmt: skip
            return
        log.warning("the datamarts' lock was taken again in a new session",
                    datamarts=self.datamarts)  # fmt: skip

    def release(self) -> None:
        if self._conn is not None:
            self._conn.close()  # the session's advisory locks go with it
            self._conn = None
        if self._directory is not None:
            self._directory.release()


_STALE_SQL = """
SELECT pid, application_name, backend_start < %s FROM pg_stat_activity
WHERE application_name LIKE %s AND pid <> pg_backend_pid()
"""
_NAMED = re.compile(r".* on (?P<host>\S+) pid (?P<pid>\d+)$")


def _end_stale_sessions(conn: psycopg.Connection) -> None:
    """Sessions an earlier run of a process on this host left (its process is gone, or it
    had this process's pid, in a container, and began before this process): a restarted
    agent would wait on their locks and open transactions. They are ended."""
    host = socket.gethostname()
    started = datetime.fromtimestamp(_process_start(), UTC)
    rows = conn.execute(_STALE_SQL, (started, f"% on {host} pid %")).fetchall()
    for pid, name, before_us in rows:
        found = _NAMED.match(name or "")
        if found is None or found["host"] != host:
            continue
        owner = int(found["pid"])
        if (owner == os.getpid() and before_us) or (owner != os.getpid() and not _alive(owner)):
            try:
                _terminate(conn, pid)
                log.warning("ended a session an earlier run left", session=name, server_pid=pid)
            except psycopg.Error as exc:  # not ours to end (another role): leave it
                log.warning("a stale session could not be ended", session=name,
                            error=type(exc).__name__)  # fmt: skip


#: How long ending a stale session may wait for its backend to exit (and release its locks).
TERMINATE_WAIT_MS = 5000


def _terminate(conn: psycopg.Connection, pid: int) -> None:
    """End the backend and, from PostgreSQL 14, wait until it has exited: it holds its
    advisory locks until then, and the lock taken next would be refused."""
    if conn.info.server_version >= 140000:
        conn.execute("SELECT pg_terminate_backend(%s, %s)", (pid, TERMINATE_WAIT_MS))
    else:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _process_start() -> float:
    """When this process started (epoch seconds)."""
    try:
        return Path(f"/proc/{os.getpid()}").stat().st_ctime
    except OSError:
        return time.time()


def _holder_row(conn: psycopg.Connection, key: int) -> tuple[Any, ...] | None:
    """(application_name, client address, server pid, backend start) of the session
    holding the advisory lock `key` (None: nobody holds it)."""
    return conn.execute(_HOLDER_SQL, ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchone()


def holder_name(conn: psycopg.Connection, datamart: str) -> str | None:
    """The `application_name` of the session holding `datamart` (None: nobody holds it)."""
    row = _holder_row(conn, owner_key(datamart))
    return None if row is None else str(row[0] or "")


def _holder(conn: psycopg.Connection, key: int) -> str:
    row = _holder_row(conn, key)
    if row is None:
        return "another process"
    name, address, pid, since = row
    where = f" from {address}" if address else ""
    when = f" since {since:%Y-%m-%d %H:%M:%S %Z}" if since else ""
    return f"{name or 'a session'} (server pid {pid}{where}{when})"
