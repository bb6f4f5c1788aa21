"""A small delta staged inside its own apply transaction, into temporary tables.

The loader stages a small delta in the driver (`LoaderSettings.in_driver_max_mib`). Staged
into the datamart's staging tables, that cost, per delta: finding which hold rows,
TRUNCATE (a new file per table, dropped at commit), the staging transaction's own commit
(a WAL flush), and the prestage markers read and cleared (`staged_streams`). Staged here
instead, on the loader's connection, in the transaction the apply then continues:

* each table goes into the session's temporary table of its shape (`temp_staging_sql`):
  created once per connection, never logged, emptied by PostgreSQL at every commit (`ON
  COMMIT DELETE ROWS`), so no load ever finds rows of another;
* nothing commits before the registry row: one commit per delta. A refused chunk, a lost
  connection or `kill -9` rolls it all back, staging included; the chunk files stay the
  truth, as before.

Only the load that applies on this very connection can use it (`DeltaLoader._attempt`);
prestaging and an opened apply stage on another connection, into the staging tables. Both
ways, the driver stages a small delta with `stage_small`.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence

import psycopg

from protocol.errors import ProtocolError
from protocol.schema import Table
from replica_store.layout import Datamart
from replica_store.store_sql import copy_statement, temp_staging_sql
from replica_store.transfer import StagedTransfer
from spark_loader.settings import LoaderSettings
from spark_loader.slice_encode import ChunkRefused, EncodedSlice, TableSlice, encode_slice
from spark_loader.slice_jobs import StagingTarget, StagingTask, plan_tasks, stage_in_driver

#: The temporary tables each open connection has (they live as long as its session).
_created: weakref.WeakKeyDictionary[psycopg.Connection, set[str]] = weakref.WeakKeyDictionary()


def chunk_entries(
    datamart: Datamart, transfer: StagedTransfer, tables: Sequence[Table]
) -> dict[str, list[tuple[int, int, str, int]]]:
    """Each table's chunks as (table position, chunk number, path, size)."""
    return {
        t.name: [
            (datamart.position(t.name), number, str(path.absolute()), size)
            for number, path, size in transfer.sized_chunks(t.name)
        ]
        for t in tables
    }


def is_small(chunks: dict[str, list[tuple[int, int, str, int]]], settings: LoaderSettings) -> bool:
    """Whether the driver stages these chunks itself (no Spark job)."""
    total = sum(size for entries in chunks.values() for *_, size in entries)
    return total <= settings.in_driver_max_mib * 2**20


def stage_in_apply_transaction(
    conn: psycopg.Connection,
    datamart: Datamart,
    transfer: StagedTransfer,
    tables: Sequence[Table],
    chunks: dict[str, list[tuple[int, int, str, int]]],
    settings: LoaderSettings,
    ahead: Mapping[TableSlice, EncodedSlice] | None = None,
) -> tuple[dict[str, tuple[int, int]], dict[str, str]]:
    """Open the apply transaction on `conn` (autocommit off) and stage every table in it:
    (staged, received) rows and the temporary table holding them, per table name."""
    relations: dict[str, str] = {}
    targets: dict[int, StagingTarget] = {}
    known = _created.setdefault(conn, set())
    for table in tables:
        position = datamart.position(table.name)
        name, ddl = temp_staging_sql(datamart.distributed, datamart.id, position, table)
        if name not in known:  # in autocommit: it outlives a rolled-back load
            conn.execute(ddl)
            known.add(name)
        relations[table.name] = name
        targets[position] = StagingTarget(name, copy_statement(name, table), 0)
    conn.autocommit = False
    counts = stage_small(
        conn,
        datamart,
        transfer,
        tables,
        chunks,
        targets,
        settings,
        in_open_transaction=True,
        ahead=ahead,
    )
    return counts, relations


def stage_small(
    conn: psycopg.Connection,
    datamart: Datamart,
    transfer: StagedTransfer,
    tables: Sequence[Table],
    chunks: dict[str, list[tuple[int, int, str, int]]],
    targets: dict[int, StagingTarget],
    settings: LoaderSettings,
    *,
    in_open_transaction: bool = False,
    ahead: Mapping[TableSlice, EncodedSlice] | None = None,
) -> dict[str, tuple[int, int]]:
    """A small delta's tables staged by the driver itself, one task (`stage_in_driver`):
    (staged, received) rows per table name. `ahead`: slices `decode_ahead` encoded."""
    at_once = stage_in_driver(
        conn,
        datamart.schema.tables,
        _small_tasks(tables, chunks, settings),
        targets,
        settings.body_limits(),
        transfer.manifest.body_format,
        in_open_transaction=in_open_transaction,
        ahead=ahead,
    )
    return {t.name: at_once.get(datamart.position(t.name), (0, 0)) for t in tables}


def decode_ahead(
    datamart: Datamart, transfer: StagedTransfer, settings: LoaderSettings
) -> dict[TableSlice, EncodedSlice]:
    """The slices of a small transfer, decoded and encoded for their COPY before its load
    (no connection, no lock): a restore decodes delta k + 1 while delta k applies, so the
    load of k + 1 is its COPY and its apply. Empty for a delta the driver would not stage.

    Only a cache: the load takes a slice only if it plans the very same one (files, table
    position, share of the keys) for the very same table definition (`slice_jobs`), and
    decodes anything else itself. A chunk refused here ends the decoding; the load meets it
    again and refuses it, naming it, as it would have."""
    tables = [datamart.schema.table(s.table_name) for s in transfer.manifest.streams]
    chunks = chunk_entries(datamart, transfer, tables)
    if not is_small(chunks, settings):
        return {}
    limits, body_format = settings.body_limits(), transfer.manifest.body_format
    encoded: dict[TableSlice, EncodedSlice] = {}
    for task in _small_tasks(tables, chunks, settings):
        for piece in task.slices:
            try:
                encoded[piece] = encode_slice(piece, datamart.schema.tables, limits, body_format)
            except (ChunkRefused, ProtocolError):
                return encoded
    return encoded


def _small_tasks(
    tables: Sequence[Table],
    chunks: dict[str, list[tuple[int, int, str, int]]],
    settings: LoaderSettings,
) -> list[StagingTask]:
    """The one driver task of a small delta (as `stage_small` plans it, and `decode_ahead`)."""
    every = [entry for t in tables for entry in chunks[t.name]]
    return plan_tasks(every, 1, int(settings.max_slice_mib * 2**20))
