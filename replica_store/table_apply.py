"""One table's staged rows applied inside a delta's transaction (step 4 of a load), with
the planner settings its size wants, for `DeltaTransaction.apply`."""

from __future__ import annotations

from typing import Any

import psycopg

from protocol.apply_model import TableCounts
from protocol.schema import Table
from replica_store.apply_statements import (
    SEQSCAN_DEFAULT,
    ApplyStatements,
    apply_rows,
    flip_to_upsert,
)
from replica_store.errors import TransientLoadError
from replica_store.layout import Datamart
from replica_store.pieces import Piece, closing_name, gone_name, gone_sql, plus

#: Staging tables with fewer rows are not analysed (2 ms each). Without their statistics,
#: and with t_actual's lagging behind its growth (autovacuum analyses after 10% changed, at
#: most once a minute), the planner can hash-join a few staged keys against a sequential
#: scan of all of t_actual: in a catch-up, 20 ms per table after 150,000 rows, growing with
#: the table. So their apply may only look keys up in t_actual's primary-key index
#: (`KEYED_LOOKUP`): at most this many index probes, whatever the statistics say.
ANALYZE_MIN_ROWS = 10_000
#: For a small staging table: no hash or merge join, inside the apply transaction only.
KEYED_LOOKUP = "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off"
#: Back to the session's own planner settings for a big (analysed) staging table.
PLANNER_DEFAULT = "SET LOCAL enable_hashjoin TO DEFAULT; SET LOCAL enable_mergejoin TO DEFAULT"
#: For the statement that gives back to an upsert the versions earlier pieces of a stream
#: closed by a delete (`replica_store.pieces`): it joins the piece's staged rows with the
#: transaction's table of those keys, then `t_history` by primary key. No sequential scan
#: where an index serves (`t_history` is probed, never scanned), and a hash join of the
#: piece with that table rather than a scan of one for each row of the other.
FLIP_PLANNER = (
    "SET LOCAL enable_seqscan = off; SET LOCAL enable_hashjoin = on; "
    "SET LOCAL enable_mergejoin = off"
)
#: ANALYZE samples 300 rows per unit of target (PostgreSQL's default target, 100: 30,000
#: rows). The apply's plans need little more than the size and that keys are distinct.
ANALYZE_STATISTICS_TARGET = 10


def apply_table(
    conn: psycopg.Connection,
    datamart: Datamart,
    table: Table,
    staged: int,
    rows: int,
    params: dict[str, Any],
    keyed: bool,
    *,
    staging: str | None = None,
) -> tuple[TableCounts, bool]:
    """Apply `table`'s `staged` rows (of `rows` received) in the open transaction; its
    counts, and whether `KEYED_LOOKUP` is now set (`keyed`: whether it was). A table with no
    staged row is left alone (its statement would change nothing); one with many is
    analysed first (`ANALYZE_MIN_ROWS`); one with few is applied by primary-key lookups.
    `staging`: where its rows are (quoted), if not in its staging table."""
    relation = staging or datamart.staging(table.name)
    upserted = deleted = 0
    keyed = _plan_for(conn, relation, staged, keyed)
    if staged:
        statements = ApplyStatements(datamart.name, table, relation)
        applied = apply_rows(conn, datamart.dialect, statements, params)
        _check_found(table, applied.staged, staged)
        upserted, deleted = applied.opened, applied.deleted
    return TableCounts(table.name, rows, upserted, deleted), keyed


def apply_table_piece(
    conn: psycopg.Connection,
    datamart: Datamart,
    table: Table,
    staged: int,
    rows: int,
    params: dict[str, Any],
    keyed: bool,
    *,
    before: Piece | None,
    through: int,
    staging: str | None = None,
) -> tuple[Piece, bool]:
    """`apply_table` for a piece of a stream (its chunks up to `through`; `before`: what
    the transaction holds of the earlier ones, None for the first), `replica_store.pieces`:
    the stream's counts so far, and whether `KEYED_LOOKUP` is now set. The keys it shares
    with earlier pieces are found by primary-key lookups, whatever the piece's size."""
    relation = staging or datamart.staging(table.name)
    gone = gone_name(datamart.id, datamart.position(table.name))
    counts = TableCounts(table.name, rows, 0, 0)
    if before is None:  # the first piece: `gone` must exist for the next
        conn.execute(gone_sql(datamart.distributed, table, gone))
    if not staged:  # nothing to apply
        if before is None:
            return Piece(through, counts), keyed
        return Piece(through, plus(before.counts, counts), before.gone), keyed
    if staged >= ANALYZE_MIN_ROWS:
        _analyze(conn, relation)
    closing = closing_name(datamart.id, datamart.position(table.name))
    statements = ApplyStatements(datamart.name, table, relation, gone, closing)
    to_upsert = 0
    if before is not None and before.gone:  # an earlier piece closed keys by a delete
        conn.execute(FLIP_PLANNER)
        to_upsert = flip_to_upsert(conn, datamart.dialect, statements, params)
        conn.execute(SEQSCAN_DEFAULT)
        keyed = staged < ANALYZE_MIN_ROWS
        conn.execute(KEYED_LOOKUP if keyed else PLANNER_DEFAULT)
    else:
        keyed = _plan_for(conn, relation, staged, keyed, analyzed=True)
    applied = apply_rows(
        conn,
        datamart.dialect,
        statements,
        params,
        first_piece=before is None,
        distributed=datamart.distributed,
    )
    _check_found(table, applied.staged, staged)
    deleted = applied.deleted + applied.flipped - to_upsert
    counts = TableCounts(table.name, rows, applied.opened - applied.replaced, deleted)
    gone_now = applied.recorded + applied.flipped - to_upsert
    if before is not None:
        counts, gone_now = plus(before.counts, counts), gone_now + before.gone
    return Piece(through, counts, gone_now), keyed


def _analyze(conn: psycopg.Connection, relation: str) -> None:
    conn.execute(f"SET LOCAL default_statistics_target = {ANALYZE_STATISTICS_TARGET}")
    conn.execute(f"ANALYZE {relation}")


def _plan_for(
    conn: psycopg.Connection, relation: str, staged: int, keyed: bool, *, analyzed: bool = False
) -> bool:
    """Analyse a big staging table (unless `analyzed`); the planner settings its size
    wants (`KEYED_LOOKUP` for a small one): whether they are keyed now."""
    if staged >= ANALYZE_MIN_ROWS and not analyzed:
        _analyze(conn, relation)
    if staged and keyed != (staged < ANALYZE_MIN_ROWS):
        keyed = not keyed
        conn.execute(KEYED_LOOKUP if keyed else PLANNER_DEFAULT)
    return keyed


def _check_found(table: Table, found: int, staged: int) -> None:
    if found != staged:  # rolled back: the retry stages the table again
        raise TransientLoadError(
            f"staging of {table.name} holds {found} rows, {staged} were "
            "staged: another process changed it during the load"
        )
