"""A replica in ClickHouse (`AdqmStore`): the `Store` of `replica_store.interface`.

One code path for an embedded engine and a server, through `clickhouse-connect`:
`chdb:///path` opens chdb in this process (its directory is locked for one process at a
time), `clickhouse://user@host:8123` a server. Credentials ride in the URL or its settings
and are never logged (`redacted`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from podd_runtime.lock_file import Hold, LockFile
from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema, Table
from replica_store.adqm import registry
from replica_store.adqm.client import open_client, redacted
from replica_store.adqm.delta import AdqmDelta
from replica_store.adqm.layout import (
    SYSTEM_COLUMNS,
    logical_select,
    meta_ddl,
    staging_ddl,
    table_ddl,
    version_columns,
    view_ddl,
)
from replica_store.adqm.lease import WriterLease
from replica_store.adqm.names import Names, check_prostore_names, literal
from replica_store.adqm.schema_history import record_views, recorded_views, retire_table
from replica_store.adqm.types import as_model_values, column_types
from replica_store.adqm.undo import undo_unregistered
from replica_store.errors import DatamartInUseError, LoaderError, StoreMismatchError
from replica_store.layout import Datamart
from replica_store.registry import RegistryEntry
from replica_store.transfer import TransferManifest

log = structlog.get_logger("replica_store")


class AdqmStore:
    def __init__(self, url: str, *, prefix: str = "", cluster: str | None = None) -> None:
        self.url = url
        self.names = Names(prefix)
        self.cluster = cluster
        self.client = open_client(url)
        #: An embedded engine (chdb): its directory's lock keeps other processes out, so no
        #: lease is taken (`lease`), and a process killed with -9 holds nothing after.
        self.embedded = url.startswith("chdb:")
        self._writers: dict[str, threading.Lock] = {}
        self._held: set[str] = set()
        self._guard = threading.Lock()
        log.info("adqm store opened", replica=redacted(url), prefix=prefix, cluster=cluster)

    # --- layout --------------------------------------------------------------------------
    def ensure(self, schema: LogicalSchema) -> Datamart:
        """Create the datamart's store if needed; refuse if existing tables disagree. A
        delta an earlier run published and did not register is undone here."""
        check_prostore_names(schema)
        for statement in meta_ddl(self.names, self.cluster):
            self.client.command(statement)
        self._check_existing(schema)
        for statement in table_ddl(self.names, schema, self.cluster):
            self.client.command(statement)
        found = registry.catalog_entry(self.client, self.names, schema.datamart)
        if found is None:
            datamart_id = registry.add_to_catalog(
                self.client, self.names, schema.datamart, schema.to_ddl()
            )
        else:
            datamart_id = found[0]
            if found[1] != schema.to_ddl():
                registry.record_schema(
                    self.client, self.names, datamart_id, schema.datamart, schema.to_ddl()
                )
        for position in range(len(schema.tables)):
            for statement in staging_ddl(self.names, datamart_id, position, schema):
                self.client.command(statement)
        for statement in view_ddl(self.names, schema, self.cluster):
            self.client.command(statement)
        datamart = Datamart(schema, datamart_id)
        with self.writer(schema.datamart):
            self.undo_unregistered(datamart)
        return datamart

    def _check_existing(self, schema: LogicalSchema) -> None:
        """`StoreMismatchError` if a table's `t_actual` exists with other columns."""
        database = self.names.prefix + schema.datamart
        for table in schema:
            rows = self.client.query(
                "SELECT name, type FROM system.columns WHERE database = "
                f"{literal(database)} AND table = {literal(table.name + '_actual')} "
                "ORDER BY position"
            ).result_rows
            expected = [*column_types(table), *SYSTEM_COLUMNS]
            if rows and [tuple(r) for r in rows] != expected:
                raise StoreMismatchError(
                    f"{database}.{table.name}_actual exists with other columns than the "
                    f"schema gives ({version_columns(table)})"
                )

    def stored_schema(self, datamart: str) -> LogicalSchema | None:
        if not self._meta_exists():
            return None
        found = registry.catalog_entry(self.client, self.names, datamart)
        return None if found is None else parse_schema(found[1])

    def datamarts(self) -> list[str]:
        return registry.catalog(self.client, self.names) if self._meta_exists() else []

    def _meta_exists(self) -> bool:
        rows = self.client.query(
            "SELECT count() FROM system.tables WHERE database = "
            f"{literal(self.names.prefix + 'podd_replica')} AND name = 'datamart'"
        ).result_rows
        return bool(rows[0][0])

    # --- writing -------------------------------------------------------------------------
    def writer(self, datamart: str) -> threading.Lock:
        """The datamart's one writer in this process."""
        with self._guard:
            return self._writers.setdefault(datamart, threading.Lock())

    def begin_delta(self, datamart: Datamart, manifest: TransferManifest) -> AdqmDelta:
        if self.cluster is not None:
            raise LoaderError(
                f"loading a ClickHouse cluster ({self.cluster}) is not built: the store's DDL "
                "is made on it, deltas are not applied"
            )
        return AdqmDelta(self.client, self.names, self.writer(datamart.name), datamart, manifest)

    def undo_unregistered(self, datamart: Datamart) -> None:
        """`undo.undo_unregistered` (the caller holds the datamart's writer)."""
        undo_unregistered(self.client, self.names, datamart)

    def optimize(self, datamart: LogicalSchema, *, over_parts: int = 0) -> list[str]:
        """Merge the tables with more than `over_parts` active parts (`OPTIMIZE … FINAL`):
        reads get cheaper; never needed for correctness. The tables merged."""
        database = self.names.prefix + datamart.datamart
        parts = dict(
            self.client.query(
                "SELECT table, count() FROM system.parts WHERE active AND database = "
                f"{literal(database)} GROUP BY table"
            ).result_rows
        )
        merged = []
        for table in datamart:
            if parts.get(table.name + "_actual", 0) > over_parts:
                actual = self.names.actual(datamart.datamart, table.name)
                self.client.command(f"OPTIMIZE TABLE {actual} FINAL")
                merged.append(table.name)
        return merged

    # --- schema history (a restore from a backup's changelog) ------------------------------
    def retire_table(self, datamart: str, table: str, before_delta: int) -> list[str]:
        """`schema_history.retire_table` (a dropped table's versions kept, renamed)."""
        return retire_table(self.client, self.names, datamart, table, before_delta)

    def record_views(self, datamart: str, views: list[tuple[str, bool, str, int]]) -> None:
        record_views(self.client, self.names, datamart, views)

    def views(self, datamart: str) -> list[tuple[str, bool, str, int]]:
        return recorded_views(self.client, self.names, datamart)

    # --- reading -------------------------------------------------------------------------
    def registry(self, datamart: str) -> list[RegistryEntry]:
        return registry.read_registry(self.client, self.names, datamart)

    def applied(self, datamart: str, delta_num: int) -> RegistryEntry | None:
        return registry.registry_entry(self.client, self.names, datamart, delta_num)

    def last_applied(self, datamart: str) -> RegistryEntry | None:
        return registry.registry_entry(self.client, self.names, datamart, None)

    def read_as_of(self, datamart: str, table: Table, delta_num: int) -> list[tuple[Any, ...]]:
        """The table's rows as of delta `delta_num` (REPLICA.md's query, `FINAL`)."""
        result = self.client.query_arrow(
            f"SELECT {logical_select(table)} FROM {self.names.actual(datamart, table.name)} "
            f"FINAL WHERE sys_from <= {int(delta_num)} AND sys_to >= {int(delta_num)} "
            "AND sign = 1"
        )
        return as_model_values(table, result)

    # --- ownership -----------------------------------------------------------------------
    def hold(self, datamarts: Sequence[str], role: str, lock_file: Path | None = None) -> _AdqmHold:
        return _AdqmHold(self, list(datamarts), role, lock_file)

    def take_hold(self, datamarts: Sequence[str]) -> None:
        """Mark the datamarts held in this process (`DatamartInUseError` if one is)."""
        with self._guard:
            held = sorted(d for d in datamarts if d in self._held)
            if held:
                raise DatamartInUseError(f"datamarts {held} are held by another writer here")
            self._held.update(datamarts)

    def drop_hold(self, datamarts: Sequence[str]) -> None:
        with self._guard:
            self._held.difference_update(datamarts)

    def close(self) -> None:
        self.client.close()


