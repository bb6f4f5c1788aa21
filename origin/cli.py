"""`podd-origin`: the reference origin PODD driver.

    podd-origin run --broker kafka://HOST:PORT --datamart NAME --schema FILE.sql
                    [--deltas N] [--source-dir DIR | workload flags] [--chunk-rows 1000]
    podd-origin record --datamart NAME --schema FILE.sql --out DIR --deltas N [workload flags]
    podd-origin state --broker kafka://HOST:PORT --datamart NAME

`run` asks the replica's state (`delta.rq`), streams the delta it expects on `delta.in`,
waits for `delta.in.rs`, and goes on; it resends what an INCOMPLETE_DELTA names, resumes from
the replica's state after a lost answer, and stops on an error it cannot fix, saying why.
Deltas come from a seeded workload (`--rows-per-delta`, `--seed`, the insert/update/delete mix,
`--null-ratio`) or from a directory of saved deltas (`--source-dir`, written by `record`).
Every flag is also a `PODD_*` variable. Exit status: 0 done, 1 the replica refused a delta,
2 unusable settings or no answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import structlog

from origin.client import OriginClient
from origin.errors import OriginError
from origin.progress import DeltaProgress
from origin.reference import ReferenceOrigin
from origin.settings import OriginSettings
from origin.sources import DeltaSource, DirectorySource, WorkloadSource, save_deltas
from podd_runtime.exit_codes import run_command
from protocol.console import log_to_stderr
from protocol.schema import LogicalSchema

log = structlog.get_logger("origin")


def source_for(settings: OriginSettings, schema: LogicalSchema) -> DeltaSource:
    if settings.source_dir is not None:
        return DirectorySource(schema, settings.source_dir)
    return WorkloadSource(
        schema,
        settings.workload_spec(),
        start=settings.start_date,
        interval=timedelta(seconds=settings.delta_interval_seconds),
    )


async def drive(settings: OriginSettings, *, quiet: bool = False) -> int:
    schema = settings.logical_schema()
    source = source_for(settings, schema)
    bootstrap = settings.bootstrap_servers()
    if not bootstrap:
        raise OriginError("give --broker kafka://HOST:PORT (the broker the replica agent uses)")
    progress = DeltaProgress(settings.deltas, sys.stderr if quiet else sys.stdout)
    async with OriginClient(settings, bootstrap) as client:
        driver = ReferenceOrigin(client, source, settings.session_options(), progress)
        outcomes = await driver.run(settings.deltas)
    rows = sum(o.rows for o in outcomes)
    print(f"{len(outcomes)} delta(s) applied, {rows:,} rows")
    return 0


async def print_state(settings: OriginSettings) -> int:
    bootstrap = settings.bootstrap_servers()
    if not bootstrap or settings.datamart is None:
        raise OriginError("give --broker kafka://HOST:PORT and --datamart NAME")
    async with OriginClient(settings, bootstrap) as client:
        state = await client.ask(settings.datamart, settings.state_timeout_seconds)
    if state is None:
        raise OriginError(f"no delta.rs within {settings.state_timeout_seconds:g} s")
    print(json.dumps(state.model_dump(mode="json", by_alias=True), indent=1))
    return 0


def record(settings: OriginSettings, out: str) -> int:
    schema = settings.logical_schema()
    if settings.deltas is None:
        raise OriginError("give --deltas N: how many deltas to record")
    source = source_for(settings.model_copy(update={"source_dir": None}), schema)
    deltas = (source.delta(n) for n in range(settings.deltas))
    count = save_deltas(Path(out), schema, (d for d in deltas if d is not None))
    print(f"{count} delta(s) of {schema.datamart} saved under {out}")
    return 0


def add_source_flags(command: argparse.ArgumentParser) -> None:
    """The delta source's flags: how many deltas, and the seeded workload's shape."""
    command.add_argument("--deltas", type=int, help="how many deltas")
    command.add_argument("--rows-per-delta", type=int)
    command.add_argument("--insert-ratio", type=float)
    command.add_argument("--update-ratio", type=float)
    command.add_argument("--delete-ratio", type=float)
    command.add_argument("--null-ratio", type=float)
    command.add_argument("--seed", type=int)
    command.add_argument("--start-date", help="date of delta 0, ISO 8601")
    command.add_argument("--delta-interval-seconds", type=float)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="podd-origin", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="drive a replica agent")
    rec = commands.add_parser("record", help="save workload deltas as files")
    state = commands.add_parser("state", help="print the replica's delta.rs")
    for command in (run, rec, state):
        command.add_argument("--datamart")
        command.add_argument("--schema", dest="schema_file", help="Prostore DDL file")
    for command in (run, rec):
        add_source_flags(command)
    for command in (run, state):
        command.add_argument("--broker", help="Kafka bootstrap, kafka://HOST:PORT")
        command.add_argument("--state-timeout-seconds", type=float)
        for topic in ("delta-in", "delta-in-rs", "delta-rq", "delta-rs"):
            command.add_argument(f"--topic-{topic}")
    run.add_argument("--source-dir", help="replay saved deltas from this directory")
    run.add_argument("--chunk-rows", type=int, help="rows per chunk (default 1000)")
    run.add_argument("--answer-timeout-seconds", type=float)
    run.add_argument("--load-failed-retries", type=int)
    run.add_argument("--rate", type=float, help="rows per second to send at (default: unpaced)")
    rec.add_argument("--out", required=True, help="directory to write")
    return parser


_NOT_SETTINGS = ("command", "out")


def settings_from(args: argparse.Namespace) -> OriginSettings:
    overrides: dict[str, Any] = {
        name: value
        for name, value in vars(args).items()
        if value is not None and name not in _NOT_SETTINGS
    }
    return OriginSettings(**overrides)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log_to_stderr()
    return run_command("podd-origin", lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.command == "record":
        return record(settings, args.out)
    if args.command == "state":
        return asyncio.run(print_state(settings))
    return asyncio.run(drive(settings))


if __name__ == "__main__":
    raise SystemExit(main())
