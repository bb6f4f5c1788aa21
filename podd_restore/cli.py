"""`podd-restore`: restore a replica from a Prostore backup topic (BACKUP_TO_KAFKA).

    podd-restore check --topic T --datamart D [--json] [--broker kafka://H:P] [--replica DSN]
    podd-restore run   --topic T --datamart D [--to-delta N] [--increment-id RUN]
                       [--broker ...] [--replica DSN] [--spark-master URL]

`check` reads the topic and changes nothing: per delta, the runs that wrote it, whether one
is complete, what the others lack, duplicates, schema changes, and "restorable up to delta
N" from the replica's next expected delta. Exit 0 when a restore would apply every delta the
topic holds without a gap, 1 otherwise. `run` applies, in order from the replica's next
expected delta, each complete increment as one delta (original number and date, one
transaction), and stops at the first it cannot apply, saying why. Exit status: 0 done,
1 stopped at a gap or a bad message (the replica holds the deltas before it), 2 unusable
settings. Every flag is also a `PODD_*` variable; without --broker / --replica the embedded
Tansu and PostgreSQL are used (as `replica-agent` does).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from podd_restore import runner
from podd_restore.settings import RestoreSettings
from podd_runtime.exit_codes import ExitCode, run_command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="podd-restore", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="report what the topic can restore")
    run = commands.add_parser("run", help="apply the topic's deltas to the replica")
    check.add_argument("--json", action="store_true", help="the report as JSON")
    run.add_argument("--to-delta", type=int, help="stop after this delta")
    run.add_argument("--json", action="store_true", help="the outcome as JSON on stdout")
    run.add_argument("--spark-master", help="e.g. local[*] or spark://host:7077")
    run.add_argument("--staging-dir", type=Path, help="default DATA_DIR/staging")
    for command in (check, run):
        command.add_argument("--topic", help="the backup topic")
        command.add_argument("--datamart", help="the datamart to restore")
        command.add_argument(
            "--increment-id",
            help="the run to use where runs wrote a delta differently (or two wrote delta 0)",
        )
        command.add_argument("--broker", help="Kafka bootstrap, kafka://HOST:PORT")
        command.add_argument("--replica", dest="replica_dsn", help="PostgreSQL DSN")
        command.add_argument("--data-dir", type=Path)
        command.add_argument("--log-format", choices=["auto", "json", "console"])
    return parser


def settings_from(args: argparse.Namespace) -> RestoreSettings:
    overrides: dict[str, Any] = {
        name: value
        for name, value in vars(args).items()
        if value is not None and name not in ("command", "json")
    }
    return RestoreSettings(**overrides)


def _configure_logs(log_format: str) -> None:
    """Readable lines on a terminal, JSON lines otherwise; always to stderr."""
    if log_format == "auto":
        log_format = "console" if sys.stderr.isatty() else "json"
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        if log_format == "console"
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        logger_factory=lambda *_: structlog.PrintLogger(sys.stderr),
    )
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)


def _bar(done: int, total: int, rows: int, seconds: float) -> None:
    width = 30
    filled = width * done // max(total, 1)
    rate = rows / seconds if seconds > 0 else 0.0
    sys.stdout.write(
        f"\r[{'#' * filled}{'.' * (width - filled)}] deltas {done}/{total}  "
        f"rows {rows:,}  {rate:,.0f} rows/s"
    )
    sys.stdout.flush()


def _run(settings: RestoreSettings, as_json: bool) -> int:
    progress = _bar if sys.stdout.isatty() and not as_json else None
    outcome = runner.run(settings, progress)
    if progress is not None and outcome.applied:
        sys.stdout.write("\n")
    if as_json:
        print(json.dumps(outcome.summary()))
    elif outcome.applied:
        print(
            f"restored deltas {outcome.applied[0]}-{outcome.applied[-1]} of {settings.datamart}: "
            f"{outcome.rows:,} rows in {outcome.seconds:.1f} s"
        )
    else:
        print(f"nothing applied; the replica expects delta {outcome.next_expected}")
    stop = runner.stopped(outcome)
    if stop is not None:
        print(f"podd-restore: {stop}", file=sys.stderr)
        return ExitCode.FAILED
    return ExitCode.OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command("podd-restore", lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    _configure_logs(settings.log_format)
    if args.command == "check":
        report = runner.check(settings)
        print(json.dumps(report.data, indent=1) if args.json else report.text())
        return ExitCode.OK if report.restorable else ExitCode.FAILED
    return _run(settings, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
