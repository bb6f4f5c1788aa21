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
    opened, which the piece's statement removes (`piece_apply_sql`);
  - closed by a delete, now upserted: `sys_op` 1 → 0 (`flip_to_upsert_sql`). Those keys
    have no version in `t_actual` to find them by, so the transaction keeps the keys closed
    by a delete, with the closed version's `sys_from`, in a temporary table (`gone_sql`:
    dropped at COMMIT, gone with a rollback), looked up only when it holds any.

Every lookup in `t_actual` and `t_history` goes from the piece's rows, by primary key, and
no statement filters either table by a delta number alone: the planner's statistics do
not know the rows this transaction wrote, took `sys_to = N - 1` for one row, and scanned
the piece's staging once per row of `t_history` (33 s for one table).

The counts stay those of the whole stream: upserts minus versions replaced, and deletes
as the closing `sys_op` says once every flip is counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg import sql

from protocol.apply_model import TableCounts
from protocol.schema import Table
from replica_store.apply_sql import listed, target_columns
from replica_store.store_sql import ident, physical_ident, render


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


def gone_sql(datamart: str, table: Table, gone: str) -> str:
    """Create `gone` for the transaction, if absent: the keys, then the `sys_from` of the
    version closed (its primary key in `t_history`); primary key on the keys."""
    keys = sql.SQL(", ").join(ident(k) for k in table.primary_key)
    return render(
        sql.SQL(
            "CREATE TEMP TABLE IF NOT EXISTS {gone} ON COMMIT DROP AS "
            "SELECT {keys}, sys_from FROM {actual} LIMIT 0; "
            "ALTER TABLE {gone} ADD PRIMARY KEY ({keys})"
        ).format(
            gone=sql.SQL(gone), keys=keys, actual=physical_ident(datamart, table.name, "actual")
        )
    )


def _on(table: Table, left: str, right: str) -> sql.Composable:
    return sql.SQL(" AND ").join(
        sql.SQL("{l}.{k} = {r}.{k}").format(l=sql.SQL(left), r=sql.SQL(right), k=ident(k))
        for k in table.primary_key
    )


def _keys(table: Table, prefix: str) -> sql.Composable:
    return sql.SQL(", ").join(sql.SQL(prefix) + ident(k) for k in table.primary_key)


def flip_to_upsert_sql(datamart: str, table: Table, staging: str, gone: str) -> str:
    """Keys an earlier piece deleted and this one upserts: they leave `gone`, and the
    version that delete closed is closed by an upsert. One row: how many flipped."""
    return render(
        sql.SQL(
            "WITH back AS ("
            "DELETE FROM {gone} g USING {staging} s WHERE {g_s} AND s.sys_op = 0 "
            "RETURNING {g_keys}, g.sys_from), "
            "flipped AS ("
            "UPDATE {history} h SET sys_op = 0 FROM back b "
            "WHERE {h_b} AND h.sys_from = b.sys_from RETURNING 1) "
            "SELECT count(*) FROM flipped"
        ).format(
            history=physical_ident(datamart, table.name, "history"),
            staging=sql.SQL(staging),
            gone=sql.SQL(gone),
            g_s=_on(table, "g", "s"),
            h_b=_on(table, "h", "b"),
            g_keys=_keys(table, "g."),
        )
    )


def piece_apply_sql(datamart: str, table: Table, staging: str, gone: str) -> str:
    """`apply_sql.table_apply_sql` for a piece: versions of this delta are replaced, not
    moved; keys closed by a delete are recorded in `gone`; a version an earlier piece
    closed by an upsert is closed by a delete if this piece deletes its key. One row:
    (deleted, upserted, staged, replaced, recorded gone, flipped to a delete)."""
    return render(
        sql.SQL(
            "WITH closed AS ("
            "DELETE FROM {actual} a USING {staging} s WHERE {a_s} "
            "RETURNING {from_actual}, a.sys_from, s.sys_op AS podd_closed_by), "
            "moved AS ("
            "INSERT INTO {history} ({target}) "
            "SELECT {plain}, sys_from, %(prev)s, podd_closed_by FROM closed "
            "WHERE sys_from <> %(delta)s RETURNING sys_op), "
            "recorded AS ("
            "INSERT INTO {gone} SELECT {keys}, sys_from FROM closed "
            "WHERE sys_from <> %(delta)s AND podd_closed_by = 1 RETURNING 1), "
            "flipped AS ("
            "UPDATE {history} h SET sys_op = 1 FROM closed c "
            "WHERE c.sys_from = %(delta)s AND c.podd_closed_by = 1 AND {h_c} "
            "AND h.sys_to = c.sys_from - 1 RETURNING {h_keys}, h.sys_from), "
            "flipped_gone AS (INSERT INTO {gone} SELECT * FROM flipped RETURNING 1), "
            "opened AS ("
            "INSERT INTO {actual} ({target}) "
            "SELECT {from_staging}, %(delta)s, NULL, 0 FROM {staging} s WHERE s.sys_op = 0 "
            "RETURNING 1) "
            "SELECT (SELECT count(*) FROM moved WHERE sys_op = 1), (SELECT count(*) FROM opened), "
            "(SELECT count(*) FROM {staging}), "
            "(SELECT count(*) FROM closed WHERE sys_from = %(delta)s), "
            "(SELECT count(*) FROM recorded), (SELECT count(*) FROM flipped_gone)"
        ).format(
            actual=physical_ident(datamart, table.name, "actual"),
            history=physical_ident(datamart, table.name, "history"),
            staging=sql.SQL(staging),
            gone=sql.SQL(gone),
            a_s=_on(table, "a", "s"),
            h_c=_on(table, "h", "c"),
            h_keys=_keys(table, "h."),
            from_actual=listed(table, "a."),
            target=target_columns(table),
            plain=listed(table, ""),
            keys=_keys(table, ""),
            from_staging=listed(table, "s."),
        )
    )


def flip_to_upsert(
    conn: psycopg.Connection,
    datamart: str,
    table: Table,
    staging: str,
    gone: str,
    params: dict[str, Any],
) -> int:
    """Before a later piece's rows, when `gone` holds keys: the versions earlier pieces
    closed by a delete whose key this piece upserts, closed by an upsert; how many."""
    row = conn.execute(flip_to_upsert_sql(datamart, table, staging, gone), params).fetchone()
    return int(row[0]) if row else 0


def apply_piece_rows(
    conn: psycopg.Connection,
    datamart: str,
    table: Table,
    staging: str,
    gone: str,
    params: dict[str, Any],
    *,
    first: bool,
) -> tuple[int, int, int, int]:
    """The piece's rows applied (`first`: no earlier piece; `gone` is created): (deleted,
    upserted net of versions replaced, staged, keys recorded gone), the versions an earlier
    piece closed by an upsert and this one by a delete counted as deleted and gone."""
    if first:
        conn.execute(gone_sql(datamart, table, gone))
    applied = conn.execute(piece_apply_sql(datamart, table, staging, gone), params).fetchone()
    assert applied is not None
    deleted, opened, staged, replaced, recorded, flipped = (int(v) for v in applied)
    return deleted + flipped, opened - replaced, staged, recorded + flipped
