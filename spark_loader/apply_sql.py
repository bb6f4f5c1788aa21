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

from protocol.schema import Table
from spark_loader.store_sql import physical, q


def table_apply_sql(datamart: str, table: Table, staging: str) -> str:
    """A statement taking %(prev)s (N - 1) and %(delta)s (N); one row: (deleted, upserted,
    staged)."""
    actual = physical(datamart, table.name, "actual")
    history = physical(datamart, table.name, "history")
    names = [q(c.name) for c in table.columns]
    target = ", ".join([*names, "sys_from", "sys_to", "sys_op"])
    from_actual = ", ".join(f"a.{n}" for n in names)
    plain = ", ".join(names)
    from_staging = ", ".join(f"s.{n}" for n in names)
    on_key = " AND ".join(f"a.{q(k)} = s.{q(k)}" for k in table.primary_key)
    return (
        f"WITH closed AS ("
        f"DELETE FROM {actual} a USING {staging} s WHERE {on_key} "
        f"RETURNING {from_actual}, a.sys_from, s.sys_op AS podd_closed_by), "
        f"moved AS ("
        f"INSERT INTO {history} ({target}) "
        f"SELECT {plain}, sys_from, %(prev)s, podd_closed_by FROM closed "
        f"RETURNING sys_op), "
        f"opened AS ("
        f"INSERT INTO {actual} ({target}) "
        f"SELECT {from_staging}, %(delta)s, NULL, 0 FROM {staging} s WHERE s.sys_op = 0 "
        f"RETURNING 1) "
        f"SELECT (SELECT count(*) FROM moved WHERE sys_op = 1), (SELECT count(*) FROM opened), "
        f"(SELECT count(*) FROM {staging})"
    )
