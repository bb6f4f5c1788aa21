"""The replica store in PostgreSQL: creating it, checking it, and reading its registry.

One PostgreSQL schema per datamart holds `t_actual` and `t_history` per table (REPLICA.md)
and a `t_as_of(n)` function per table. The replica's own tables live in `podd_replica`: the
catalog of the logical schema each datamart was built from, the registry of applied deltas,
and unlogged staging tables. All of it is in the same database, so the registry changes in
the same transaction as the tables it describes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from podd_runtime.dsn import safe_dsn
from podd_runtime.lock_file import Hold
from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema, Table
from replica_store.connections import LoaderConnections
from replica_store.delta_transaction import DeltaTransaction
from replica_store.dialect import Dialect, distributes
from replica_store.errors import StoreMismatchError
from replica_store.layout import Datamart
from replica_store.live_tables import check_live_tables
from replica_store.ownership import DatamartOwnership
from replica_store.registry import RegistryEntry, read_registry, registry_entry
from replica_store.replica_reader import read_as_of
from replica_store.store_sql import (
    MAX_IDENTIFIER_BYTES,
    META_SCHEMA,
    as_of_function_ident,
    create_staging_sql,
    datamart_lock_key,
    ident,
    meta_ddl,
    q,
    staging_name,
    store_ddl,
)
from replica_store.transfer import TransferManifest

_STORE_LOCK = 0x5_0DD_5702  # advisory lock serialising store creation (the catalog)


def _lock_datamart(conn: psycopg.Connection, datamart: str) -> None:
    """The datamart's lock (a load holds it while it stages and applies), then the store's:
    a schema change never empties staging tables that a load is filling or reading."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (datamart_lock_key(datamart),))
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_STORE_LOCK,))


