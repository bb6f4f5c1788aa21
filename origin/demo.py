"""`podd-demo`: the README's main command. A replica agent, driven by the reference origin.

On embedded defaults it starts the Tansu broker and PostgreSQL, runs `replica-agent run` as a
process (local Spark), drives it with the origin driver over the `marketing` datamart (20
deltas of mixed inserts, updates and deletes), then prints a summary, the replica's state
checked against the reference model, and the SQL to look at the replica. `--broker` and
`--replica` point it at an external Kafka and PostgreSQL instead; `--store clickhouse` puts
the replica in an embedded ClickHouse in Prostore's ADQM layout. Deltas continue from what
the replica already holds: a second run adds 20 more.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from importlib import resources
from pathlib import Path

import psycopg

from origin.client import OriginClient
from origin.demo_clickhouse import clickhouse_report
from origin.errors import OriginError
from origin.progress import DeltaProgress
from origin.reference import ReferenceOrigin
from origin.session import DeltaOutcome, SessionOptions
from origin.sources import WorkloadSource, replica_model
from podd_kafka.broker import embedded_broker
from podd_kafka.client import ensure_topics
from podd_kafka.settings import KafkaSettings
from podd_runtime.agent_child import AgentChild, AgentSpec, start_agent
from podd_runtime.dsn import safe_dsn
from podd_runtime.exit_codes import run_command
from protocol.console import log_to_stderr
from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema, quote_ident
from protocol.workload import WorkloadSpec
from replica_store.embedded_pg import replica_dsn
from replica_store.kind import embedded_clickhouse_url
from replica_store.replica_reader import differences

_DEFAULT_SCHEMA = Path(str(resources.files("origin"))).parent / "examples" / "marketing.sql"


@contextmanager
def running_agent(
    args: argparse.Namespace, schema: LogicalSchema, bootstrap: str, dsn: str
) -> Iterator[AgentChild]:
    spec = AgentSpec(
        [schema], bootstrap, dsn, args.data_dir, f"podd-demo-{args.datamart}", args.spark_master
    )
    agent = start_agent(spec, args.data_dir / "agent.log")
    try:
        yield agent
    finally:
        agent.stop()


async def _drive(
    args: argparse.Namespace, source: WorkloadSource, bootstrap: str
) -> list[DeltaOutcome]:
    settings = KafkaSettings(broker=bootstrap)
    async with OriginClient(settings, settings.bootstrap_servers()) as client:
        options = SessionOptions(chunk_rows=args.chunk_rows, state_timeout=20, state_attempts=6)
        driver = ReferenceOrigin(client, source, options, DeltaProgress(args.deltas))
        return await driver.run(args.deltas)


def _query(dsn: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return [tuple(row) for row in conn.execute(sql).fetchall()]


def _report(
    args: argparse.Namespace,
    schema: LogicalSchema,
    source: WorkloadSource,
    dsn: str,
    outcomes: list[DeltaOutcome],
    seconds: float,
) -> int:
    first, last = outcomes[0].delta_num, outcomes[-1].delta_num
    _summary(outcomes, seconds)
    dm = quote_ident(schema.datamart)
    print(f"\nreplica {schema.datamart} ({safe_dsn(dsn)}):")
    for table in schema:
        live = _query(dsn, f"SELECT count(*) FROM {dm}.{quote_ident(table.name + '_actual')}")
        closed = _query(dsn, f"SELECT count(*) FROM {dm}.{quote_ident(table.name + '_history')}")
        print(f"  {table.name:<12} {live[0][0]:>8,} live rows   {closed[0][0]:>8,} closed versions")
    found = differences(dsn, replica_model(source, last), as_of=range(max(0, last - 2), last + 1))
    code = 0
    if not found:
        print(
            f"  equal to the reference model of deltas 0..{last} (seed {args.seed}), "
            f"also as of deltas {max(0, last - 2)}..{last}"
        )
    else:
        code = 1 if first == 0 else 0
        print("  DIFFERS from the reference model: " + "; ".join(found))
        if first > 0:
            print("  (earlier runs may have used another --seed)")
    _print_sql(args, schema, dsn, last)
    return code


def _summary(outcomes: list[DeltaOutcome], seconds: float) -> None:
    rows = sum(o.rows for o in outcomes)
    first, last = outcomes[0].delta_num, outcomes[-1].delta_num
    chunks = sum(o.chunks_sent for o in outcomes)
    print()
    rate = rows / seconds
    print(
        f"applied deltas {first}..{last}: {len(outcomes)} deltas, {rows:,} rows, "
        f"{chunks} delta.in messages in {seconds:.1f} s ({rate:,.0f} rows/s)"
    )
    per_delta = sorted(o.seconds for o in outcomes)
    median, slowest = per_delta[len(per_delta) // 2], per_delta[-1]
    print(
        f"per delta, from its first chunk sent to its delta.in.rs: median {median:.2f} s, "
        f"slowest {slowest:.2f} s (the first delta warms Spark up)"
    )


def _print_sql(args: argparse.Namespace, schema: LogicalSchema, dsn: str, last: int) -> None:
    table = schema.tables[0]
    dm, name = quote_ident(schema.datamart), schema.datamart.replace("'", "''")
    actual, as_of = quote_ident(f"{table.name}_actual"), quote_ident(f"{table.name}_as_of")
    key = ", ".join(quote_ident(k) for k in table.primary_key)
    earlier = max(0, last // 2)
    statements = [  # every name quoted, as anything built from a schema's names
        f"SELECT delta_num, delta_date, applied_at FROM podd_replica.delta_registry "
        f"WHERE datamart = '{name}' ORDER BY delta_num DESC LIMIT 3",
        f"SELECT count(*) FROM {dm}.{actual}",
        f"SELECT count(*) FROM {dm}.{as_of}({earlier})",
        f"SELECT * FROM {dm}.{as_of}({earlier}) ORDER BY {key} LIMIT 3",
    ]
    print("\nlook at the replica (the last statement reads it as of an earlier delta):")
    for sql in statements:
        print(f"  {sql};")
        for row in _query(dsn, sql):
            print("      " + " | ".join(str(v) for v in row))
    if args.replica:
        print("\nwith psql: psql \"$PODD_REPLICA_DSN\" -c '<statement>'")
    else:
        print(f"\nwith psql (starts the embedded PostgreSQL, kept in {args.data_dir}/postgres):")
        command = ["podd-loader", "sql", "--data-dir", str(args.data_dir), "-c", statements[2]]
        print(f"  .venv/bin/{shlex.join(command)}")


def run(args: argparse.Namespace) -> int:
    schema_file: Path = args.schema.resolve()
    schema = parse_schema(schema_file.read_text(), args.datamart)
    if args.datamart not in (None, schema.datamart):
        raise OriginError(f"{schema_file} declares datamart {schema.datamart}, not {args.datamart}")
    args.datamart = schema.datamart
    spec = WorkloadSpec(rows_per_delta=args.rows_per_delta, seed=args.seed)
    source = WorkloadSource(schema, spec, interval=timedelta(hours=1))
    args.data_dir = args.data_dir.resolve()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        bootstrap = args.broker.removeprefix("kafka://") if args.broker else None
        if bootstrap is None:
            print("starting the embedded Kafka broker (Tansu, in memory) ...")
            bootstrap = stack.enter_context(embedded_broker(log_file=args.data_dir / "tansu.log"))
        clickhouse = args.store == "clickhouse"
        if clickhouse:  # the agent opens it: ClickHouse's embedded engine is one process's
            dsn = args.replica or embedded_clickhouse_url(args.data_dir)
        elif not args.replica:
            print(f"starting the embedded PostgreSQL (data in {args.data_dir}/postgres) ...")
        if not clickhouse:
            dsn = stack.enter_context(replica_dsn(args.replica, args.data_dir / "postgres"))
        asyncio.run(ensure_topics(KafkaSettings(broker=bootstrap), [bootstrap]))
        log = args.data_dir / "agent.log"
        print(f"starting the replica agent (Spark {args.spark_master}; its log: {log}) ...")
        agent = stack.enter_context(running_agent(args, schema, bootstrap, dsn))
        agent.wait_ready()
        tables = ", ".join(t.name for t in schema)
        print(
            f"driving {schema.datamart} ({tables}): {args.deltas} deltas of "
            f"{args.rows_per_delta:,} rows, {args.chunk_rows} rows per chunk"
        )
        started = time.perf_counter()
        outcomes = asyncio.run(_drive(args, source, bootstrap))
        seconds = time.perf_counter() - started
        if not outcomes:
            print("the source had no delta to send")
            return 1
        if clickhouse:
            stopped = agent.stop()
            _summary(outcomes, seconds)
            model = replica_model(source, outcomes[-1].delta_num)
            code = clickhouse_report(dsn, model, args.data_dir)
            print(f"\nagent stopped (exit {stopped}); broker stopped")
            return code if stopped == 0 else 1
        code = _report(args, schema, source, dsn, outcomes, seconds)
        stopped = agent.stop()
        print(f"\nagent stopped (exit {stopped}); broker and PostgreSQL stopped")
        return code if stopped == 0 else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="podd-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--schema", type=Path, default=_DEFAULT_SCHEMA, help="Prostore DDL file")
    parser.add_argument("--datamart", help="default: the one the schema file declares")
    parser.add_argument("--deltas", type=int, default=20)
    parser.add_argument("--rows-per-delta", type=int, default=3000)
    parser.add_argument("--chunk-rows", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--broker", help="external Kafka, kafka://HOST:PORT (default: embedded)")
    parser.add_argument(
        "--replica", help="external PostgreSQL DSN, or a ClickHouse URL (default: embedded)"
    )
    parser.add_argument(
        "--store",
        choices=["postgresql", "clickhouse"],
        default="postgresql",
        help="the replica's store (clickhouse: Prostore's ADQM layout, embedded chdb)",
    )
    parser.add_argument("--data-dir", type=Path, default=Path("var/demo"))
    parser.add_argument("--spark-master", default="local[*]")
    args = parser.parse_args(argv)
    log_to_stderr()
    return run_command("podd-demo", lambda: run(args))


if __name__ == "__main__":
    raise SystemExit(main())
