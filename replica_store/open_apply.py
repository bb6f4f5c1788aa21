"""A delta's apply transaction, opened while the delta still arrives.

Prestaging (`spark_loader.prestage`) stages a stream as soon as it is complete. With an open
apply it also applies that table at once, inside the delta's one transaction, which stays
open until the last chunk: the load then stages and applies only the tables left, inserts
the registry row and commits (`DeltaLoader.load(transfer, opened)`). So a delta whose
tables arrive one after another is mostly applied when its last chunk comes.

What a load promises holds:
* the transaction holds the datamart's lock (a session advisory lock, taken without waiting:
  a load running means no open apply) from its opening, and the delta it opens for is the
  one the registry expects next;
* nothing of it is visible before its COMMIT, with the registry row;
* a delta refused later, not completed in time, or loaded under another requestId is rolled
  back (`abort`), and so is the transaction after any failure in it (the load then starts
  over from staging, which still holds the prestaged tables);
* `kill -9` of the agent ends the connection, and PostgreSQL rolls the transaction back.

A stream still arriving may be applied in pieces (`replica_store.pieces`): `pieces` says how
far each such stream is applied, and the load stages only the chunks after that.

Its connection is used by one thread at a time: `apply_later` applies in a thread of its
own, so the next stream stages meanwhile, and every other use waits for that apply first.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future

import psycopg
import structlog

from protocol.apply_model import TableCounts
from protocol.schema import Table
from replica_store.connections import LoaderConnections, Session
from replica_store.errors import TransientLoadError
from replica_store.pieces import Piece
from replica_store.store import Datamart
from replica_store.store_sql import datamart_lock_key
from replica_store.table_apply import apply_table, apply_table_piece
from replica_store.transfer import TransferManifest

log = structlog.get_logger("spark_loader")

#: A piece of a stream: the last chunk it holds, and whether that is the stream's last.
Span = tuple[int, bool]


class OpenApply:
    def __init__(
        self,
        connections: LoaderConnections,
        datamart: Datamart,
        manifest: TransferManifest,
        *,
        idle_seconds: float | None = None,
    ) -> None:
        self.connections = connections
        #: The server ends the transaction if it stays idle this long (None: never): an
        #: agent stopped or starved between pieces must not pin the datamart's lock and
        #: the VACUUM horizon. The load that takes the session over lifts it.
        self.idle_seconds = idle_seconds
        self.datamart = datamart
        self.request_id = manifest.request_id
        self.delta_num = manifest.delta_num
        self.params = {"delta": manifest.delta_num, "prev": manifest.delta_num - 1}
        self.session: Session | None = None
        #: Tables applied in the transaction (whole streams), with their counts.
        self.applied: dict[str, TableCounts] = {}
        #: Tables whose streams are applied in part so far (`replica_store.pieces`).
        self.pieces: dict[str, Piece] = {}
        #: Whether `KEYED_LOOKUP` is set in the transaction (`apply_table`).
        self.keyed = False
        #: The apply `apply_later` started, until it is waited for (`settle`), its tables
        #: and, for pieces, the chunk each ends at and whether that is its stream's last.
        self._running: Future[None] | None = None
        self._applying: list[str] = []
        self._spans: Mapping[str, Span] = {}

    @property
    def alive(self) -> bool:
        return self.session is not None and not self.session.conn.closed

    def open(self, verify: Callable[[psycopg.Connection], None]) -> bool:
        """Take the datamart's lock without waiting and begin the transaction; False when
        another session holds the lock. `verify` (the sequence check) raises to refuse."""
        session = self.connections.take()
        try:
            conn = session.conn
            locked = conn.execute(
                "SELECT pg_try_advisory_lock(%s)", (datamart_lock_key(self.datamart.name),)
            ).fetchone()
            if not (locked and locked[0]):
                self.connections.give_back(session)
                return False
            verify(conn)
            if self.idle_seconds is not None:
                conn.execute(
                    "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                    (f"{max(1, round(self.idle_seconds * 1000))}ms",),
                )
            conn.autocommit = False
        except BaseException:
            session.conn.close()
            raise
        self.session = session
        return True

    def apply_later(
        self,
        tables: list[Table],
        counts: Mapping[str, tuple[int, int]],
        spans: Mapping[str, Span] | None = None,
    ) -> None:
        """`apply` in a thread, returning at once (after the one before it ended): the
        caller stages the next tables meanwhile. Raises if the transaction is gone (an
        earlier apply failed); a failure of this one is logged here: it rolls the
        transaction back, and whoever uses it next finds it not `alive`."""
        self.settle()
        if not self.alive:
            raise psycopg.OperationalError("the open apply was rolled back")
        running: Future[None] = Future()

        def work() -> None:
            try:
                self._apply_now(tables, counts, spans or {})
                running.set_result(None)
            except BaseException as exc:
                reason = f"{type(exc).__name__}: {exc}"[:300]
                log.info("open apply rolled back: the load applies its tables",
                         deltaNum=self.delta_num, reason=reason)  # fmt: skip
                running.set_exception(exc)

        self._running, self._applying = running, [t.name for t in tables]
        self._spans = spans or {}
        threading.Thread(target=work, name="podd-open-apply", daemon=True).start()

    def _running_tables(self) -> list[str]:
        return self._applying if self._running is not None else []

    def applying(self) -> bool:
        """An apply `apply_later` started still runs."""
        running = self._running
        return running is not None and not running.done()

    def busy(self) -> set[str]:
        """The tables the apply still running (`apply_later`) reads the staging of."""
        return set(self._running_tables())

    def claimed(self) -> set[str]:
        """The tables applied whole, and those the apply still running (`apply_later`)
        completes: applied too once it ends, unless it fails and the transaction is rolled
        back."""
        running = self._running_tables()
        return {*self.applied, *(n for n in running if self._spans.get(n, (0, True))[1])}

    def through(self) -> dict[str, int]:
        """Tables applied in part, with the last chunk applied (or being applied)."""
        out = {name: piece.through for name, piece in dict(self.pieces).items()}
        for name in self._running_tables():
            through, complete = self._spans.get(name, (0, True))
            if complete:
                out.pop(name, None)
            else:
                out[name] = through
        return out

    def touched(self) -> set[str]:
        """Tables whose staging the transaction read (it holds a lock on it till its end):
        their staging may be emptied by DELETE, never by TRUNCATE, while it is open."""
        return {*self.applied, *self.pieces, *self._running_tables()}

    def settle(self) -> None:
        """Wait for the apply `apply_later` started, if any (its failure rolled back)."""
        running, self._running, self._applying = self._running, None, []
        if running is not None:
            with contextlib.suppress(Exception):
                running.result()

    def apply(
        self,
        tables: list[Table],
        counts: Mapping[str, tuple[int, int]],
        spans: Mapping[str, Span] | None = None,
    ) -> None:
        """Apply these staged tables ((staged, received) rows each) in the transaction; on
        any failure the transaction is rolled back and the error raised. `spans`: the
        tables staged as pieces (`replica_store.pieces`), each with the chunk it ends at
        and whether that is its stream's last; the others are whole streams."""
        self.settle()
        self._apply_now(tables, counts, spans or {})

    def _apply_now(
        self,
        tables: list[Table],
        counts: Mapping[str, tuple[int, int]],
        spans: Mapping[str, Span],
    ) -> None:
        assert self.session is not None, "the apply is not open"
        conn = self.session.conn
        try:
            for table in tables:
                name = table.name
                if name in self.applied:
                    continue
                staged, rows = counts[name]
                if name not in spans:
                    done, self.keyed = apply_table(
                        conn, self.datamart, table, staged, rows, self.params, self.keyed
                    )
                    self.applied[name] = done
                    continue
                through, complete = spans[name]
                piece, self.keyed = apply_table_piece(
                    conn, self.datamart, table, staged, rows, self.params, self.keyed,
                    before=self.pieces.get(name), through=through,
                )  # fmt: skip
                self.pieces[name] = piece
                if complete:
                    self.applied[name] = self.pieces.pop(name).counts
        except BaseException:
            self._roll_back()
            raise

    def hand_over(self) -> Session:
        """The session, its transaction open, for the load that finishes the delta."""
        self.settle()
        assert self.session is not None, "the apply is not open"
        if self.idle_seconds is not None:  # the load is at work: no server-side limit
            try:
                self.session.conn.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
            except psycopg.Error as exc:  # the server ended it (idle too long), or it broke
                self._roll_back()
                raise TransientLoadError(f"the open apply was rolled back: {exc}") from exc
        session, self.session = self.session, None
        return session

    def abort(self) -> None:
        """Roll the transaction back and release the datamart's lock."""
        self.settle()
        self._roll_back()

    def _roll_back(self) -> None:
        session, self.session = self.session, None
        self.applied, self.pieces = {}, {}
        if session is None:
            return
        try:
            if not session.conn.closed:
                session.conn.rollback()
                session.conn.autocommit = True
        except psycopg.Error:
            session.conn.close()
        self.connections.give_back(session)
