"""`podd-conformance`: run the protocol's scenarios against a replica agent, or an origin.

    podd-conformance replica --broker kafka://HOST:PORT --datamart NAME --schema FILE.sql
                     [--replica DSN] [--incomplete-wait SECONDS] [--topic-delta-in ...]
                     [--scenario NAME ...] [--junit FILE.xml]
    podd-conformance replica --list
    podd-conformance origin --origin "COMMAND TEMPLATE" ...   (certify an origin instead)

`podd-conformance` with no side named is `podd-conformance replica`.

The agent must serve NAME (with that logical schema) on the given topics, and the datamart
must have no applied delta: the scenarios build its history from delta 0 (with --scenario,
only the named ones run, in their order, each on what the ones before it left). One line per
scenario (PASS/FAIL/SKIP and why), then a summary. With --replica, the replica's tables are
compared with the reference model after every scenario (REPLICA.md's layout), and the
load-failed scenario renames one table for a moment. Exit status: 0 all passed (or skipped),
1 a scenario failed, 2 the harness could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.context import HarnessOptions
from conformance.harness import run_scenarios
from conformance.origins.origin_cli import main as origin_main
from conformance.report import summary, write_junit
from conformance.scenario import chosen, listing, unknown
from conformance.scenarios import SCENARIOS
from origin.client import OriginClient
from podd_kafka.settings import KafkaSettings
from podd_runtime.exit_codes import ExitCode, run_command
from protocol.console import log_to_stderr
from protocol.ddl import parse_schema


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podd-conformance replica", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--list", action="store_true", help="print the scenarios and exit")
    parser.add_argument("--scenario", action="append", help="run only these (repeatable)")
    parser.add_argument("--junit", type=Path, help="write a JUnit XML report here")
    parser.add_argument("--broker", help="Kafka bootstrap, kafka://HOST:PORT")
    parser.add_argument("--datamart")
    parser.add_argument("--schema", type=Path, help="the datamart's Prostore DDL")
    parser.add_argument("--replica", help="the replica's PostgreSQL DSN: check its tables")
    parser.add_argument(
        "--incomplete-wait",
        type=float,
        default=0.0,
        help="seconds to wait for INCOMPLETE_DELTA (0: skip that scenario)",
    )
    parser.add_argument("--answer-timeout", type=float, default=120.0)
    parser.add_argument(
        "--quiet-period",
        type=float,
        default=2.0,
        help="seconds to watch for answers that must not come",
    )
    parser.add_argument("--rows-per-delta", type=int, default=60)
    parser.add_argument("--load-rows", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=7)
    for topic in ("delta-in", "delta-in-rs", "delta-rq", "delta-rs"):
        parser.add_argument(f"--topic-{topic}")
    return parser


async def _run(args: argparse.Namespace, settings: KafkaSettings) -> int:
    if not (args.datamart and args.schema):
        print("podd-conformance: give --datamart NAME and --schema FILE.sql", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    bootstrap = settings.bootstrap_servers()
    if not bootstrap:
        print("podd-conformance: give --broker kafka://HOST:PORT", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    schema = parse_schema(args.schema.read_text(), args.datamart)
    options = HarnessOptions(
        rows_per_delta=args.rows_per_delta,
        seed=args.seed,
        answer_timeout=args.answer_timeout,
        quiet_period=args.quiet_period,
        incomplete_wait=args.incomplete_wait,
        load_rows=args.load_rows,
    )
    print(f"conformance of the replica agent serving {schema.datamart} on {','.join(bootstrap)}")
    async with OriginClient(settings, bootstrap) as client:
        state = await client.ask(schema.datamart, options.answer_timeout)
        if state is None:
            print("podd-conformance: no delta.rs: is an agent listening?", file=sys.stderr)
            return ExitCode.CANNOT_RUN
        if state.delta_ok_num is not None:
            print(
                f"podd-conformance: {schema.datamart} has deltas up to {state.delta_ok_num} "
                "applied; the scenarios need a datamart with none",
                file=sys.stderr,
            )
            return ExitCode.CANNOT_RUN
        picked = chosen(SCENARIOS, args.scenario)
        outcomes = await run_scenarios(
            client, schema, options, args.replica, lambda o: print(o.line(), flush=True), picked
        )
    print(summary(outcomes))
    if args.junit:
        write_junit(outcomes, args.junit, "podd-replica-conformance")
    return ExitCode.FAILED if any(o.verdict == "FAIL" for o in outcomes) else ExitCode.OK


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if words[:1] == ["origin"]:  # certify an origin instead (`conformance.origins`)
        log_to_stderr()
        return run_command("podd-conformance origin", lambda: origin_main(words[1:]))
    if words[:1] == ["replica"]:
        words = words[1:]
    args = build_parser().parse_args(words)
    missing = unknown(SCENARIOS, args.scenario)
    if missing:
        named = ", ".join(missing)
        print(f"podd-conformance: no scenario {named} (--list shows them)", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    if args.list:
        print(listing(SCENARIOS))
        return 0
    log_to_stderr()
    overrides = {
        name: getattr(args, name)
        for name in (
            "broker",
            "topic_delta_in",
            "topic_delta_in_rs",
            "topic_delta_rq",
            "topic_delta_rs",
        )
        if getattr(args, name) is not None
    }
    return run_command(
        "podd-conformance", lambda: asyncio.run(_run(args, KafkaSettings(**overrides)))
    )


if __name__ == "__main__":
    raise SystemExit(main())
