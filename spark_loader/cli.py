"""`podd-loader`: apply a staged transfer by hand (recovery), print the registry, read the
replica.

    podd-loader apply TRANSFER_DIR [--schema FILE.sql] [--replica DSN|URL] [--store KIND]
    podd-loader registry --datamart NAME [--replica DSN|URL] [--json]
    podd-loader dump --datamart NAME [--as-of N] [--format jsonl]   (every row, as JSON lines)
    podd-loader sql [--replica DSN|URL] [-c SQL ...]  (psql; on ClickHouse, the -c statements)

Without --replica (or PODD_REPLICA_DSN) it uses the embedded PostgreSQL in
DATA_DIR/postgres, or with --store clickhouse the embedded ClickHouse in DATA_DIR/clickhouse;
--replica chdb:///DIR or clickhouse://USER@HOST:8123 chooses ClickHouse by itself. Without
--schema, the schema is the one the replica's catalog stored.
Exit status: 0 applied (or already applied), 2 rejected with a protocol error code,
1 the load failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from podd_runtime.dsn import safe_dsn, split_password
from podd_runtime.exit_codes import run_command
from protocol.console import log_to_stderr
from protocol.ddl import parse_schema
from protocol.sequence import expected_next
from replica_store.dump import dump_lines
from replica_store.embedded_pg import psql_binary, replica_for
from replica_store.kind import StoreKind
from spark_loader.replica_choice import open_store
from spark_loader.settings import LoaderSettings


def _settings(args: argparse.Namespace) -> LoaderSettings:
    overrides: dict[str, Any] = {}
    if args.replica:
        overrides["replica_dsn"] = args.replica
    if args.store:
        overrides["store"] = args.store
    if args.data_dir:
        overrides["data_dir"] = args.data_dir
    if getattr(args, "staging_dir", None):
        overrides["staging_dir"] = args.staging_dir
    if getattr(args, "spark_master", None):
        overrides["spark_master"] = args.spark_master
    return LoaderSettings(**overrides)


def _apply(args: argparse.Namespace) -> int:
    # Spark and the loader load only for this command: `registry` stays light.
    from replica_store.transfer import StagedTransfer  # noqa: PLC0415
    from spark_loader.replica_choice import hold_for, loader_for  # noqa: PLC0415
    from spark_loader.session import build_session  # noqa: PLC0415

    settings = _settings(args)
    transfer = StagedTransfer.open(args.transfer)
    with open_store(settings) as (store, dsn):
        if args.schema:
            schema = parse_schema(args.schema.read_text(), transfer.manifest.datamart)
        else:
            stored = store.stored_schema(transfer.manifest.datamart)
            if stored is None:
                print(f"datamart {transfer.manifest.datamart} has no store yet: give --schema")
                return 2
            schema = stored
        # refused while an agent or a restore writes the datamart
        with hold_for(store, dsn, [schema.datamart], None, "podd-loader apply"):
            spark = build_session(settings)
            try:
                loader = loader_for(store, dsn, spark, settings)
                try:
                    loader.register(schema)
                    loader.probe_executors()
                    result = loader.load(transfer)
                finally:
                    loader.close()
            finally:
                spark.stop()
    status = "already applied" if result.already_applied else "applied"
    print(f"delta {result.delta_num} of {result.datamart} {status} at {result.applied_at}")
    for counts in result.tables:
        print(
            f"  {counts.table_name}: received {counts.rows_received}, "
            f"upserted {counts.rows_upserted}, deleted {counts.rows_deleted}"
        )
    return 0


def _registry(args: argparse.Namespace) -> int:
    settings = _settings(args)
    with open_store(settings) as (store, _):
        entries = store.registry(args.datamart)
    if args.json:
        print(json.dumps([asdict(e) for e in entries], default=str, indent=1))
        return 0
    if not entries:
        first = expected_next(None)
        print(f"datamart {args.datamart}: no delta applied (the next expected is {first})")
        return 0
    print(f"{'delta':>6}  {'delta date (UTC)':<26}  {'applied at':<32}  rows  requestId")
    for e in entries:
        rows = sum(t.rows_received for t in e.tables)
        print(
            f"{e.delta_num:>6}  {e.delta_date.isoformat():<26}  {e.applied_at.isoformat():<32}"
            f"  {rows:>4}  {e.request_id}"
        )
    print(f"next expected delta: {expected_next(entries[-1].delta_num)}")
    return 0


def _dump(args: argparse.Namespace) -> int:
    """Every row of the datamart as of a delta (default: the last applied), one JSON line
    each: the same from either store after the same deltas."""
    settings = _settings(args)
    with open_store(settings) as (store, _):
        schema = store.stored_schema(args.datamart)
        if schema is None:
            print(f"datamart {args.datamart} has no store here", file=sys.stderr)
            return 2
        as_of = args.as_of
        if as_of is None:
            last = store.last_applied(args.datamart)
            if last is None:
                return 0  # no delta applied: no row
            as_of = last.delta_num
        for line in dump_lines(store, schema, as_of):
            print(line)
    return 0


def _clickhouse_sql(settings: LoaderSettings, statements: Sequence[str]) -> int:
    """The `-c` statements on a ClickHouse replica, each result tab-separated."""
    if not statements:
        print("give the statements with -c (no interactive ClickHouse client here)")
        return 1
    with open_store(settings) as (store, _):
        for statement in statements:
            for row in store.client.query(statement).result_rows:
                print("\t".join("\\N" if v is None else str(v) for v in row))
    return 0


def _sql(args: argparse.Namespace) -> int:
    """psql on the replica: interactive, or the `-c` statements; the embedded server runs
    for as long as psql does (and stays up if something else started it)."""
    settings = _settings(args)
    if settings.store is StoreKind.CLICKHOUSE:
        return _clickhouse_sql(settings, args.command_sql or ())
    psql = psql_binary()
    with replica_for(settings) as dsn:
        if psql is None:
            print(f"no psql here; connect any PostgreSQL client to {safe_dsn(dsn)}")
            return 1
        # The password goes to psql in its environment, never on its command line.
        bare, password = split_password(dsn)
        command = [psql, "-X", "--pset=pager=off", bare]
        for statement in args.command_sql or ():
            command += ["-c", statement]
        env = {**os.environ, **({"PGPASSWORD": password} if password else {})}
        return subprocess.call(command, env=env)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="podd-loader", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    apply = commands.add_parser("apply", help="apply a staged transfer directory")
    apply.add_argument("transfer", type=Path)
    apply.add_argument("--schema", type=Path, help="Prostore DDL of the datamart")
    apply.add_argument("--spark-master", help="e.g. local[*] or spark://host:7077")
    apply.add_argument(
        "--staging-dir", type=Path, help="read by the executors too (default DATA_DIR/staging)"
    )
    registry = commands.add_parser("registry", help="print the applied deltas")
    registry.add_argument("--datamart", required=True)
    registry.add_argument("--json", action="store_true")
    dump = commands.add_parser("dump", help="print every row as of a delta, as JSON lines")
    dump.add_argument("--datamart", required=True)
    dump.add_argument("--as-of", type=int, help="a delta number (default: the last applied)")
    dump.add_argument("--format", choices=["jsonl"], default="jsonl")
    sql = commands.add_parser("sql", help="psql on the replica")
    sql.add_argument("-c", dest="command_sql", action="append", help="run this SQL and exit")
    for command in (apply, registry, dump, sql):
        command.add_argument(
            "--replica", help="PostgreSQL DSN, or chdb:///DIR, clickhouse://USER@HOST:8123"
        )
        command.add_argument("--store", choices=[k.value for k in StoreKind])
        command.add_argument("--data-dir", type=Path, help="where the embedded server keeps data")
    args = parser.parse_args(argv)
    # Logs go to stderr: stdout carries the command's own output.
    log_to_stderr()
    work = {"sql": _sql, "apply": _apply, "registry": _registry, "dump": _dump}[args.command]
    return run_command("podd-loader", lambda: work(args))


if __name__ == "__main__":
    raise SystemExit(main())
