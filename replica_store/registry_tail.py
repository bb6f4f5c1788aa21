"""The end of a datamart's registry, read cheaply and often: numbers and dates only.

The agent asks the registry what it holds before each `delta.rs` (at most once a second) and
every ten seconds, so that a database gone back in time is told to the origin. Those reads
must not grow with the replica's age: each reads the last rows by the registry's primary key
(`ORDER BY delta_num DESC LIMIT n`, an index scan backwards), decodes no per-table counts,
and runs on one kept connection in autocommit (no transaction held between reads, so nothing
pins the database's VACUUM horizon). A connection that broke is opened again once per read.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import psycopg

from podd_runtime.dsn import safe_dsn
from protocol.sequence import AppliedDelta
from replica_store.store_sql import META_SCHEMA, q


class RegistryTail:
    """Reads of the registry's last entries at `dsn`, on one kept connection."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RegistryTail({safe_dsn(self.dsn)})"

    def last(self, datamart: str) -> AppliedDelta | None:
        """The datamart's last applied delta (None: none is)."""
        entries = self.tail(datamart, 1)
        return entries[-1] if entries else None

    def tail(self, datamart: str, count: int) -> list[AppliedDelta]:
        """The datamart's last `count` applied deltas, oldest first."""
        rows = self._read(
            f"SELECT delta_num, delta_date FROM {q(META_SCHEMA)}.delta_registry "
            "WHERE datamart = %s ORDER BY delta_num DESC LIMIT %s",
            (datamart, count),
        )
        return [AppliedDelta(n, d.replace(tzinfo=UTC)) for n, d in reversed(rows)]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _read(self, query: str, params: tuple[object, ...]) -> list[tuple[int, datetime]]:
        with self._lock:
            for attempt in (1, 2):
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = psycopg.connect(self.dsn, autocommit=True)
                    return self._conn.execute(query, params).fetchall()
                except psycopg.errors.UndefinedTable:
                    return []  # a database from before this replica's store was made
                except psycopg.OperationalError:
                    if self._conn is not None:
                        self._conn.close()
                        self._conn = None
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")
