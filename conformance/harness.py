"""Run the replica scenarios in order against one datamart and report one line each."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from conformance.context import Context, HarnessOptions, ScenarioFailed, ScenarioSkipped
from conformance.report import Outcome, Problem, Verdict
from conformance.scenarios import SCENARIOS, Scenario
from origin.client import OriginClient
from protocol.schema import LogicalSchema


async def run_scenarios(
    client: OriginClient,
    schema: LogicalSchema,
    options: HarnessOptions,
    dsn: str | None = None,
    report: Callable[[Outcome], None] = lambda _: None,
    chosen: Sequence[Scenario] = SCENARIOS,
) -> list[Outcome]:
    """Every chosen scenario once, in order; a failure does not stop the ones after it.
    (Scenarios build on the replica the ones before them left: run alone, a scenario
    starts from what the datamart holds then.)"""
    ctx = Context(client, schema, options, dsn)
    outcomes: list[Outcome] = []
    for scenario in chosen:
        started = time.perf_counter()
        problems: tuple[Problem, ...] = ()
        skipped = ""
        try:
            await scenario.run(ctx)
        except ScenarioSkipped as skip:
            skipped = str(skip)
        except ScenarioFailed as failure:
            problems = (Problem("check", str(failure)),)
        except Exception as error:
            problems = (Problem("error", f"{type(error).__name__}: {error}"),)
        verdict: Verdict = "FAIL" if problems else "SKIP" if skipped else "PASS"
        outcome = Outcome(
            scenario.name, verdict, time.perf_counter() - started, problems, skipped_because=skipped
        )
        outcomes.append(outcome)
        report(outcome)
    return outcomes
