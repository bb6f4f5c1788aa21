"""Which statements the store sends: PostgreSQL's, or those an ADB (Greenplum 6 and 7) cluster
also accepts (docs/contracts/REPLICA.md, "Statements").

Both give the same tables. Where they differ (the apply's statements, `DISTRIBUTED BY` on
the tables the store creates on a Greenplum server) the choice is made here and in
`apply_statements`, nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from psycopg import sql


class Dialect(StrEnum):
    #: One writable-CTE statement per table's apply: one pass over staging and `t_actual`.
    POSTGRESQL = "postgresql"
    #: No writable CTE, no `ON CONFLICT`, no `RETURNING`; tables `DISTRIBUTED BY` their key.
    ADB = "adb"


def distributes(dialect: Dialect, server_version: str) -> bool:
    """Whether tables are created `DISTRIBUTED BY`: on a Greenplum server (ADB). The `adb`
    dialect on a PostgreSQL server (its tests) sends the same statements without the clause,
    which PostgreSQL does not have. A Greenplum server refuses the `postgresql` dialect's
    apply: the caller refuses that pairing before anything is sent."""
    return dialect is Dialect.ADB and "Greenplum" in server_version


def distributed_by(distributed: bool, columns: Sequence[str]) -> sql.Composable:
    """The clause that ends a `CREATE TABLE` on a Greenplum server (else empty)."""
    if not distributed:
        return sql.SQL("")
    names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    return sql.SQL(" DISTRIBUTED BY ({})").format(names)
