"""`podd-loader`: apply a staged transfer by hand (recovery), and print the registry.

    podd-loader apply TRANSFER_DIR [--schema FILE.sql] [--replica DSN]
    podd-loader registry --datamart NAME [--replica DSN] [--json]
    podd-loader sql [--replica DSN] [-c SQL ...]     (psql on the replica)

Without --replica (or PODD_REPLICA_DSN) it uses the embedded PostgreSQL in
DATA_DIR/postgres. Without --schema, the schema is the one the replica's catalog stored.
Exit status: 0 applied (or already applied), 2 rejected with a protocol error code,
1 the load failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from podd_runtime.dsn import safe_dsn, split_password
from podd_runtime.exit_codes import run_command
from protocol.console import log_to_stderr
from protocol.ddl import parse_schema
from protocol.sequence import expected_next
from replica_store.embedded_pg import psql_binary, replica_for
from replica_store.store import ReplicaStore
from spark_loader.settings import LoaderSettings


def _settings(args: argparse.Namespace) -> LoaderSettings:
    overrides: dict[str, Any] = {}
    if args.replica:
        overrides["replica_dsn"] = args.replica
    if args.data_dir:
        overrides["data_dir"] = args.data_dir
    if getattr(args, "staging_dir", None):
        overrides["staging_dir"] = args.staging_dir
    if getattr(args, "spark_master", None):
        overrides["spark_master"] = args.spark_master
    return LoaderSettings(**overrides)


def _apply(args: argparse.Namespace) -> int:
    # Spark and the loader load only for this command: `registry` stays light.
    from replica_store.ownership import DatamartOwnership  # noqa: PLC0415
    from replica_store.transfer import StagedTransfer  # noqa: PLC0415
    from spark_loader.loader import DeltaLoader  # noqa: PLC0415
    from spark_loader.session import build_session  # noqa: PLC0415

    settings = _settings(args)
    transfer = StagedTransfer.open(args.transfer)
    with replica_for(settings) as dsn:
        store = ReplicaStore(dsn, settings.store_dialect)
        if args.schema:
            schema = parse_schema(args.schema.read_text(), transfer.manifest.datamart)
        else:
            stored = store.stored_schema(transfer.manifest.datamart)
            if stored is None:
                print(f"datamart {transfer.manifest.datamart} has no store yet: give --schema")
                return 2
            schema = stored
        # refused while an agent or a restore writes the datamart
        with DatamartOwnership(dsn, [schema.datamart], None, "podd-loader apply"):
            spark = build_session(settings)
            try:
                loader = DeltaLoader(store, spark, settings)
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
    with replica_for(settings) as dsn:
        entries = ReplicaStore(dsn, settings.store_dialect).registry(args.datamart)
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


def _sql(args: argparse.Namespace) -> int:
    """psql on the replica: interactive, or the `-c` statements; the embedded server runs
    for as long as psql does (and stays up if something else started it)."""
    settings = _settings(args)
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
    sql = commands.add_parser("sql", help="psql on the replica")
    sql.add_argument("-c", dest="command_sql", action="append", help="run this SQL and exit")
    for command in (apply, registry, sql):
        command.add_argument("--replica", help="PostgreSQL DSN (default: embedded)")
        command.add_argument("--data-dir", type=Path, help="where the embedded server keeps data")
    args = parser.parse_args(argv)
    # Logs go to stderr: stdout carries the command's own output.
    log_to_stderr()
    work = {"sql": _sql, "apply": _apply, "registry": _registry}[args.command]
    return run_command("podd-loader", lambda: work(args))


if __name__ == "__main__":
    raise SystemExit(main())
