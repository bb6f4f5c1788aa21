"""Loading deltas through the store interface alone (`replica_store.interface`), as a
test drives a store: the rows of each table decoded and reduced to the last row per key
here, then staged, applied and committed by the store."""

from __future__ import annotations

import pyarrow as pa

from protocol.body import decode_body
from protocol.schema import Table
from replica_store.interface import Store
from replica_store.layout import Datamart
from replica_store.lost_commit import LoadResult
from replica_store.transfer import StagedTransfer


def last_row_per_key(table: Table, transfer: StagedTransfer) -> tuple[list[pa.RecordBatch], int]:
    """The table's rows of the delta, the last one per key (chunk, then position order;
    none if the delta has no stream of it), and how many rows it received."""
    last: dict[tuple[object, ...], dict[str, object]] = {}
    schema, received = None, 0
    for _, path in transfer.chunks_of(table.name):
        for batch in decode_body(table, path.read_bytes()):
            schema, received = batch.schema, received + batch.num_rows
            for row in batch.to_pylist():
                last[tuple(row[k] for k in table.primary_key)] = row
    if schema is None:
        return [], 0
    return [pa.RecordBatch.from_pylist(list(last.values()), schema=schema)], received


def load(store: Store, datamart: Datamart, transfer: StagedTransfer) -> LoadResult:
    write = store.begin_delta(datamart, transfer.manifest)
    assert write.lock(wait=True)
    assert write.registered() is None
    write.begin()
    tables = list(datamart.schema)
    for table in tables:
        rows, received = last_row_per_key(table, transfer)
        relation, staged = write.stage(table, rows)
        write.apply(table, staged, received, staging=relation)
    return write.commit(transfer, tables, settle_seconds=5)
