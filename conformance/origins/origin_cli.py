"""`podd-conformance origin`: certify a PODD origin against the checking replica.

    podd-conformance origin --origin "COMMAND TEMPLATE" [--broker kafka://HOST:PORT]
                            [--datamart NAME --schema FILE.sql] [--scenario NAME ...]
                            [--junit FILE.xml] [--answer-timeout 3] [--deadline 60]
                            [--repeat N]
    podd-conformance origin --list

The template is split like a shell line (no shell runs it), then each word's fields are
filled, so a value holding a space stays one argument (inside an `sh -c` script, quote the
fields yourself):
{broker} (kafka://HOST:PORT), {bootstrap} (HOST:PORT), {datamart}, {schema} (the DDL file),
{deltas} (how many deltas to send), {answer_timeout} (seconds to wait for an answer before
asking delta.rq), {state_dir} (an empty directory of the scenario's, kept when the harness
restarts the origin), {topic_delta_in}, {topic_delta_in_rs}, {topic_delta_rq}, {topic_delta_rs}
(each scenario has its own topics; they are also in PODD_TOPIC_* and the broker in
PODD_BROKER). Without --broker an embedded broker is started. Exit status: 0 every scenario
passed, 1 one failed, 2 the harness could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from importlib import resources
from pathlib import Path

from conformance.origins.origin_runner import RunOptions, check_template, run_origin_scenario
from conformance.origins.origin_scenarios import OriginScenario, scenarios
from conformance.report import Outcome, repeated, summary, table, write_junit
from conformance.scenario import chosen, listing, unknown
from podd_kafka.broker import embedded_broker
from podd_kafka.settings import KafkaSettings
from podd_runtime.exit_codes import ExitCode
from protocol.ddl import parse_schema

#: The demo datamart, the default schema (from a checkout or an editable install).
DEMO_SCHEMA = Path(str(resources.files("conformance"))).parent / "examples" / "marketing.sql"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podd-conformance origin", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--origin", help="the origin's command template")
    parser.add_argument("--broker", help="kafka://HOST:PORT (default: an embedded broker)")
    parser.add_argument("--datamart", default="marketing")
    parser.add_argument("--schema", type=Path, default=DEMO_SCHEMA, help="Prostore DDL")
    parser.add_argument("--scenario", action="append", help="run only these (repeatable)")
    parser.add_argument("--junit", type=Path, help="write a JUnit XML report here")
    parser.add_argument("--answer-timeout", type=float, default=3.0)
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds per scenario")
    parser.add_argument("--work-dir", type=Path, help="the origins' logs (default: a temp dir)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="run each scenario this many times (flaky verdicts)"
    )
    parser.add_argument("--list", action="store_true", help="print the scenarios and exit")
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    every = scenarios()
    if args.list:
        print(listing(every))
        return ExitCode.OK
    missing = unknown(every, args.scenario)
    problem = None
    if not args.origin:
        problem = 'give --origin "COMMAND TEMPLATE"'
    elif missing:
        problem = f"no scenario {', '.join(missing)} (--list shows them)"
    else:
        try:
            check_template(args.origin)
            schema = parse_schema(args.schema.read_text(), args.datamart)
        except (ValueError, OSError) as exc:
            problem = str(exc)
    if problem is not None:
        print(f"podd-conformance origin: {problem}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    picked = chosen(every, args.scenario, args.repeat)
    with ExitStack() as stack:
        if args.broker:
            settings = KafkaSettings(broker=args.broker)
            bootstrap = settings.bootstrap_servers()
        else:
            settings = KafkaSettings()
            bootstrap = [stack.enter_context(embedded_broker())]
        work = args.work_dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        work.mkdir(parents=True, exist_ok=True)
        options = RunOptions(
            args.origin,
            bootstrap,
            schema,
            args.schema.resolve(),
            work,
            settings,
            answer_timeout=args.answer_timeout,
            deadline=args.deadline,
        )
        print(f"conformance of the origin `{args.origin}` on {','.join(bootstrap)}", flush=True)
        outcomes = asyncio.run(run_all(picked, options))
        print()
        print(table(outcomes))
        print()
        print(summary(outcomes))
        if args.repeat > 1:
            print(repeated(outcomes))
        if args.junit:
            write_junit(outcomes, args.junit, "podd-origin-conformance")
    return ExitCode.FAILED if any(o.verdict == "FAIL" for o in outcomes) else ExitCode.OK


async def run_all(chosen: Sequence[OriginScenario], options: RunOptions) -> list[Outcome]:
    outcomes = []
    for scenario in chosen:
        outcome = await run_origin_scenario(scenario, options)
        print(outcome.line(), flush=True)
        outcomes.append(outcome)
    return outcomes
