"""The replica's parts the agent runs with, for the store the settings choose: the store,
the loader, the registry's tail, this process's hold on its datamarts, and the prestager.

PostgreSQL (and ADB): the embedded server unless a DSN is given; Spark executors COPY into
it; streams are prestaged while their delta arrives. ClickHouse (docs/contracts/REPLICA.md, "The
ADQM store"): the embedded engine in `data_dir/clickhouse` unless a URL is given; executors hand
rows to the agent, the one writer; deltas are applied when complete (no prestage).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import structlog

from podd_runtime.dsn import safe_dsn
from protocol.schema import LogicalSchema
from replica_agent.settings import AgentSettings
from replica_store.embedded_pg import replica_for
from replica_store.kind import StoreKind

log = structlog.get_logger("replica_agent")

#: Seconds an open apply may idle beyond the incomplete timeout before PostgreSQL ends it
#: (the agent's own sweep rolls it back once the transfer is answered INCOMPLETE_DELTA).
OPEN_APPLY_MARGIN = 60.0

#: The datamarts' schemas, given where stored ones are read from.
ReadSchemas = Callable[[Callable[[str], LogicalSchema | None]], list[LogicalSchema]]


@dataclass
class ReplicaParts:
    store: Any
    loader: Any
    registry_tail: Any
    #: Checked every few seconds: still the datamarts' one writer?
    keep_hold: Callable[[], None]
    prestager: Any
    schemas: list[LogicalSchema]


def open_replica(
    settings: AgentSettings, stack: ExitStack, read_schemas: ReadSchemas, lock_file: Any
) -> ReplicaParts:
    """Everything below the agent, started in order and closed by `stack`: the store is
    checked, then this process takes its datamarts (before Spark or Kafka), then Spark and
    the loader, whose executors must read staging."""
    if settings.store is StoreKind.CLICKHOUSE:
        return _clickhouse(settings, stack, read_schemas, lock_file)
    return _postgresql(settings, stack, read_schemas, lock_file)


def _postgresql(
    settings: AgentSettings, stack: ExitStack, read_schemas: ReadSchemas, lock_file: Any
) -> ReplicaParts:
    from replica_store.ownership import DatamartOwnership  # noqa: PLC0415
    from replica_store.registry_tail import RegistryTail  # noqa: PLC0415
    from replica_store.store import ReplicaStore  # noqa: PLC0415
    from spark_loader.loader import DeltaLoader  # noqa: PLC0415
    from spark_loader.prestage import Prestager  # noqa: PLC0415
    from spark_loader.session import build_session  # noqa: PLC0415

    dsn = stack.enter_context(replica_for(settings))
    log.info("replica", dsn=safe_dsn(dsn), store="postgresql", dialect=settings.store_dialect.value)
    store = ReplicaStore(dsn, settings.store_dialect)
    schemas = read_schemas(store.stored_schema)
    ownership = DatamartOwnership(dsn, [s.datamart for s in schemas], lock_file, "replica-agent")
    ownership.acquire()
    stack.callback(ownership.release)
    spark = build_session(settings)
    stack.callback(spark.stop)
    loader = DeltaLoader(store, spark, settings)
    stack.callback(loader.close)
    for schema in schemas:
        loader.register(schema)
    loader.probe_executors()
    log.info("executors read staging and reach the replica", spark=settings.spark_master)
    registry_tail = RegistryTail(store.dsn)
    stack.callback(registry_tail.close)
    prestager = None
    if settings.prestage:
        idle = settings.incomplete_timeout_seconds + OPEN_APPLY_MARGIN
        prestager = Prestager(loader, idle_seconds=idle)
    return ReplicaParts(store, loader, registry_tail, ownership.check, prestager, schemas)


def _clickhouse(
    settings: AgentSettings, stack: ExitStack, read_schemas: ReadSchemas, lock_file: Any
) -> ReplicaParts:
    from replica_store.adqm.client import redacted  # noqa: PLC0415
    from replica_store.adqm.registry_tail import AdqmRegistryTail  # noqa: PLC0415
    from spark_loader.adqm_loader import AdqmLoader  # noqa: PLC0415
    from spark_loader.replica_choice import clickhouse_store  # noqa: PLC0415
    from spark_loader.session import build_session  # noqa: PLC0415

    url = settings.clickhouse_replica_url()
    log.info("replica", url=redacted(url), store="clickhouse")
    store = clickhouse_store(settings)
    stack.callback(store.close)
    schemas = read_schemas(store.stored_schema)
    hold = store.hold([s.datamart for s in schemas], "replica-agent", lock_file)
    hold.acquire()
    stack.callback(hold.release)
    spark = build_session(settings)
    stack.callback(spark.stop)
    loader = AdqmLoader(store, spark, settings)
    for schema in schemas:
        loader.register(schema)
    loader.probe_executors()
    log.info("executors read staging", spark=settings.spark_master)
    return ReplicaParts(store, loader, AdqmRegistryTail(store), lambda: None, None, schemas)
