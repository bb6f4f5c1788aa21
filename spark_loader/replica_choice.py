"""The replica the settings choose, for the commands that load one (`podd-loader`,
`podd-restore`): its store, the loader for it, and the hold that makes this process its
datamarts' one writer. PostgreSQL (and ADB) by a DSN or the embedded server; ClickHouse by
`PODD_STORE=clickhouse` or a ClickHouse URL (docs/contracts/REPLICA.md, "The ADQM store")."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from podd_runtime.lock_file import Hold
from replica_store.embedded_pg import replica_for
from replica_store.kind import StoreKind
from replica_store.store import ReplicaStore
from spark_loader.settings import LoaderSettings

if TYPE_CHECKING:  # (Spark is imported by the commands that load, not by `registry`)
    from pyspark.sql import SparkSession

    from protocol.schema import LogicalSchema
    from replica_store.adqm.store import AdqmStore
    from replica_store.layout import Datamart
    from replica_store.lost_commit import LoadResult
    from replica_store.transfer import StagedTransfer
    from spark_loader.session import LazySession


class Loader(Protocol):
    """What the commands ask of either store's loader (`DeltaLoader`, `AdqmLoader`)."""

    def register(self, schema: LogicalSchema) -> Datamart: ...

    def probe_executors(self) -> None: ...

    def decode_ahead(self, transfer: StagedTransfer) -> Any: ...

    def load(
        self, transfer: StagedTransfer, opened: Any = None, *, ahead: Any = None
    ) -> LoadResult: ...

    def flush_commits(self) -> None: ...

    def close(self) -> None: ...


def clickhouse_store(settings: LoaderSettings) -> AdqmStore:
    """The ClickHouse store the settings name (URL, database prefix, cluster)."""
    from replica_store.adqm.store import AdqmStore  # noqa: PLC0415

    return AdqmStore(
        settings.clickhouse_replica_url(),
        prefix=settings.clickhouse_database_prefix,
        cluster=settings.clickhouse_cluster,
    )


@contextmanager
def open_store(settings: LoaderSettings) -> Iterator[tuple[Any, str | None]]:
    """The replica's store, and its DSN (None: ClickHouse), open for the block."""
    if settings.store is StoreKind.CLICKHOUSE:
        store = clickhouse_store(settings)
        try:
            yield store, None
        finally:
            store.close()
        return
    with replica_for(settings) as dsn:
        yield ReplicaStore(dsn, settings.store_dialect), dsn


def hold_for(
    store: Any, dsn: str | None, datamarts: Sequence[str], lock_file: Path | None, role: str
) -> Hold:
    """This process's hold on the datamarts (refused while another writer holds one)."""
    if dsn is None:
        hold: Hold = store.hold(list(datamarts), role, lock_file)
        return hold
    from replica_store.ownership import DatamartOwnership  # noqa: PLC0415

    return DatamartOwnership(dsn, list(datamarts), lock_file, role)


def loader_for(
    store: Any, dsn: str | None, spark: SparkSession | LazySession, settings: LoaderSettings
) -> Loader:
    """The loader for the store: `DeltaLoader` (PostgreSQL) or `AdqmLoader` (ClickHouse)."""
    if dsn is None:
        from spark_loader.adqm_loader import AdqmLoader  # noqa: PLC0415

        return AdqmLoader(store, spark, settings)
    from spark_loader.loader import DeltaLoader  # noqa: PLC0415

    return DeltaLoader(store, spark, settings)
