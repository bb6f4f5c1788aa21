"""The loader's replica connections, kept between loads.

A new connection costs about 10 ms (TCP and SCRAM), as much as the rest of a small delta's
load. A load takes an idle connection (or opens one), and gives it back only if it ended
cleanly: autocommit on, no transaction open, its session advisory locks released. Any
failure closes it, so the next load starts on a fresh one; nothing a load leaves in a
session can reach the next.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus


@dataclass(frozen=True)
class Session:
    conn: psycopg.Connection
    #: (pid, backend_start): tells this backend from a later one with the same pid.
    backend: tuple[Any, ...]


class LoaderConnections:
    def __init__(self, dsn: str, *, keep: int = 2) -> None:
        self.dsn = dsn
        self.keep = keep
        self._idle: list[Session] = []

    def _open(self) -> Session:
        conn = psycopg.connect(self.dsn, autocommit=True)
        try:
            backend = conn.execute(
                "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
            ).fetchone()
        except BaseException:
            conn.close()
            raise
        assert backend is not None
        return Session(conn, tuple(backend))

    @contextmanager
    def session(self) -> Iterator[Session]:
        """An autocommit connection for one load; kept afterwards only if it ended cleanly."""
        session = self.take()
        try:
            yield session
        except BaseException:
            session.conn.close()
            raise
        self.give_back(session)

    def take(self) -> Session:
        """An idle connection, or a new one; hand it back with `give_back`."""
        try:
            return self._idle.pop()  # list.pop is atomic: loads may run in threads
        except IndexError:
            return self._open()

    def give_back(self, session: Session) -> None:
        """Kept for the next load if it is clean (autocommit, idle, its session advisory
        locks released), closed otherwise."""
        conn = session.conn
        if conn.closed or not conn.autocommit:
            conn.close()
            return
        if conn.info.transaction_status is not TransactionStatus.IDLE:
            conn.close()
            return
        try:  # nothing a session set stays for the next one (an open apply's idle limit)
            conn.execute(
                "SELECT pg_advisory_unlock_all(); RESET idle_in_transaction_session_timeout"
            )
        except psycopg.Error:
            conn.close()
            return
        if len(self._idle) < self.keep:
            self._idle.append(session)
        else:
            conn.close()

    def close(self) -> None:
        while self._idle:
            self._idle.pop().conn.close()
