"""The statements that apply one table's staged rows (PROTOCOL.md, "applying delta N").

Staging holds one row per key (the last of the delta). In order:
1. versions closed by a delete move to history with `sys_op = 1` (their count: rowsDeleted);
2. versions closed by an upsert move to history with `sys_op = 0`;
3. every current version of a staged key leaves `t_actual`;
4. upserts open new versions at `sys_from = N` (their count: rowsUpserted).
A delete of a key with no current version matches nothing in 1-3 and is skipped by 4.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.schema import Table
from spark_loader.store_sql import physical, q


@dataclass(frozen=True)
class TableApply:
    close_deleted: str
    close_updated: str
    remove_current: str
    open_versions: str


def table_apply_sql(datamart: str, table: Table, staging: str) -> TableApply:
    """Statements taking %(prev)s (N - 1) and %(delta)s (N) as parameters."""
    actual = physical(datamart, table.name, "actual")
    history = physical(datamart, table.name, "history")
    names = [q(c.name) for c in table.columns]
    target = ", ".join([*names, "sys_from", "sys_to", "sys_op"])
    from_actual = ", ".join(f"a.{n}" for n in names)
    from_staging = ", ".join(f"s.{n}" for n in names)
    on_key = " AND ".join(f"a.{q(k)} = s.{q(k)}" for k in table.primary_key)

    def close(sys_op: int) -> str:
        return (
            f"INSERT INTO {history} ({target}) "
            f"SELECT {from_actual}, a.sys_from, %(prev)s, {sys_op} "
            f"FROM {actual} a JOIN {staging} s ON {on_key} WHERE s.sys_op = {sys_op}"
        )

    return TableApply(
        close_deleted=close(1),
        close_updated=close(0),
        remove_current=f"DELETE FROM {actual} a USING {staging} s WHERE {on_key}",
        open_versions=(
            f"INSERT INTO {actual} ({target}) "
            f"SELECT {from_staging}, %(delta)s, NULL, 0 FROM {staging} s WHERE s.sys_op = 0"
        ),
    )
