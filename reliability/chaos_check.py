"""The end of a chaos run (`reliability.chaos`): the replica against the reference model,
also as of every delta, the registry's rows, and whether any transfer that applied a delta
was answered ERROR (a lie)."""

from __future__ import annotations

from typing import Any

from origin.client import OriginClient
from origin.sources import WorkloadSource, replica_model
from protocol.apply_model import rows_as_of
from protocol.errors import ErrorCode
from protocol.messages import DeltaStatus
from reliability.chaos_report import ChaosRun
from replica_store.adqm.client import is_clickhouse_url
from replica_store.adqm.store import AdqmStore
from replica_store.replica_reader import differences
from replica_store.store import ReplicaStore


def check_replica(run: ChaosRun, dsn: str, source: WorkloadSource, client: OriginClient) -> None:
    clickhouse = is_clickhouse_url(dsn)
    store = AdqmStore(dsn) if clickhouse else ReplicaStore(dsn)
    try:
        _check_store(run, store, dsn, source, client)
    finally:
        if clickhouse:
            store.close()


def _check_store(
    run: ChaosRun, store: Any, dsn: str, source: WorkloadSource, client: OriginClient
) -> None:
    registry = [(e.delta_num, e.request_id) for e in store.registry(source.schema.datamart)]
    run.registry_rows = len(registry)
    numbers = [n for n, _ in registry]
    run.lost = len(set(range(run.deltas)) - set(numbers))
    run.doubled = len(numbers) - len(set(numbers))
    if numbers != list(range(run.deltas)):
        run.lies.append(f"the registry holds deltas {[n for n, _ in registry]}")
    for delta_num, request_id in registry:
        for answer in client.results.get(request_id, []):
            if (
                answer.status is DeltaStatus.ERROR
                and answer.error_code != ErrorCode.INCOMPLETE_DELTA
            ):
                run.lies.append(
                    f"delta {delta_num} was applied by {request_id}, answered {answer.error_code}"
                )
    model = replica_model(source, run.deltas - 1)
    if isinstance(store, ReplicaStore):
        run.differences = differences(dsn, model, as_of=range(run.deltas))
        return
    run.differences = [  # (ClickHouse: one table of versions, read as of every delta)
        f"{table.name} as of {n}"
        for n in range(run.deltas)
        for table in model.schema
        if sorted(store.read_as_of(model.schema.datamart, table, n))
        != sorted(rows_as_of(model.tables[table.name], n))
    ]