class ReplicaStore:
    """Access to the replica database at `dsn`, whose statements are `dialect`'s."""

    def __init__(self, dsn: str, dialect: Dialect = Dialect.POSTGRESQL) -> None:
        self.dsn = dsn
        self.dialect = dialect
        #: The sessions loads take and give back (kept between loads).
        self.sessions = LoaderConnections(dsn)

    def __repr__(self) -> str:
        return f"ReplicaStore({safe_dsn(self.dsn)})"

    @contextmanager
    def connect(self, *, autocommit: bool = False) -> Iterator[psycopg.Connection]:
        with psycopg.connect(self.dsn, autocommit=autocommit) as conn:
            yield conn

    # --- creating and checking -----------------------------------------------------------
    def ensure(self, schema: LogicalSchema) -> Datamart:
        """Create the datamart's store if needed; refuse if existing tables disagree."""
        with self.connect() as conn, conn.transaction():
            distributed = self._distributes(conn)
            _lock_datamart(conn, schema.datamart)
            conn.execute(meta_ddl(distributed))
            check_live_tables(conn, schema)
            for statement in store_ddl(distributed, schema):
                conn.execute(statement)
            datamart_id = _register_catalog(conn, schema)
            conn.execute(  # the staging tables are made anew: they hold no stream
                f"DELETE FROM {q(META_SCHEMA)}.staged_stream WHERE datamart = %s",
                (schema.datamart,),
            )
            for position, table in enumerate(schema.tables):
                conn.execute(f"DROP TABLE IF EXISTS {staging_name(datamart_id, position)}")
                conn.execute(create_staging_sql(distributed, datamart_id, position, table))
        return Datamart(schema, datamart_id, self.dialect, distributed)

    def begin_delta(self, datamart: Datamart, manifest: TransferManifest) -> DeltaTransaction:
        """Delta N's transaction, not yet locked (`DeltaTransaction.lock`)."""
        return DeltaTransaction(self.sessions, datamart, manifest)

    def read_as_of(self, datamart: str, table: Table, delta_num: int) -> list[tuple[Any, ...]]:
        """The table's rows as of delta `delta_num` (REPLICA.md's query)."""
        return read_as_of(self.dsn, datamart, table, delta_num)

    def hold(self, datamarts: Sequence[str], role: str, lock_file: Path | None = None) -> Hold:
        """This process's hold on the datamarts (one writer each): `acquire` it, or `with`."""
        return DatamartOwnership(self.dsn, datamarts, lock_file, role)

    def close(self) -> None:
        """Close the sessions kept between loads."""
        self.sessions.close()

    def _distributes(self, conn: psycopg.Connection) -> bool:
        """Whether this server distributes tables; a Greenplum server with the `postgresql`
        dialect is refused (it cannot run that dialect's apply)."""
        row = conn.execute("SELECT version()").fetchone()
        version = str(row[0]) if row else ""
        if self.dialect is Dialect.POSTGRESQL and "Greenplum" in version:
            raise StoreMismatchError(
                "the replica is a Greenplum (ADB) server: set PODD_STORE_DIALECT=adb"
            )
        return distributes(self.dialect, version)

    def stored_schema(self, datamart: str) -> LogicalSchema | None:
        """The logical schema the datamart's store was built from, from the catalog."""
        with self.connect() as conn:
            exists = conn.execute("SELECT to_regclass(%s)", (f"{META_SCHEMA}.datamart",)).fetchone()
            if not exists or exists[0] is None:
                return None
            row = conn.execute(
                f"SELECT schema_ddl FROM {q(META_SCHEMA)}.datamart WHERE datamart = %s",
                (datamart,),
            ).fetchone()
        return None if row is None else parse_schema(row[0])

    def datamarts(self) -> list[str]:
        """The datamarts that have a store here."""
        with self.connect() as conn:
            exists = conn.execute("SELECT to_regclass(%s)", (f"{META_SCHEMA}.datamart",)).fetchone()
            if not exists or exists[0] is None:
                return []
            rows = conn.execute(f"SELECT datamart FROM {q(META_SCHEMA)}.datamart ORDER BY id")
            return [str(r[0]) for r in rows]

    # --- schema history (a restore from a backup's changelog) ------------------------------
    def retire_table(self, datamart: str, table: str, before_delta: int) -> list[str]:
        """A dropped table stops being applied; its replica tables are kept, renamed to
        `<t>_dropped_before_<n>_actual` (and `_history`), never deleted. Idempotent: a
        table already retired (or never created) is left alone. Returns the new names."""
        renamed: list[str] = []
        with self.connect() as conn, conn.transaction():
            _lock_datamart(conn, datamart)
            conn.execute(meta_ddl(self._distributes(conn)))
            for kind in ("actual", "history"):
                old = f"{table}_{kind}"
                new = f"{table}_dropped_before_{before_delta}_{kind}"
                if len(new.encode()) > MAX_IDENTIFIER_BYTES:
                    raise StoreMismatchError(
                        f"cannot keep dropped table {datamart}.{old}: {new} is longer than "
                        f"PostgreSQL's {MAX_IDENTIFIER_BYTES}-byte names"
                    )
                exists = conn.execute(
                    "SELECT to_regclass(%s)", (f"{q(datamart)}.{q(old)}",)
                ).fetchone()
                if exists is None or exists[0] is None:
                    continue
                conn.execute(
                    sql.SQL("ALTER TABLE {} RENAME TO {}").format(ident(datamart, old), ident(new))
                )
                conn.execute(
                    f"INSERT INTO {q(META_SCHEMA)}.retired_table "
                    "(datamart, table_name, kind, renamed_to, before_delta) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    (datamart, table, kind, new, before_delta),
                )
                renamed.append(f"{datamart}.{new}")
            conn.execute(
                sql.SQL("DROP FUNCTION IF EXISTS {}(bigint)").format(
                    as_of_function_ident(datamart, table)
                )
            )
            conn.execute(
                f"DELETE FROM {q(META_SCHEMA)}.catalog WHERE datamart = %s AND table_name = %s",
                (datamart, table),
            )
        return renamed

    def record_views(self, datamart: str, views: list[tuple[str, bool, str, int]]) -> None:
        """The datamart's views now: (name, materialized, Prostore SQL, changeNum) each.
        They are recorded, not created: their SQL is Prostore's dialect and holds no data."""
        with self.connect() as conn, conn.transaction():
            conn.execute(meta_ddl(self._distributes(conn)))
            conn.execute(f"DELETE FROM {q(META_SCHEMA)}.view WHERE datamart = %s", (datamart,))
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {q(META_SCHEMA)}.view VALUES (%s, %s, %s, %s, %s)",
                    [(datamart, *view) for view in views],
                )

    def views(self, datamart: str) -> list[tuple[str, bool, str, int]]:
        with self.connect() as conn:
            exists = conn.execute("SELECT to_regclass(%s)", (f"{META_SCHEMA}.view",)).fetchone()
            if not exists or exists[0] is None:
                return []
            rows = conn.execute(
                f"SELECT view_name, materialized, query, change_num FROM {q(META_SCHEMA)}.view "
                "WHERE datamart = %s ORDER BY change_num",
                (datamart,),
            ).fetchall()
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    # --- the registry ----------------------------------------------------------------------
    def registry(self, datamart: str) -> list[RegistryEntry]:
        with self.connect() as conn:
            return read_registry(conn, datamart)

    def applied(self, datamart: str, delta_num: int) -> RegistryEntry | None:
        with self.connect() as conn:
            return registry_entry(conn, datamart, delta_num)

    def last_applied(self, datamart: str) -> RegistryEntry | None:
        with self.connect() as conn:
            return registry_entry(conn, datamart, None)


