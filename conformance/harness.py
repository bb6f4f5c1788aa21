"""Run the scenarios in order against one datamart and report one line each."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from conformance.context import Context, HarnessOptions, ScenarioFailed, ScenarioSkipped
from conformance.scenarios import SCENARIOS
from origin.client import OriginClient
from protocol.schema import LogicalSchema

Verdict = Literal["PASS", "FAIL", "SKIP"]


@dataclass(frozen=True)
class Outcome:
    name: str
    verdict: Verdict
    detail: str
    seconds: float

    def line(self) -> str:
        why = f": {self.detail}" if self.detail else ""
        return f"{self.verdict}  {self.name:<28} {self.seconds:6.1f} s{why}"


async def run_scenarios(
    client: OriginClient,
    schema: LogicalSchema,
    options: HarnessOptions,
    dsn: str | None = None,
    report: Callable[[Outcome], None] = lambda _: None,
) -> list[Outcome]:
    """Every scenario once, in order; a failure does not stop the ones after it."""
    ctx = Context(client, schema, options, dsn)
    outcomes: list[Outcome] = []
    for scenario in SCENARIOS:
        started = time.perf_counter()
        verdict: Verdict = "PASS"
        detail = ""
        try:
            await scenario.run(ctx)
        except ScenarioSkipped as skip:
            verdict, detail = "SKIP", str(skip)
        except ScenarioFailed as failure:
            verdict, detail = "FAIL", str(failure)
        except Exception as error:
            verdict, detail = "FAIL", f"{type(error).__name__}: {error}"
        outcome = Outcome(scenario.name, verdict, detail, time.perf_counter() - started)
        outcomes.append(outcome)
        report(outcome)
    return outcomes


def summary(outcomes: list[Outcome]) -> str:
    counts = {v: sum(o.verdict == v for o in outcomes) for v in ("PASS", "FAIL", "SKIP")}
    seconds = sum(o.seconds for o in outcomes)
    return (
        f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped "
        f"of {len(outcomes)} scenarios in {seconds:.0f} s"
    )
