"""Apply a complete staged transfer to a ClickHouse replica (`replica_store.adqm`).

The same steps as `DeltaLoader` (already applied? in order? stage, apply, register), with
the store's one writer: slices of the chunks are decoded and reduced to the last row per
key (in this process, or by Spark tasks for a big delta: `adqm_slices`), staged into the
table's incoming table, and each table is published (`AdqmDelta`) while the next one
decodes. An embedded ClickHouse is one process's, so nothing but the driver writes it.

Streams are applied when the delta is complete: there is no open transaction to apply
pieces into while a delta arrives (the agent runs no prestage on this store).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import structlog
from pyspark.sql import SparkSession

from protocol.schema import LogicalSchema
from replica_store.adqm.store import AdqmStore
from replica_store.errors import TransientLoadError
from replica_store.layout import Datamart
from replica_store.lost_commit import LoadResult
from replica_store.transfer import StagedTransfer
from spark_loader.adqm_slices import TableEnd, delta_slices
from spark_loader.executor_probe import probe_executors
from spark_loader.load_rules import served_datamart, with_retries
from spark_loader.run_ahead import iterate_ahead
from spark_loader.session import LazySession
from spark_loader.settings import LoaderSettings

log = structlog.get_logger("spark_loader")


class AdqmLoader:
    """Loads staged transfers of the registered datamarts into a ClickHouse replica."""

    def __init__(
        self,
        store: AdqmStore,
        spark: SparkSession | LazySession,
        settings: LoaderSettings | None = None,
    ) -> None:
        self.store = store
        self._spark = spark
        self.settings = settings or LoaderSettings()
        self._datamarts: dict[str, Datamart] = {}

    def spark(self) -> SparkSession:
        return self._spark.get() if isinstance(self._spark, LazySession) else self._spark

    def close(self) -> None:
        """Nothing is kept between loads (the store's client is the store's)."""

    def flush_commits(self) -> None:
        """Every registry row is written when its load returns: nothing waits here."""

    def probe_executors(self) -> None:
        """Before the first load: the executors read the staging directory (they never
        reach the replica)."""
        probe_executors(
            self.spark(),
            self.settings.staging_path,
            None,
            timeout=self.settings.executor_probe_timeout_seconds,
        )

    def datamart(self, name: str) -> Datamart | None:
        return self._datamarts.get(name)

    def register(self, schema: LogicalSchema) -> Datamart:
        datamart = self.store.ensure(schema)
        self._datamarts[schema.datamart] = datamart
        return datamart

    def decode_ahead(self, transfer: StagedTransfer) -> Mapping[Any, Any]:
        """Nothing is decoded ahead for this store."""
        del transfer
        return {}

    def load(
        self, transfer: StagedTransfer, opened: Any = None, *, ahead: Any = None
    ) -> LoadResult:
        """Apply the transfer, retried on transient failures; `LOAD_FAILED` after them."""
        del opened, ahead  # (no open apply, nothing decoded ahead, for this store)
        manifest = transfer.manifest
        datamart = served_datamart(self._datamarts, manifest)
        bound = log.bind(
            datamart=manifest.datamart, deltaNum=manifest.delta_num, requestId=manifest.request_id
        )
        return with_retries(
            lambda: self._attempt(datamart, transfer, bound),
            self.settings,
            bound,
            manifest.delta_num,
        )

    def _attempt(
        self,
        datamart: Datamart,
        transfer: StagedTransfer,
        bound: structlog.typing.FilteringBoundLogger,
    ) -> LoadResult:
        started = time.perf_counter()
        tables = [datamart.schema.table(s.table_name) for s in transfer.manifest.streams]
        write = self.store.begin_delta(datamart, transfer.manifest)
        write.lock(wait=True)
        try:
            stored = write.registered()
            if stored is not None:
                bound.info("delta already applied", step=1)
                write.roll_back()
                return LoadResult.from_registry(stored, already_applied=True)
            write.begin()
            for table in tables:
                write.stage(table, [])  # (emptied: slices are appended as they come)
            counts = {datamart.position(t.name): (0, 0) for t in tables}
            parts = delta_slices(datamart, transfer, tables, self.settings, self.spark)
            with iterate_ahead(parts, depth=2, name="podd-decode") as ahead:
                for part in ahead:  # a table is published while the next one decodes
                    table = datamart.schema.tables[part.table]
                    if isinstance(part, TableEnd):
                        write.apply(table, *counts[part.table])
                        continue
                    staged, received = counts[part.table]
                    if part.rows is not None:
                        staged += write.stage(table, part.rows.to_batches(), append=True)[1]
                    counts[part.table] = (staged, received + part.received)
            for table in tables:  # (those with no chunk; the others are done already)
                write.apply(table, *counts[datamart.position(table.name)])
            settle = self.settings.commit_settle_seconds
            result = write.commit(transfer, tables, settle_seconds=settle)
        except BaseException as exc:
            try:
                write.roll_back(failed=True)
            except Exception as undo:  # the next load's `begin` undoes it: the cause is exc's
                bound.warning("undo after a failed load failed", error=str(undo)[:300])
            if _transient(exc):
                raise TransientLoadError(f"{type(exc).__name__}: {exc}") from exc
            raise
        rows = sum(c.rows_received for c in result.tables)
        bound.info("applied", step=4, seconds=round(time.perf_counter() - started, 3), rows=rows)
        self._merge_if_due(datamart, bound)
        return result

    def _merge_if_due(
        self, datamart: Datamart, bound: structlog.typing.FilteringBoundLogger
    ) -> None:
        """Merge tables whose parts passed `clickhouse_optimize_parts` (after the answer's
        registry row: a failure here is logged, never a failed load)."""
        limit = self.settings.clickhouse_optimize_parts
        if not limit:
            return
        started = time.perf_counter()
        try:
            merged = self.store.optimize(datamart.schema, over_parts=limit)
        except Exception as exc:
            bound.warning("merge skipped", error=str(exc)[:300])
            return
        if merged:
            seconds = round(time.perf_counter() - started, 3)
            bound.info("tables merged", tables=merged, seconds=seconds)


def _transient(exc: BaseException) -> bool:
    """A failure of the connection to a ClickHouse server, worth another attempt."""
    name = type(exc).__name__
    return name in {"OperationalError"} or isinstance(exc, ConnectionError | TimeoutError)
