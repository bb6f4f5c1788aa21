"""Building staged transfers and reading replica tables back, for the loader tests."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from podd_runtime.files import durable_write
from protocol.apply_model import DeltaRow, ReplicaModel, apply_delta
from protocol.chunk_files import ChunkFile
from protocol.framing import frame_delta
from protocol.schema import LogicalSchema, Table
from protocol.workload import Workload, WorkloadSpec
from replica_store.replica_reader import read_versions, select_list
from replica_store.store_sql import q
from replica_store.transfer import (
    StagedTransfer,
    StreamManifest,
    TransferManifest,
)

BASE_DATE = datetime(2026, 1, 1, tzinfo=UTC)


def delta_date(n: int) -> datetime:
    return BASE_DATE + timedelta(hours=n)


def stage(
    root: Path,
    schema: LogicalSchema,
    delta_num: int,
    rows_by_table: Mapping[str, Sequence[DeltaRow]],
    *,
    chunk_rows: int = 1000,
    date: datetime | None = None,
    tables: Sequence[str] | None = None,
) -> StagedTransfer:
    """Frame a delta the way an origin does, and stage its chunks as the agent will."""
    request_id = str(uuid.uuid4())
    directory = root / f"{schema.datamart}-{delta_num}-{request_id}"
    directory.mkdir(parents=True)
    selected = (
        schema
        if tables is None
        else schema.model_copy(update={"tables": tuple(schema.table(t) for t in tables)})
    )
    counts: dict[int, tuple[str, int]] = {}
    for chunk in frame_delta(
        selected,
        request_id=request_id,
        delta_num=delta_num,
        delta_date=date or delta_date(delta_num),
        rows_by_table=rows_by_table,
        chunk_rows=chunk_rows,
    ):
        key = chunk.key
        durable_write(directory / ChunkFile(key.stream_number, key.chunk_number).name, chunk.body)
        counts[key.stream_number] = (key.table_name, key.chunk_number)
    manifest = TransferManifest(
        datamart=schema.datamart,
        delta_num=delta_num,
        delta_date=date or delta_date(delta_num),
        request_id=request_id,
        streams=tuple(
            StreamManifest(stream_number=s, table_name=t, chunk_count=c)
            for s, (t, c) in sorted(counts.items())
        ),
    )
    return StagedTransfer.write(directory, manifest)


def read_as_of(dsn: str, datamart: str, table: Table, n: int) -> set[tuple[Any, ...]]:
    cols = select_list(table)
    name = f"{q(datamart)}.{q(table.name + '_as_of')}"
    with psycopg.connect(dsn) as conn:
        return {tuple(r) for r in conn.execute(f"SELECT {cols} FROM {name}(%s)", (n,)).fetchall()}


def snapshot(dsn: str, schema: LogicalSchema) -> object:
    """Every version of every table: equal snapshots mean an unchanged replica."""
    return [read_versions(dsn, schema.datamart, t) for t in schema]


def assert_matches_model(dsn: str, model: ReplicaModel) -> None:
    for table in model.schema:
        actual, history = read_versions(dsn, model.schema.datamart, table)
        expected = model.tables[table.name]
        assert actual == set(expected.actual.values()), f"{table.name}_actual differs"
        assert history == set(expected.history), f"{table.name}_history differs"


def two_deltas(schema: LogicalSchema, root: Path) -> tuple[ReplicaModel, list[StagedTransfer]]:
    """Deltas 0 and 1 of a 300-row workload staged under `root`, and the model after both."""
    workload = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=11))
    model = ReplicaModel(schema)
    transfers = []
    for n in range(2):
        rows = workload.next_delta()
        transfers.append(stage(root, schema, n, rows, chunk_rows=70))
        model, _ = apply_delta(model, n, delta_date(n), rows)
    return model, transfers