def empty_staging(
    conn: psycopg.Connection, tables: list[str], *, deleting: Collection[str] = ()
) -> None:
    """Empty these (quoted) staging tables, which an earlier load leaves full: one query
    finds those holding rows, and only they are truncated (TRUNCATE of ten costs 17 ms).
    Those in `deleting` are read by a transaction still open (an open apply's: TRUNCATE
    would wait for its end), and are emptied by DELETE."""
    if not tables:
        return
    probe = ", ".join(f"EXISTS (SELECT FROM {t})" for t in tables)
    held = conn.execute(f"SELECT {probe}").fetchone()
    assert held is not None
    dirty = [t for t, has_rows in zip(tables, held, strict=True) if has_rows]
    for table in (t for t in dirty if t in deleting):
        conn.execute(f"DELETE FROM {table}")
    if truncated := [t for t in dirty if t not in deleting]:
        conn.execute(f"TRUNCATE {', '.join(truncated)}")


def _register_catalog(conn: psycopg.Connection, schema: LogicalSchema) -> int:
    meta = q(META_SCHEMA)
    row = conn.execute(
        f"SELECT id FROM {meta}.datamart WHERE datamart = %s",
        (schema.datamart,),
    ).fetchone()
    if row is None:  # no RETURNING: ADB's tables may be append-optimized
        conn.execute(
            f"INSERT INTO {meta}.datamart (datamart, schema_ddl) VALUES (%s, %s)",
            (schema.datamart, schema.to_ddl()),
        )
        row = conn.execute(
            f"SELECT id FROM {meta}.datamart WHERE datamart = %s", (schema.datamart,)
        ).fetchone()
    else:
        conn.execute(
            f"UPDATE {meta}.datamart SET schema_ddl = %s WHERE datamart = %s",
            (schema.to_ddl(), schema.datamart),
        )
    assert row is not None
    conn.execute(f"DELETE FROM {meta}.catalog WHERE datamart = %s", (schema.datamart,))
    with conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {meta}.catalog VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (
                    schema.datamart,
                    table.name,
                    t_pos,
                    c_pos,
                    column.name,
                    column.type.to_prostore(),
                    column.not_null,
                    table.primary_key.index(column.name)
                    if column.name in table.primary_key
                    else None,
                )
                for t_pos, table in enumerate(schema.tables)
                for c_pos, column in enumerate(table.columns)
            ],
        )
    return int(row[0])
