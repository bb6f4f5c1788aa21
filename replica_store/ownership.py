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

Each holder marks its sessions with a random token (`session_name`) and writes it into its
staging root's lock file. A process that takes that lock file (so its last holder is gone)
ends the sessions carrying the last holder's token, which a dead host leaves on the server
until keepalives give up; no other session is ever ended (host names and pids are not
unique: two containers' pid 1 on one host, a host name cut at 63 bytes). A process without
a lock file ends none. The lock file is a `flock`: on NFS it may be local to one client, so
two hosts sharing a staging root over NFS are not refused by it (the database lock still
refuses a second writer of a datamart).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import structlog

from podd_runtime.lock_file import Hold, LockFile, holder_text
from replica_store.errors import DatamartInUseError, OwnershipLostError

log = structlog.get_logger("spark_loader")

#: A holder's session name begins with this and its token (`session_name`).
TOKEN_PREFIX = "podd:"  # noqa: S105 (a session name's prefix, not a secret)

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
        #: This process's own mark on its sessions: random, so no other process (a
        #: container's pid 1 beside another's, a host name cut at 63 bytes) shares it.
        self.token = secrets.token_hex(8)
        self._directory = LockFile(lock_file, role, self.token) if lock_file else None
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
            self.dsn,
            autocommit=True,
            application_name=session_name(self.token, self.role),
            options=KEEPALIVE_OPTIONS,
            keepalives=1,
            keepalives_idle=30,
            keepalives_interval=10,
            keepalives_count=3,
        )
        try:
            previous = None if self._directory is None else self._directory.previous_token
            if previous is not None and previous != self.token:
                _end_sessions_of(conn, previous)
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
            log.warning(
                "the replica cannot be reached to keep the datamarts' lock",
                error=type(exc).__name__,
            )
            return
        log.warning(
            "the datamarts' lock was taken again in a new session", datamarts=self.datamarts
        )

    def release(self) -> None:
        if self._conn is not None:
            self._conn.close()  # the session's advisory locks go with it
            self._conn = None
        if self._directory is not None:
            self._directory.release()


def session_name(token: str, role: str) -> str:
    """The `application_name` of a holder's session: its token first (never cut), then
    who it is, within PostgreSQL's 63 bytes."""
    return f"{TOKEN_PREFIX}{token} {holder_text(role)}".encode()[:63].decode("utf-8", "ignore")


def _end_sessions_of(conn: psycopg.Connection, token: str) -> None:
    """Sessions the last holder of this staging root left: it is gone (its flock was
    free), but a host that died keeps its sessions and their locks on the server until
    keepalives give up, and a restarted process would wait on them. They are ended. Only
    that holder's token is matched: a live process, whatever its host or pid, is never."""
    rows = conn.execute(
        "SELECT pid, application_name FROM pg_stat_activity "
        "WHERE application_name LIKE %s AND pid <> pg_backend_pid()",
        (f"{TOKEN_PREFIX}{token} %",),
    ).fetchall()
    for pid, name in rows:
        try:
            _terminate(conn, pid)
            log.warning("ended a session an earlier run left", session=name, server_pid=pid)
        except psycopg.Error as exc:  # not ours to end (another role): leave it
            error = type(exc).__name__
            log.warning("a stale session could not be ended", session=name, error=error)


#: How long ending a stale session may wait for its backend to exit (and release its locks).
TERMINATE_WAIT_MS = 5000


def _terminate(conn: psycopg.Connection, pid: int) -> None:
    """End the backend and, from PostgreSQL 14, wait until it has exited: it holds its
    advisory locks until then, and the lock taken next would be refused."""
    if conn.info.server_version >= 140000:
        conn.execute("SELECT pg_terminate_backend(%s, %s)", (pid, TERMINATE_WAIT_MS))
    else:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def _holder_row(conn: psycopg.Connection, key: int) -> tuple[Any, ...] | None:
    """(application_name, client address, server pid, backend start) of the session
    holding the advisory lock `key` (None: nobody holds it)."""
    return conn.execute(_HOLDER_SQL, ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchone()


def holder_name(conn: psycopg.Connection, datamart: str) -> str | None:
    """Who holds `datamart`, as its session names it without the token (None: nobody)."""
    row = _holder_row(conn, owner_key(datamart))
    return None if row is None else _without_token(str(row[0] or ""))


def _without_token(name: str) -> str:
    if name.startswith(TOKEN_PREFIX):
        return name.split(" ", 1)[1] if " " in name else ""
    return name


def _holder(conn: psycopg.Connection, key: int) -> str:
    row = _holder_row(conn, key)
    if row is None:
        return "another process"
    name, address, pid, since = row
    name = _without_token(name or "")
    where = f" from {address}" if address else ""
    when = f" since {since:%Y-%m-%d %H:%M:%S %Z}" if since else ""
    return f"{name or 'a session'} (server pid {pid}{where}{when})"
