"""Reading a replica laid out as REPLICA.md says, and comparing it with the reference model.

Only the contract's layout is assumed: schema = datamart, `<table>_actual` and
`<table>_history` with the logical columns then `sys_from, sys_to, sys_op`. The read as of a
delta is REPLICA.md's own SQL. Names are quoted identifiers from the logical schema.
It shares nothing with the loader's writing side, so the demo, the conformance harness and
the tests can use it to judge the loader.
"""

from __future__ import annotations

from typing import Any

import psycopg

from protocol.apply_model import ReplicaModel, Version, rows_as_of
from protocol.schema import Table, quote_ident
from protocol.types import TypeKind

Versions = tuple[set[Version], set[Version]]


def _table(datamart: str, table: str, kind: str) -> str:
    return f"{quote_ident(datamart)}.{quote_ident(f'{table}_{kind}')}"


def select_list(table: Table) -> str:
    """The table's columns, quoted, for a SELECT that reads values exactly."""
    # real is read as float8: exact, where real's text form would round in Python
    return ", ".join(
        f"{quote_ident(c.name)}::float8" if c.type.kind is TypeKind.FLOAT else quote_ident(c.name)
        for c in table.columns
    )


def read_versions(dsn: str, datamart: str, table: Table) -> Versions:
    """(t_actual, t_history) as reference-model versions."""
    cols = select_list(table)
    out: list[set[Version]] = []
    with psycopg.connect(dsn) as conn:
        for kind in ("actual", "history"):
            rows = conn.execute(
                f"SELECT {cols}, sys_from, sys_to, sys_op FROM {_table(datamart, table.name, kind)}"
            ).fetchall()
            out.append({Version(tuple(r[:-3]), r[-3], r[-2], r[-1]) for r in rows})
    return out[0], out[1]


def read_as_of(dsn: str, datamart: str, table: Table, n: int) -> list[tuple[Any, ...]]:
    """The table as of delta n, by REPLICA.md's SQL (a list: duplicates would show)."""
    cols = select_list(table)
    actual, history = (_table(datamart, table.name, k) for k in ("actual", "history"))
    sql = (
        f"SELECT {cols} FROM {actual} WHERE sys_from <= %(n)s UNION ALL "
        f"SELECT {cols} FROM {history} WHERE sys_from <= %(n)s AND sys_to >= %(n)s"
    )
    with psycopg.connect(dsn) as conn:
        return [tuple(r) for r in conn.execute(sql, {"n": n}).fetchall()]


def differences(dsn: str, model: ReplicaModel, *, as_of: range | None = None) -> list[str]:
    """How the replica differs from the model (empty: equal), per table; with `as_of`, also
    the read as of each of those deltas."""
    found: list[str] = []
    datamart = model.schema.datamart
    for table in model.schema:
        try:
            actual, history = read_versions(dsn, datamart, table)
        except psycopg.Error as exc:
            found.append(f"{table.name}: cannot be read: {str(exc).strip()}")
            continue
        expected = model.tables[table.name]
        for kind, got, want in (
            ("actual", actual, set(expected.actual.values())),
            ("history", history, set(expected.history)),
        ):
            if got != want:
                found.append(
                    f"{table.name}_{kind}: {len(got - want)} unexpected and "
                    f"{len(want - got)} missing row version(s) of {len(want)}"
                )
        for n in as_of or ():
            got_rows = read_as_of(dsn, datamart, table, n)
            want_rows = rows_as_of(expected, n)
            if len(got_rows) != len(want_rows) or set(got_rows) != want_rows:
                found.append(
                    f"{table.name} as of delta {n}: {len(got_rows)} rows read, "
                    f"{len(set(got_rows) ^ want_rows)} differ from the model's {len(want_rows)}"
                )
    return found
