"""One table's staged rows applied inside a delta's transaction (step 4 of a load), with
the planner settings its size wants. Used by the loader's apply and by an apply opened
while the delta still arrives (`spark_loader.open_apply`)."""

from __future__ import annotations

from typing import Any

import psycopg

from protocol.apply_model import TableCounts
from protocol.schema import Table
from spark_loader.apply_sql import table_apply_sql
from spark_loader.errors import TransientLoadError
from spark_loader.store import Datamart

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
    if staged >= ANALYZE_MIN_ROWS:
        conn.execute(f"SET LOCAL default_statistics_target = {ANALYZE_STATISTICS_TARGET}")
        conn.execute(f"ANALYZE {relation}")
    if staged:
        if keyed != (staged < ANALYZE_MIN_ROWS):
            keyed = not keyed
            conn.execute(KEYED_LOOKUP if keyed else PLANNER_DEFAULT)
        sql = table_apply_sql(datamart.name, table, relation)
        applied = conn.execute(sql, params).fetchone()
        assert applied is not None
        deleted, upserted, found = applied
        if found != staged:  # rolled back: the retry stages the table again
            raise TransientLoadError(
                f"staging of {table.name} holds {found} rows, {staged} were "
                "staged: another process changed it during the load"
            )
    return TableCounts(table.name, rows, upserted, deleted), keyed