class _AdqmHold(Hold):
    """This process's hold on datamarts of the store: one holder each in the process, and
    on a server a lease in the store against other processes (`lease`); an embedded
    engine's directory lock keeps them out already."""

    def __init__(
        self, store: AdqmStore, datamarts: list[str], role: str, lock_file: Path | None
    ) -> None:
        self.store, self.datamarts = store, datamarts
        self._directory = LockFile(lock_file, role) if lock_file else None
        self._lease = (
            None if store.embedded else WriterLease(store.client, store.names, datamarts, role)
        )
        self._taken: list[str] = []

    def acquire(self) -> None:
        for statement in meta_ddl(self.store.names, self.store.cluster):
            self.store.client.command(statement)
        if self._directory is not None:
            self._directory.acquire()
        try:
            self.store.take_hold(self.datamarts)
            self._taken = list(self.datamarts)
            if self._lease is not None:
                self._lease.acquire()
        except BaseException:
            self.release()
            raise

    def check(self) -> None:
        """Still held? The lease renewed; `OwnershipLostError` if another writer has it."""
        if self._lease is not None:
            self._lease.renew()

    def release(self) -> None:
        if self._lease is not None:
            self._lease.release()
        self.store.drop_hold(self._taken)
        self._taken = []
        if self._directory is not None:
            self._directory.release()
