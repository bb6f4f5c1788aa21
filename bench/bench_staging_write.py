"""Benchmark: how to write staging from the executors: binary COPY per partition, or Spark's
JDBC writer (batched inserts). Same rows, same database, one run.

    python -m bench.bench_staging_write [--rows 500000] [--jdbc-jar /usr/share/java/postgresql.jar]

The deduplicated rows are computed once and cached, so only the write is timed. JDBC writes
the physical encodings (timestamps as bigint microseconds) into a table typed so; COPY writes
the replica's own staging types.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

from bench.datagen import bench_schema, stage_delta
from bench.typed_staging import (
    RECEIVED,
    decoded_rows,
    last_row_per_key,
    partition_stager,
    stage_rows,
)
from spark_loader.embedded_pg import replica_dsn
from spark_loader.session import build_session
from spark_loader.settings import LoaderSettings
from spark_loader.store_sql import q

DEFAULT_JAR = Path("/usr/share/java/postgresql.jar")  # Debian: libpostgresql-jdbc-java


def jdbc_url(dsn: str) -> tuple[str, dict[str, str]]:
    parts = conninfo_to_dict(dsn)
    url = f"jdbc:postgresql://{parts.get('host', 'localhost')}:{parts.get('port', 5432)}/"
    url += str(parts.get("dbname", "postgres"))
    props = {"user": str(parts.get("user", "postgres")), "driver": "org.postgresql.Driver"}
    if parts.get("password"):
        props["password"] = str(parts["password"])
    props |= {"batchsize": "10000", "reWriteBatchedInserts": "true"}
    return url, props


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--replica", help="PostgreSQL DSN (default: a fresh embedded server)")
    parser.add_argument("--jdbc-jar", type=Path, default=DEFAULT_JAR)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="podd-bench-"))
    schema = bench_schema(f"bench_{uuid.uuid4().hex[:8]}", 1)
    table = schema.tables[0]
    transfer = stage_delta(root, schema, 0, args.rows, 0, 1000)
    has_jar = args.jdbc_jar.is_file()
    conf = {"spark.jars": str(args.jdbc_jar)} if has_jar else {}
    spark = build_session(LoaderSettings(spark_conf=conf))
    chunks = [(n, str(p)) for n, p in transfer.chunks_of(table.name)]
    rows = last_row_per_key(table, decoded_rows(spark, table, chunks)).cache()
    print(f"{rows.count():,} rows to write, {rows.rdd.getNumPartitions()} partitions")
    with replica_dsn(args.replica, root / "pg") as dsn:
        cols = ", ".join(f"{q(c.name)} {c.type.to_postgres()}" for c in table.columns)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE UNLOGGED TABLE bench_copy ({cols}, sys_op int)")
            conn.execute(
                "CREATE UNLOGGED TABLE bench_jdbc (c0 bigint, c1 bigint, c2 varchar(256), "
                "c3 bigint, c4 bigint, c5 varchar(256), sys_op int)"
            )
        started = time.perf_counter()
        staged, _ = stage_rows(rows, partition_stager(dsn, "bench_copy", table))
        copy_seconds = time.perf_counter() - started
        print(
            f"binary COPY per partition: {copy_seconds:.2f} s, {staged / copy_seconds:,.0f} rows/s"
        )
        if has_jar:
            url, props = jdbc_url(dsn)
            started = time.perf_counter()
            rows.drop(RECEIVED).write.jdbc(url, "bench_jdbc", mode="append", properties=props)
            jdbc_seconds = time.perf_counter() - started
            rate = staged / jdbc_seconds
            print(f"Spark JDBC writer:         {jdbc_seconds:.2f} s, {rate:,.0f} rows/s")
            print(f"JDBC / COPY: {jdbc_seconds / copy_seconds:.2f}")
        else:
            print(f"no JDBC driver at {args.jdbc_jar}: the JDBC writer was not measured")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
