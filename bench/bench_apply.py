"""Benchmark: apply a large delta, beside a plain COPY of the same rows (issue 3).

    python -m bench.bench_apply [--rows 1000000] [--preload 1000000] [--tables 10]
                                [--replica DSN] [--spark-master local[*]] [--json FILE]

Delta 0 pre-loads the replica; delta 1 (70% inserts, 20% updates, 10% deletes) is timed
from `DeltaLoader.load` to its return. In the same run, the floor: the same delta-1 rows,
already encoded, COPYed (binary) into empty unlogged tables on one connection. The driver's
peak memory (this Python process, and the Spark JVM) is sampled during the loads only; the
data is generated in a child process, so the figure is the loader driver's own.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import psycopg

from bench.datagen import bench_schema, stage_delta
from bench.memory import TreeMemory
from protocol.body import decode_body
from replica_store.embedded_pg import replica_dsn
from replica_store.pg_copy import HEADER, TRAILER, copy_kinds, encode_batch
from replica_store.store import ReplicaStore
from replica_store.store_sql import q
from replica_store.transfer import StagedTransfer
from spark_loader.loader import DeltaLoader
from spark_loader.session import build_session
from spark_loader.settings import LoaderSettings


def copy_floor(dsn: str, transfer: StagedTransfer) -> tuple[float, int]:
    """Seconds to COPY the transfer's rows into empty unlogged tables.

    Each table's rows are decoded and encoded first (untimed), then COPYed (timed), one table
    at a time so the benchmark's own buffers stay small.
    """
    schema = bench_schema(transfer.manifest.datamart, len(transfer.manifest.streams))
    floor_schema = f"copy_floor_{uuid.uuid4().hex[:8]}"
    seconds = 0.0
    rows = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {q(floor_schema)}")
        for table in schema:
            kinds = copy_kinds(table)
            parts = [HEADER]
            for _, path in transfer.chunks_of(table.name):
                for batch in decode_body(table, path.read_bytes()):
                    parts.append(encode_batch(kinds, batch))
                    rows += batch.num_rows
            parts.append(TRAILER)
            data = b"".join(parts)
            del parts
            target = f"{q(floor_schema)}.{q(table.name)}"
            columns = ", ".join(f"{q(c.name)} {c.type.to_postgres()}" for c in table.columns)
            conn.execute(f"CREATE UNLOGGED TABLE {target} ({columns}, sys_op int)")
            started = time.perf_counter()
            with conn.cursor().copy(f"COPY {target} FROM STDIN (FORMAT BINARY)") as copy:
                copy.write(data)
            seconds += time.perf_counter() - started
        conn.execute(f"DROP SCHEMA {q(floor_schema)} CASCADE")
    return seconds, rows


def _stage_both(
    root: Path, datamart: str, tables: int, preload: int, rows: int, chunk_rows: int
) -> tuple[Path, Path]:
    schema = bench_schema(datamart, tables)
    first = stage_delta(root, schema, 0, preload, 0, chunk_rows)
    second = stage_delta(root, schema, 1, rows, preload, chunk_rows)
    return first.directory, second.directory


def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = LoaderSettings(spark_master=args.spark_master)
    root = Path(tempfile.mkdtemp(prefix="podd-bench-"))
    schema = bench_schema(f"bench_{uuid.uuid4().hex[:8]}", args.tables)
    print(f"staging: preload {args.preload:,} rows, delta {args.rows:,} rows, {args.tables} tables")
    # Generated in a child process, so this process's memory is the loader driver's alone.
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        dirs = pool.submit(
            _stage_both,
            root,
            schema.datamart,
            args.tables,
            args.preload,
            args.rows,
            args.chunk_rows,
        ).result()
    preload, delta = (StagedTransfer.open(d) for d in dirs)
    results: dict[str, Any] = {"rows": args.rows, "preload": args.preload, "tables": args.tables}
    with replica_dsn(args.replica, root / "pg") as dsn:
        spark = build_session(settings)
        loader = DeltaLoader(ReplicaStore(dsn), spark, settings)
        loader.register(schema)
        with TreeMemory(os.getpid()) as memory:
            started = time.perf_counter()
            loader.load(preload)
            results["preload_seconds"] = time.perf_counter() - started
            started = time.perf_counter()
            applied = loader.load(delta)
            results["apply_seconds"] = time.perf_counter() - started
        results["counts"] = [
            (c.table_name, c.rows_received, c.rows_upserted, c.rows_deleted) for c in applied.tables
        ]
        results["copy_seconds"], copied = copy_floor(dsn, delta)
        assert copied == args.rows, f"copied {copied} rows, expected {args.rows}"
        spark.stop()
    results["ratio"] = results["apply_seconds"] / results["copy_seconds"]
    results["python_driver_peak_mb"] = memory.peaks.python / 2**20
    results["jvm_peak_mb"] = memory.peaks.jvm / 2**20
    results["python_workers_peak_mb"] = memory.peaks.workers / 2**20
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--preload", type=int, default=1_000_000)
    parser.add_argument("--tables", type=int, default=10)
    parser.add_argument("--chunk-rows", type=int, default=1000)
    parser.add_argument("--replica", help="PostgreSQL DSN (default: a fresh embedded server)")
    parser.add_argument("--spark-master", default="local[*]")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    results = run(args)
    print(
        f"apply of {args.rows:,} rows: {results['apply_seconds']:.1f} s "
        f"({args.rows / results['apply_seconds']:,.0f} rows/s)"
    )
    print(f"COPY of the same rows into empty unlogged tables: {results['copy_seconds']:.1f} s")
    print(f"ratio apply/COPY: {results['ratio']:.2f} (target: at most 3)")
    print(f"pre-load of {args.preload:,} rows: {results['preload_seconds']:.1f} s")
    print(
        f"peak memory: Python driver {results['python_driver_peak_mb']:.0f} MB, "
        f"Spark JVM {results['jvm_peak_mb']:.0f} MB, "
        f"Spark's Python workers {results['python_workers_peak_mb']:.0f} MB"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
