"""Delta N into the ADQM store: the `DeltaWrite` of `replica_store.interface` for ClickHouse.

Without transactions, the delta's steps are made safe by their order: under the store's
one writer, the sequence is checked, what an earlier run published without registering is
undone (`begin`), each table is staged, then published whole (`statements`), and the
registry row ends it (`commit`). A failure before the registry row undoes what this delta
published (`roll_back`); a crash there is undone by the next `begin` or `ensure`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from protocol.apply_model import TableCounts
from protocol.chunk_range import ChunkRange
from protocol.schema import Table
from replica_store.adqm import registry, statements
from replica_store.adqm.names import META_DATABASE, Names, literal
from replica_store.adqm.types import shaped
from replica_store.adqm.undo import undo_unregistered
from replica_store.errors import LoaderError, TransientLoadError
from replica_store.layout import Datamart
from replica_store.lost_commit import LoadResult
from replica_store.registry import RegistryEntry, registered_or_refused
from replica_store.transfer import StagedTransfer, TransferManifest


class AdqmDelta:
    def __init__(
        self,
        client: Any,
        names: Names,
        writer: threading.Lock,
        datamart: Datamart,
        manifest: TransferManifest,
    ) -> None:
        self.client = client
        self.names = names
        #: The datamart's one writer in this process (`AdqmStore.writer`).
        self.writer = writer
        self.datamart = datamart
        self.manifest = manifest
        #: Tables applied, with their counts.
        self.done: dict[str, TableCounts] = {}
        self._locked = False
        self._open = False
        self._publishing = False
        #: Staging tables known to hold no row (no TRUNCATE needed before writing them).
        self._empty: set[str] = set()

    @property
    def alive(self) -> bool:
        return self._open

    # --- opening -------------------------------------------------------------------------
    def lock(self, *, wait: bool) -> bool:
        """The datamart's one writer in this store (False without `wait` when taken)."""
        self._locked = self.writer.acquire(blocking=wait)
        return self._locked

    def registered(self) -> RegistryEntry | None:
        """The stored entry of this delta if it is applied (the same date), None if it is
        the one expected next; the protocol's refusal else."""
        manifest = self.manifest
        stored, last = registry.sequence_entries(
            self.client, self.names, manifest.datamart, manifest.delta_num
        )
        return registered_or_refused(manifest, stored, last)

    def begin(self, *, idle_seconds: float | None = None) -> None:
        """Undo what an earlier run published and did not register; then tables may be
        published. (`idle_seconds` has no meaning here: nothing is held open.)"""
        del idle_seconds
        assert self._locked, "lock the datamart first"
        undo_unregistered(self.client, self.names, self.datamart)
        self._empty = self._emptied_staging()
        self._open = True

    def _emptied_staging(self) -> set[str]:
        """Empty the datamart's staging tables that hold rows (one query finds them): the
        names of all of them, known empty from now on until written."""
        names, datamart = self.names, self.datamart
        bare = [
            make(datamart.id, position)
            for position in range(len(datamart.schema.tables))
            for make in (names.incoming_table, names.publish_table)
        ]
        held = self.client.query(
            "SELECT name FROM system.tables WHERE database = "
            f"{literal(names.prefix + META_DATABASE)} AND name IN "
            f"({', '.join(map(literal, bare))}) AND total_rows > 0"
        ).result_rows
        for (name,) in held:
            self.client.command(f"TRUNCATE TABLE {names.meta_table(name)}")
        return {names.meta_table(name) for name in bare}

    # --- staging and applying ----------------------------------------------------------
    def stage(
        self, table: Table, rows: Iterable[pa.RecordBatch], *, append: bool = False
    ) -> tuple[str, int]:
        """A table's rows of the delta (logical columns, then `sys_op`; one row per key,
        the last) into its incoming staging table, emptied first unless `append` (a
        later slice of the table's keys): that table, and how many rows now."""
        position = self.datamart.position(table.name)
        incoming = self.names.incoming(self.datamart.id, position)
        if not append and incoming not in self._empty:
            self.client.command(f"TRUNCATE TABLE {incoming}")
        self._empty.discard(incoming)
        count = 0
        for batch in rows:
            if batch.num_rows:
                self.client.insert_arrow(incoming, pa.Table.from_batches([shaped(table, batch)]))
                count += batch.num_rows
        return incoming, count

    def apply(
        self,
        table: Table,
        staged: int,
        received: int,
        *,
        staging: str | None = None,
        piece: ChunkRange | None = None,
    ) -> None:
        """Publish the table's staged rows as delta N's versions, in one statement."""
        if piece is not None:
            raise LoaderError("the ADQM store applies whole streams, not pieces")
        if table.name in self.done:
            return
        assert self._open, "begin the delta first"
        names, number = self.names, self.manifest.delta_num
        position = self.datamart.position(table.name)
        incoming = staging or names.incoming(self.datamart.id, position)
        publish = names.publish(self.datamart.id, position)
        actual = names.actual(self.datamart.name, table.name)
        counts = TableCounts(table.name, received, 0, 0)
        if staged:
            rows, keys = self.client.query(
                statements.duplicate_keys_sql(table, incoming)
            ).result_rows[0]
            if rows != staged or keys != rows:
                raise LoaderError(
                    f"{table.name}: {rows} rows staged for {staged}, {keys} distinct keys"
                )
            if not self._publishing:
                registry.mark_publishing(self.client, names, self.datamart.name, number)
                self._publishing = True
            if publish not in self._empty:
                self.client.command(f"TRUNCATE TABLE {publish}")
            self._empty.discard(publish)
            self.client.command(
                statements.publish_sql(
                    table, actual, incoming, publish, number, self.manifest.delta_date
                )
            )
            opened, deleted = self.client.query(
                statements.published_counts_sql(publish, number)
            ).result_rows[0]
            self.client.command(statements.move_sql(actual, publish))
            self.client.command(f"TRUNCATE TABLE {publish}")
            self._empty.add(publish)
            counts = TableCounts(table.name, received, int(opened), int(deleted))
        self.done[table.name] = counts

    # --- ending --------------------------------------------------------------------------
    def commit(
        self,
        transfer: StagedTransfer,
        tables: list[Table],
        *,
        synchronous: bool = True,
        settle_seconds: float,
        commit: Any = None,
    ) -> LoadResult:
        """The registry row (the counts of `tables`, in order): the delta is applied. If
        writing it failed, the registry says whether it landed; if not, the delta's tables
        are undone and the load may be tried again (`TransientLoadError`)."""
        del synchronous, settle_seconds, commit
        manifest = self.manifest
        entry = RegistryEntry(
            datamart=self.datamart.name,
            delta_num=manifest.delta_num,
            delta_date=manifest.delta_date,
            request_id=manifest.request_id,
            tables=tuple(self.done[t.name] for t in tables),
            applied_at=datetime.now(UTC),
        )
        try:
            registry.register(self.client, self.names, entry)
        except Exception as exc:
            landed = registry.registry_entry(
                self.client, self.names, entry.datamart, entry.delta_num
            )
            if landed is None:
                self.roll_back(failed=True)
                raise TransientLoadError(f"the registry row was not written: {exc}") from exc
            entry = landed
        self._end()
        return LoadResult.from_registry(entry, already_applied=False)

    def roll_back(self, *, failed: bool = False) -> None:
        """Undo what this delta published (nothing is registered), and let the writer go."""
        del failed
        try:
            if self._publishing:
                undo_unregistered(self.client, self.names, self.datamart)
        finally:
            self._end()

    def _end(self) -> None:
        self.done, self._open, self._publishing = {}, False, False
        if self._locked:
            self._locked = False
            self.writer.release()
