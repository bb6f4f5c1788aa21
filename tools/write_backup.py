"""`python -m tools.write_backup`: deltas written to a topic as Prostore's BACKUP_TO_KAFKA
writes them (incremental, or a snapshot with `--snapshot-depth`), for trying `podd-restore`
by hand and for the tests. A tool run from a checkout, not shipped: a real deployment
restores from the topics Prostore wrote.

    python -m tools.write_backup --broker kafka://HOST:PORT --topic T --datamart NAME
        --schema FILE.sql --deltas N [--first-delta K] [--snapshot-depth D] [--threads 1]
        [--partitions 1] [--chunk-size 1000] [--increment-id RUN] [workload flags]

Deltas come from the reference origin's sources (the seeded workload, or `--source-dir`), so
the settings are `podd-origin`'s.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Any

from origin.cli import add_source_flags, source_for
from origin.errors import OriginError
from origin.settings import OriginSettings
from podd_runtime.exit_codes import run_command
from protocol.console import log_to_stderr
from tools.backup_topic import BackupLayout, incremental, produce, snapshot

_NOT_SETTINGS = ("topic", "first_delta", "snapshot_depth", "threads", "partitions", "increment_id")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.write_backup", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--datamart")
    parser.add_argument("--schema", dest="schema_file", help="Prostore DDL file")
    parser.add_argument("--broker", help="Kafka bootstrap, kafka://HOST:PORT")
    add_source_flags(parser)
    parser.add_argument("--topic", help="the backup topic")
    parser.add_argument("--source-dir", help="saved deltas instead of the workload")
    parser.add_argument("--first-delta", type=int, default=0, help="the first delta written")
    parser.add_argument("--snapshot-depth", type=int, help="a snapshot reaching D deltas back")
    parser.add_argument("--threads", type=int, default=1, help="writer streams")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--chunk-size", dest="chunk_rows", type=int, help="rows per message")
    parser.add_argument("--increment-id", help="the run's id (default: a new UUID)")
    return parser


async def write(settings: OriginSettings, args: argparse.Namespace) -> int:
    source = source_for(settings, settings.logical_schema())
    bootstrap = settings.bootstrap_servers()
    if not bootstrap or not args.topic:
        raise OriginError("give --broker kafka://HOST:PORT and --topic TOPIC")
    if settings.deltas is None:
        raise OriginError("give --deltas N: how many deltas to write")
    layout = BackupLayout(args.threads, args.partitions, settings.chunk_rows)
    last = args.first_delta + settings.deltas - 1
    if args.snapshot_depth is None:
        numbers = range(args.first_delta, last + 1)
        messages = incremental(source, numbers, layout, args.increment_id)
    else:
        messages = snapshot(source, last, args.snapshot_depth, layout, args.increment_id)
    sent = await produce(settings, bootstrap, args.topic, args.partitions, messages)
    kind = (
        "incremental" if args.snapshot_depth is None else f"snapshot (depth {args.snapshot_depth})"
    )
    print(f"{sent} message(s) of {source.schema.datamart} written to {args.topic}: {kind}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log_to_stderr()
    overrides: dict[str, Any] = {
        name: value
        for name, value in vars(args).items()
        if value is not None and name not in _NOT_SETTINGS
    }

    def go() -> int:  # (settings errors too are mapped to exit codes)
        return asyncio.run(write(OriginSettings(**overrides), args))

    return run_command("write_backup", go)


if __name__ == "__main__":
    raise SystemExit(main())
