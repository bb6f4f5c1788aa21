"""`podd-origin cdc`: Qlik Replicate and DataWorks topics as a versioned replica.

    podd-origin cdc run --format qlik|dataworks --topic T [--topic T2 ...] --datamart NAME
                        --schema FILE.sql --broker kafka://HOST:PORT --state-dir DIR
                        [--max-delta-rows 100000] [--max-delta-age-seconds 10]
                        [--settle-seconds 2] [--dead-letter-topic T] [--start earliest|latest]
                        [--start-offset TOPIC:P=OFFSET ...] [--until-idle SECONDS]
                        [--metadata-wait-seconds 30] [--max-pending-changes 500000]
                        [--max-pending-mib 1024] [--max-ahead-hours 24]
                        [--topic-table TOPIC=TABLE ...] [--chunk-rows 1000]
    podd-origin cdc schema --format qlik|dataworks --topic T ... --datamart NAME
                           --broker kafka://HOST:PORT

`run` cuts the topics into deltas by docs/contracts/CDC.md and drives the replica agent serving
`--schema` (the DDL `schema` prints). Exit status: 0 done (with `--until-idle`), 1 the replica
refused a delta, 2 unusable settings, state or broker, 3 bad input or a schema change in the
source topic (named by topic, partition and offset; every delta before it is applied).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from origin.cdc.runner import CdcOrigin
from origin.cdc.schema_scan import scan
from origin.cdc.settings import CdcSettings
from origin.cdc_write import cli as write_cli
from origin.client import OriginClient
from origin.errors import OriginError
from protocol.exit_codes import ExitCode


def add_parser(commands: Any) -> None:
    cdc = commands.add_parser("cdc", help="Qlik Replicate / DataWorks topics into a replica")
    actions = cdc.add_subparsers(dest="cdc_command", required=True)
    run = actions.add_parser("run", help="cut CDC topics into deltas and drive a replica")
    write_cli.add_parser(actions)
    schema = actions.add_parser("schema", help="print the replica's DDL derived from the topic")
    for command in (run, schema):
        command.add_argument("--format", dest="cdc_format", choices=("qlik", "dataworks"))
        command.add_argument("--topic", dest="cdc_topics", action="append",
                             help="a CDC topic (repeatable)")  # fmt: skip
        command.add_argument("--datamart")
        command.add_argument("--broker", help="Kafka bootstrap, kafka://HOST:PORT")
        command.add_argument("--settle-seconds", dest="cdc_settle_seconds", type=float)
        command.add_argument("--topic-table", dest="cdc_topic_tables", action="append",
                             help="TOPIC=TABLE for a Qlik topic without the envelope")  # fmt: skip
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
    run.add_argument("--start-offset", dest="cdc_start_offsets", action="append",
                     help="TOPIC:PARTITION=OFFSET, used while the cut log is empty")  # fmt: skip
    run.add_argument("--until-idle", dest="cdc_until_idle_seconds", type=float,
                     help="exit 0 once all is applied and quiet this long")  # fmt: skip
    run.add_argument("--metadata-wait-seconds", dest="cdc_metadata_wait_seconds", type=float)
    run.add_argument("--max-pending-changes", dest="cdc_max_pending_changes", type=int)
    run.add_argument(
        "--max-pending-mib",
        dest="cdc_max_pending_mib",
        type=float,
        help="MiB of source messages held at most (1024)",
    )
    run.add_argument("--chunk-rows", type=int, help="rows per delta.in chunk (default 1000)")
    run.add_argument("--answer-timeout-seconds", type=float)
    run.add_argument("--state-timeout-seconds", type=float)
    for topic in ("delta-in", "delta-in-rs", "delta-rq", "delta-rs"):
        run.add_argument(f"--topic-{topic}")


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
        origin = CdcOrigin(client, schema, options, settings.session_options(),
                           lambda line: print(line, flush=True))  # fmt: skip
        stats = await origin.run()
    extra = f"; {stats.dead_lettered:,} message(s) to {options.dead_letter_topic}" if (
        stats.dead_lettered) else ""  # fmt: skip
    rebuilt = f" ({stats.rebuilt} rebuilt from the cut log)" if stats.rebuilt else ""
    print(f"{stats.deltas} delta(s) applied{rebuilt}, {stats.changes:,} changes, "
          f"{stats.rows:,} rows{extra}")  # fmt: skip
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
        print(f"podd-origin: refused at {where}: {reason}", file=sys.stderr)
    if not found.tables:
        print(f"podd-origin: no table described in {found.messages:,} message(s)",
              file=sys.stderr)  # fmt: skip
        return ExitCode.BAD_INPUT
    print(found.schema(settings.datamart).to_ddl())
    return ExitCode.BAD_INPUT if found.refused else ExitCode.OK


def main(args: argparse.Namespace) -> int:
    try:
        if args.cdc_command == "write":
            return write_cli.main(args)
        settings = _settings(args)
        if args.cdc_command == "schema":
            return asyncio.run(_schema(settings))
        settings.options()  # settings errors before any connection
        return asyncio.run(_run(settings))
    except ValueError as exc:  # settings; the other errors map in `origin.cli.main`
        print(f"podd-origin: invalid settings: {exc}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
