"""A table applied in pieces: a stream's chunks in groups, while later chunks still arrive.

An origin may interleave its streams, so none is complete before the last chunks of the
delta. The open apply (`replica_store.open_apply`) then applies each stream a piece at a time
(chunks 1..a, then a+1..b, …, each staged alone: the last row per key of that piece), in
the delta's one transaction. The tables must end as if the stream had been applied whole
(PROTOCOL.md, "applying delta N": the last row per key by chunk and position), so a piece
replaces what earlier pieces of the same delta wrote for its keys:

* a version an earlier piece opened (`sys_from = N`) leaves `t_actual` and is not moved to
  `t_history`: it never existed as of any applied delta;
* the version an earlier piece closed (in `t_history`, `sys_to = N - 1`) keeps its place
  but takes the `sys_op` of the key's last row, the row that closes it in the whole delta:
  - closed by an upsert, now deleted: `sys_op` 0 → 1, found through the version the upsert
    opened, which the piece removes;
  - closed by a delete, now upserted: `sys_op` 1 → 0. Those keys have no version in
    `t_actual` to find them by, so the transaction keeps the keys closed by a delete, with
    the closed version's `sys_from`, in a temporary table (`gone_sql`: dropped at COMMIT,
    gone with a rollback), looked up only when it holds any.

The statements of both rules are `replica_store.apply_statements`'.

Every lookup in `t_actual` and `t_history` goes from the piece's rows, by primary key, and
no statement filters either table by a delta number alone: the planner's statistics do
not know the rows this transaction wrote, took `sys_to = N - 1` for one row, and scanned
the piece's staging once per row of `t_history` (33 s for one table).

The counts stay those of the whole stream: upserts minus versions replaced, and deletes
as the closing `sys_op` says once every flip is counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from psycopg import sql

from protocol.apply_model import TableCounts
from protocol.schema import Table
from replica_store.dialect import distributed_by
from replica_store.store_sql import ident, render


@dataclass(frozen=True)
class Piece:
    """What the open transaction holds of a stream applied in pieces: its chunks up to
    `through`, their counts, and how many keys its table of deleted keys holds."""

    through: int
    counts: TableCounts
    gone: int = 0


def plus(counts: TableCounts, more: TableCounts) -> TableCounts:
    """Counts of two pieces of one stream, the later piece's already net of the earlier."""
    return replace(
        counts,
        rows_received=counts.rows_received + more.rows_received,
        rows_upserted=counts.rows_upserted + more.rows_upserted,
        rows_deleted=counts.rows_deleted + more.rows_deleted,
    )


def gone_name(datamart_id: int, position: int) -> str:
    """The transaction's temporary table of the keys closed by a delete (quoted)."""
    return render(ident("pg_temp", f"podd_gone_{datamart_id}_{position}"))


def closing_name(datamart_id: int, position: int) -> str:
    """The piece's temporary table of the versions it closes, for the flips (quoted)."""
    return render(ident("pg_temp", f"podd_closing_{datamart_id}_{position}"))


def gone_sql(distributed: bool, table: Table, gone: str) -> str:
    """Create `gone` for the transaction, if absent: the keys, then the `sys_from` of the
    version closed (its primary key in `t_history`); primary key on the keys."""
    keys = [table.column(k) for k in table.primary_key]
    columns = [
        sql.SQL("{} {} NOT NULL").format(ident(c.name), sql.SQL(c.type.to_postgres())) for c in keys
    ]
    return render(
        sql.SQL(
            "CREATE TEMP TABLE IF NOT EXISTS {gone} ({columns}, sys_from bigint NOT NULL, "
            "PRIMARY KEY ({keys})) ON COMMIT DROP{distributed}"
        ).format(
            gone=sql.SQL(gone),
            columns=sql.SQL(", ").join(columns),
            keys=sql.SQL(", ").join(ident(k) for k in table.primary_key),
            distributed=distributed_by(distributed, table.primary_key),
        )
    )
