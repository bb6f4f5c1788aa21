"""The statement that applies one table's staged rows (PROTOCOL.md, "applying delta N").

Staging holds one row per key (the last of the delta). One statement, one pass:
1. every current version of a staged key leaves `t_actual` (`DELETE … RETURNING`);
2. those versions move to `t_history`, closed at `sys_to = N - 1` with the staged row's
   `sys_op` (1: closed by a delete, counted as rowsDeleted; 0: closed by an upsert);
3. upserts open new versions at `sys_from = N` (their count: rowsUpserted).
A delete of a key with no current version matches nothing in 1-2 and is skipped by 3.
The new versions may reuse keys the same statement deleted: PostgreSQL's unique check
sees those rows deleted by this transaction. The statement returns (deleted, upserted,
staged): `staged`, the rows staging holds as the statement sees it, lets the loader check
that what it applied is what it staged (a table emptied by another process under it
would otherwise apply nothing, and be answered OK).
"""

from __future__ import annotations

from psycopg import sql

from protocol.schema import Table
from replica_store.store_sql import ident, physical_ident, render


def listed(table: Table, prefix: str) -> sql.Composable:
    """The table's logical columns, each prefixed (`a.`, `s.` or nothing)."""
    return sql.SQL(", ").join(sql.SQL(prefix) + ident(c.name) for c in table.columns)


def target_columns(table: Table) -> sql.Composable:
    """What a version row holds: the logical columns, then the system ones."""
    system = [sql.SQL("sys_from"), sql.SQL("sys_to"), sql.SQL("sys_op")]
    return sql.SQL(", ").join([*(ident(c.name) for c in table.columns), *system])


def table_apply_sql(datamart: str, table: Table, staging: str) -> str:
    """A statement taking %(prev)s (N - 1) and %(delta)s (N); one row: (deleted, upserted,
    staged). `staging`: a staging table's name as `store_sql.staging_name` renders it."""
    on_key = sql.SQL(" AND ").join(
        sql.SQL("a.{k} = s.{k}").format(k=ident(k)) for k in table.primary_key
    )
    return render(
        sql.SQL(
            "WITH closed AS ("
            "DELETE FROM {actual} a USING {staging} s WHERE {on_key} "
            "RETURNING {from_actual}, a.sys_from, s.sys_op AS podd_closed_by), "
            "moved AS ("
            "INSERT INTO {history} ({target}) "
            "SELECT {plain}, sys_from, %(prev)s, podd_closed_by FROM closed "
            "RETURNING sys_op), "
            "opened AS ("
            "INSERT INTO {actual} ({target}) "
            "SELECT {from_staging}, %(delta)s, NULL, 0 FROM {staging} s WHERE s.sys_op = 0 "
            "RETURNING 1) "
            "SELECT (SELECT count(*) FROM moved WHERE sys_op = 1), (SELECT count(*) FROM opened), "
            "(SELECT count(*) FROM {staging})"
        ).format(
            actual=physical_ident(datamart, table.name, "actual"),
            history=physical_ident(datamart, table.name, "history"),
            staging=sql.SQL(staging),
            on_key=on_key,
            from_actual=listed(table, "a."),
            target=target_columns(table),
            plain=listed(table, ""),
            from_staging=listed(table, "s."),
        )
    )
