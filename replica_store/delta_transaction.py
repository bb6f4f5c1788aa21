"""Delta N's one transaction on the replica: every path that loads a delta opens or adopts one
and feeds it tables.

It owns, for its whole life:
* the session (a connection of `LoaderConnections`) and the datamart's lock, a session
  advisory lock taken before anything is read (`lock`);
* the sequence check under that lock (`registered`, PROTOCOL.md's steps 1-2);
* the planner settings its tables' sizes want (`keyed`, `table_apply`);
* per-table progress: the tables applied whole (`done`, with their counts) and the streams
  applied in part (`pieces`, `replica_store.pieces`);
* the apply of each table, whole, a piece, or the rest after pieces (`apply`);
* the end: the registry row and COMMIT (`commit`), including a COMMIT whose connection
  broke, settled from the registry (`lost_commit`), or the rollback (`roll_back`).

One thread uses it at a time: the load's, or, while the delta still arrives, the open
apply's owning thread (`replica_store.open_apply`), which hands it to the load.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC

import psycopg
import pyarrow as pa

from protocol.apply_model import TableCounts
from protocol.chunk_range import ChunkRange
from protocol.schema import Table
from replica_store.connections import LoaderConnections, Session
from replica_store.errors import TransientLoadError
from replica_store.layout import Datamart
from replica_store.lost_commit import LoadResult, settle_lost_commit
from replica_store.pg_copy import HEADER, TRAILER, copy_kinds, encode_batch
from replica_store.pieces import Piece
from replica_store.registry import (
    RegistryEntry,
    encode_counts,
    registered_or_refused,
    registry_entry,
)
from replica_store.store_sql import (
    META_SCHEMA,
    copy_statement,
    datamart_lock_key,
    q,
    temp_staging_sql,
)
from replica_store.table_apply import apply_table, apply_table_piece
from replica_store.transfer import StagedTransfer, TransferManifest

#: Commits the transaction (a seam for tests of a connection lost during COMMIT).
Commit = Callable[[psycopg.Connection], None]


def plain_commit(conn: psycopg.Connection) -> None:
    conn.commit()


class DeltaTransaction:
    def __init__(
        self, connections: LoaderConnections, datamart: Datamart, manifest: TransferManifest
    ) -> None:
        self.connections = connections
        self.datamart = datamart
        self.manifest = manifest
        self.params = {"delta": manifest.delta_num, "prev": manifest.delta_num - 1}
        self.session: Session | None = None
        #: Tables applied whole (or their last piece applied), with their counts.
        self.done: dict[str, TableCounts] = {}
        #: Streams applied in part so far.
        self.pieces: dict[str, Piece] = {}
        #: Whether `KEYED_LOOKUP` is set in the transaction (`table_apply`).
        self.keyed = False

    @property
    def conn(self) -> psycopg.Connection:
        assert self.session is not None, "the delta's transaction is not open"
        return self.session.conn

    @property
    def alive(self) -> bool:
        return self.session is not None and not self.session.conn.closed

    # --- opening -------------------------------------------------------------------------
    def lock(self, *, wait: bool) -> bool:
        """Take a session and the datamart's lock (waiting for it, or not: False when
        another session holds it). The session stays in autocommit until `begin`."""
        session = self.connections.take()
        try:
            key = datamart_lock_key(self.datamart.name)
            if wait:
                session.conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            else:
                row = session.conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
                if not (row and row[0]):
                    self.connections.give_back(session)
                    return False
        except BaseException:
            session.conn.close()
            raise
        self.session = session
        return True

    def registered(self) -> RegistryEntry | None:
        """Steps 1-2 under the lock: the stored entry of this delta if it is applied (the
        same date), None if it is the one expected next; the protocol's refusal else."""
        manifest, conn = self.manifest, self.conn
        name, number = manifest.datamart, manifest.delta_num
        stored = registry_entry(conn, name, number, exists=True)
        last = None if stored is not None else registry_entry(conn, name, None, exists=True)
        return registered_or_refused(manifest, stored, last)

    def begin(self, *, idle_seconds: float | None = None) -> None:
        """Open the transaction (the lock, a session's, outlives it). `idle_seconds`: the
        server ends it if it stays idle that long (an open apply waiting for pieces)."""
        conn = self.conn
        if idle_seconds is not None:
            conn.execute(
                "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                (f"{max(1, round(idle_seconds * 1000))}ms",),
            )
        if conn.autocommit:  # (a small delta's staging opened it, `temp_staging`)
            conn.autocommit = False

    def lift_idle_limit(self) -> None:
        """The load is at work: no server-side idle limit (the transaction is gone if the
        server ended it meanwhile: `TransientLoadError`)."""
        try:
            self.conn.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
        except psycopg.Error as exc:
            self.roll_back(failed=True)
            raise TransientLoadError(f"the open apply was rolled back: {exc}") from exc

    # --- staging and applying ----------------------------------------------------------
    def stage(self, table: Table, rows: Iterable[pa.RecordBatch]) -> tuple[str, int]:
        """Copy a table's rows (its logical columns, then `sys_op`; one row per key, the last
        of the delta) into a temporary staging table of this open transaction: the relation
        to `apply` from, and how many rows. The loader's paths stage by COPY from Spark
        executors or the driver instead (`spark_loader`); this is the store's own way, for a
        caller that holds its rows already."""
        position = self.datamart.position(table.name)
        relation, ddl = temp_staging_sql(
            self.datamart.distributed, self.datamart.id, position, table
        )
        conn, kinds, count = self.conn, copy_kinds(table), 0
        conn.execute(ddl)
        conn.execute(f"DELETE FROM {relation}")
        conn.execute("SET LOCAL podd.slice = 0")
        with conn.cursor().copy(copy_statement(relation, table)) as copy:
            copy.write(HEADER)
            for batch in rows:
                copy.write(encode_batch(kinds, batch))
                count += batch.num_rows
            copy.write(TRAILER)
        return relation, count

    def apply(
        self,
        table: Table,
        staged: int,
        received: int,
        *,
        staging: str | None = None,
        piece: ChunkRange | None = None,
    ) -> None:
        """Apply the table's (`staged`, `received`) rows, staged in `staging` (else its
        staging table): its whole stream; with `piece`, those chunks of it; after pieces
        and without `piece`, the rest of its stream."""
        name = table.name
        if name in self.done:
            return
        before = self.pieces.get(name)
        if piece is None and before is None:
            counts, self.keyed = apply_table(
                self.conn,
                self.datamart,
                table,
                staged,
                received,
                self.params,
                self.keyed,
                staging=staging,
            )
            self.done[name] = counts
            return
        if piece is None:  # the rest: the chunks after the last piece, to the stream's end
            assert before is not None
            through, ends_stream = before.through, True  # (its last chunk's number unneeded)
        else:
            through, ends_stream = piece.last, piece.ends_stream
        applied, self.keyed = apply_table_piece(
            self.conn,
            self.datamart,
            table,
            staged,
            received,
            self.params,
            self.keyed,
            before=before,
            through=through,
            staging=staging,
        )
        if ends_stream:
            self.pieces.pop(name, None)
            self.done[name] = applied.counts
        else:
            self.pieces[name] = applied

    # --- ending --------------------------------------------------------------------------
    def commit(
        self,
        transfer: StagedTransfer,
        tables: list[Table],
        *,
        synchronous: bool = True,
        settle_seconds: float,
        commit: Commit = plain_commit,
    ) -> LoadResult:
        """The registry row (the counts of `tables`, in order, each applied), then COMMIT; a
        COMMIT whose connection broke is settled from the registry. The session goes back
        to the pool either way; on any failure the transaction is rolled back."""
        manifest, session = self.manifest, self.session
        assert session is not None, "the delta's transaction is not open"
        conn = session.conn
        try:
            counts = [self.done[t.name] for t in tables]
            conn.execute(  # applied_at: now(), the transaction's start (no RETURNING on ADB)
                f"INSERT INTO {q(META_SCHEMA)}.delta_registry "
                "(datamart, delta_num, delta_date, request_id, table_counts) "
                "VALUES (%s, %s, %s, %s, %s)",
                (
                    self.datamart.name,
                    manifest.delta_num,
                    manifest.delta_date.astimezone(UTC).replace(tzinfo=None),
                    manifest.request_id,
                    encode_counts(counts),
                ),
            )
            row = conn.execute("SELECT now()").fetchone()
            assert row is not None
            if not synchronous:
                conn.execute("SET LOCAL synchronous_commit = off")
            try:
                commit(conn)
            except psycopg.OperationalError as exc:
                conn.close()
                self._end()
                return settle_lost_commit(
                    self.connections.dsn, settle_seconds, transfer, exc, session.backend
                )
            conn.autocommit = True
        except BaseException:
            self.roll_back(failed=True)
            raise
        self._end()
        return LoadResult(
            self.datamart.name,
            manifest.delta_num,
            manifest.delta_date,
            manifest.request_id,
            tuple(counts),
            row[0],
        )

    def roll_back(self, *, failed: bool = False) -> None:
        """Roll back (if open) and give the session back: its lock goes with it. After a
        failure in it (`failed`) the connection is closed instead: nothing a failed load
        left in a session reaches the next."""
        session = self.session
        if session is not None and failed:
            session.conn.close()
        elif session is not None and not session.conn.closed:
            try:
                session.conn.rollback()
                session.conn.autocommit = True
            except psycopg.Error:
                session.conn.close()
        self._end()

    def _end(self) -> None:
        session, self.session = self.session, None
        self.done, self.pieces = {}, {}
        if session is not None:
            self.connections.give_back(session)
