"""`podd-cdc`: Qlik Replicate and DataWorks topics as a versioned replica.

    podd-cdc run --format qlik|dataworks --topic T [--topic T2 ...] --datamart NAME
                 --schema FILE.sql --broker kafka://HOST:PORT --state-dir DIR
                 [--max-delta-rows 100000] [--max-delta-age-seconds 10]
                 [--settle-seconds 2] [--dead-letter-topic T] [--start earliest|latest]
                 [--start-offset TOPIC:P=OFFSET ...] [--until-idle SECONDS]
                 [--metadata-wait-seconds 30] [--max-pending-changes 500000]
                 [--max-pending-mib 1024] [--max-ahead-hours 24]
                 [--topic-table TOPIC=TABLE ...] [--chunk-rows 1000]
    podd-cdc schema --format qlik|dataworks --topic T ... --datamart NAME
                    --broker kafka://HOST:PORT
    podd-cdc warm-up

`run` cuts the topics into deltas by docs/contracts/CDC.md and drives the replica agent serving
`--schema` (the DDL `schema` prints). Exit status: 0 done (with `--until-idle`), 1 the replica
refused a delta, 2 unusable settings, state or broker, 3 bad input or a schema change in the
source topic (named by topic, partition and offset; every delta before it is applied).
`warm-up` compiles the origin's kernels into numba's cache (`podd_cdc.warm_up`), so a
first run does not: run it where the origin is installed, as the user that runs it.
`podd-cdc run|schema`, its old name, still works for one release.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from origin import cli as origin_cli
from origin.client import OriginClient
from origin.errors import OriginError
from podd_cdc.runner import CdcOrigin
from podd_cdc.schema_scan import scan
from podd_cdc.settings import CdcSettings
from podd_cdc.warm_up import warm_up
from podd_runtime.exit_codes import run_command
from protocol.console import log_to_stderr
from protocol.exit_codes import ExitCode


def build_parser(prog: str = "podd-cdc") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    actions = parser.add_subparsers(dest="cdc_command", required=True)
    run = actions.add_parser("run", help="cut CDC topics into deltas and drive a replica")
    schema = actions.add_parser("schema", help="print the replica's DDL derived from the topic")
    actions.add_parser("warm-up", help="compile the origin's kernels into numba's cache")
    for command in (run, schema):
        command.add_argument("--format", dest="cdc_format", choices=("qlik", "dataworks"))
        command.add_argument(
            "--topic", dest="cdc_topics", action="append", help="a CDC topic (repeatable)"
        )
        command.add_argument("--datamart")
        command.add_argument("--broker", help="Kafka bootstrap, kafka://HOST:PORT")
        command.add_argument("--settle-seconds", dest="cdc_settle_seconds", type=float)
        command.add_argument(
            "--topic-table",
            dest="cdc_topic_tables",
            action="append",
            help="TOPIC=TABLE for a Qlik topic without the envelope",
        )
    run.add_argument("--schema", dest="schema_file", help="the replica's Prostore DDL")
    run.add_argument("--state-dir", dest="cdc_state_dir", help="where the cut log is kept")
    run.add_argument("--max-delta-rows", dest="cdc_max_delta_rows", type=int)
    run.add_argument("--max-delta-age-seconds", dest="cdc_max_delta_age_seconds", type=float)
    run.add_argument("--dead-letter-topic", dest="cdc_dead_letter_topic")
    run.add_argument(
        "--max-ahead-hours",
        dest="cdc_max_ahead_hours",
        type=float,
        help="a source time further ahead of the clock stops the run (24)",
    )
    run.add_argument("--start", dest="cdc_start", choices=("earliest", "latest"))
    run.add_argument(
        "--start-offset",
        dest="cdc_start_offsets",
        action="append",
        help="TOPIC:PARTITION=OFFSET, used while the cut log is empty",
    )
    run.add_argument(
        "--until-idle",
        dest="cdc_until_idle_seconds",
        type=float,
        help="exit 0 once all is applied and quiet this long",
    )
    run.add_argument("--metadata-wait-seconds", dest="cdc_metadata_wait_seconds", type=float)
    run.add_argument("--max-pending-changes", dest="cdc_max_pending_changes", type=int)
    run.add_argument(
        "--max-pending-mib",
        dest="cdc_max_pending_mib",
        type=float,
        help="MiB of source messages held at most (1024)",
    )
    run.add_argument(
        "--columnar",
        dest="cdc_columnar",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="hold and cut changes on arrays, read in batches (the default); "
        "--no-columnar: a change at a time",
    )
    run.add_argument("--chunk-rows", type=int, help="rows per delta.in chunk (default 1000)")
    run.add_argument("--answer-timeout-seconds", type=float)
    run.add_argument("--state-timeout-seconds", type=float)
    for topic in ("delta-in", "delta-in-rs", "delta-rq", "delta-rs"):
        run.add_argument(f"--topic-{topic}")
    return parser


def _settings(args: argparse.Namespace) -> CdcSettings:
    skip = {"command", "cdc_command"}
    values = {k: v for k, v in vars(args).items() if v is not None and k not in skip}
    return CdcSettings(**values)


async def _run(settings: CdcSettings) -> int:
    schema = settings.logical_schema()
    options = settings.options()
    bootstrap = settings.bootstrap_servers()
    if not bootstrap:
        raise OriginError("give --broker kafka://HOST:PORT")
    async with OriginClient(settings, bootstrap) as client:
        origin = CdcOrigin(
            client,
            schema,
            options,
            settings.session_options(),
            lambda line: print(line, flush=True),
        )
        stats = await origin.run()
    extra = (
        f"; {stats.dead_lettered:,} message(s) to {options.dead_letter_topic}"
        if (stats.dead_lettered)
        else ""
    )
    if options.on_arrays:
        extra += f"; {stats.batched:,} message(s) held from read batches"
    rebuilt = f" ({stats.rebuilt} rebuilt from the cut log)" if stats.rebuilt else ""
    print(
        f"{stats.deltas} delta(s) applied{rebuilt}, {stats.changes:,} changes, "
        f"{stats.rows:,} rows, at most {stats.held_peak:,} changes held{extra}"
    )
    return 0


async def _schema(settings: CdcSettings) -> int:
    if settings.datamart is None or settings.cdc_format is None or not settings.cdc_topics:
        raise OriginError("give --format, --topic and --datamart")
    bootstrap = settings.bootstrap_servers()
    if not bootstrap:
        raise OriginError("give --broker kafka://HOST:PORT")
    options = settings.model_copy(update={"cdc_state_dir": Path()}).options()
    found = await scan(settings, bootstrap, options)
    for reason, where in found.refused.items():
        print(f"podd-cdc: refused at {where}: {reason}", file=sys.stderr)
    if not found.tables:
        print(f"podd-cdc: no table described in {found.messages:,} message(s)", file=sys.stderr)
        return ExitCode.BAD_INPUT
    print(found.schema(settings.datamart).to_ddl())
    return ExitCode.BAD_INPUT if found.refused else ExitCode.OK


def main(argv: Sequence[str] | None = None, prog: str = "podd-cdc") -> int:
    args = build_parser(prog).parse_args(argv)
    log_to_stderr()
    return run_command(prog, lambda: _main(args))


def _warm_up() -> int:
    print(warm_up())
    return ExitCode.OK


def _main(args: argparse.Namespace) -> int:
    if args.cdc_command == "warm-up":
        return _warm_up()
    try:
        settings = _settings(args)
        if args.cdc_command == "schema":
            return asyncio.run(_schema(settings))
        settings.options()  # settings errors before any connection
        return asyncio.run(_run(settings))
    except ValueError as exc:  # settings; the other errors map in `run_command`
        print(f"podd-cdc: invalid settings: {exc}", file=sys.stderr)
        return ExitCode.CANNOT_RUN


def podd_origin(argv: Sequence[str] | None = None) -> int:
    """`podd-origin`, whose `cdc` subcommand is now `podd-cdc` (kept for one release)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["cdc"]:
        print(
            "podd-origin cdc is now podd-cdc; the old name goes in a later release", file=sys.stderr
        )
        return main(args[1:], prog="podd-origin cdc")
    return origin_cli.main(args)


if __name__ == "__main__":
    raise SystemExit(main())
