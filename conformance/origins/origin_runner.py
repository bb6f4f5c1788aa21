"""One origin process per scenario, against the checking replica, on fresh topics.

The origin is started from the user's command template (`TEMPLATE_FIELDS` name what it may
use), with the scenario's topics also in `PODD_TOPIC_*` and the broker in `PODD_BROKER`. The
scenario ends when the origin exits (then `quiet` seconds more are read) or at `deadline`
(it is then killed). Its output goes to `<work dir>/<scenario>.log`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from conformance.origins.checking_replica import LONG_AGO, CheckingReplica
from conformance.origins.judge import OriginJudge
from conformance.origins.origin_scenarios import OriginRestart, OriginScenario
from conformance.origins.seen import Violation
from conformance.report import Outcome, Problem
from podd_kafka.client import ensure_topics
from podd_kafka.settings import KafkaSettings
from protocol.schema import LogicalSchema

#: What a command template may name, e.g. `podd-origin run --broker {broker} ...`.
TEMPLATE_FIELDS = (
    "broker",
    "bootstrap",
    "datamart",
    "schema",
    "deltas",
    "answer_timeout",
    "state_dir",
    "topic_delta_in",
    "topic_delta_in_rs",
    "topic_delta_rq",
    "topic_delta_rs",
)


@dataclass(frozen=True)
class RunOptions:
    template: str
    bootstrap: list[str]
    schema: LogicalSchema
    schema_file: Path
    work_dir: Path
    settings: KafkaSettings = field(default_factory=KafkaSettings)
    #: `{answer_timeout}`: how long the origin should wait for an answer before it asks.
    answer_timeout: float = 3.0
    #: The most a scenario may take; then the origin is killed and the scenario judged.
    deadline: float = 60.0
    #: Seconds read after the origin exits (late messages are judged too).
    quiet: float = 1.0


def check_template(template: str) -> None:
    """Refuse a template that names a field the harness does not fill."""
    try:
        template.format(**dict.fromkeys(TEMPLATE_FIELDS, "x"))
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            f"the origin template names {exc}, which is not one of {', '.join(TEMPLATE_FIELDS)}"
        ) from None


def command_of(template: str, values: dict[str, str]) -> list[str]:
    """The origin's command: the template split like a shell line, then each word's fields
    filled, so a value with a space (a work directory's path) stays one argument. (Filled
    first and split after, such a path broke every origin.) Inside a script the template
    hands to a shell (`sh -c '...'`), quote the fields yourself."""
    return [word.format(**values) for word in shlex.split(template)]


class _Origin:
    """The origin's process (restarted by a scenario that kills it)."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path) -> None:
        self.command, self.env, self.log = command, env, log
        self.process: asyncio.subprocess.Process | None = None
        self.restarting = False

    async def start(self) -> None:
        with self.log.open("ab") as sink:
            self.process = await asyncio.create_subprocess_exec(
                *self.command,
                stdout=sink,
                stderr=asyncio.subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )

    async def restart(self) -> None:
        self.restarting = True
        try:
            self.kill()
            if self.process is not None:
                await self.process.wait()
            with self.log.open("a") as sink:
                sink.write("\n--- killed (-9) by the harness, started again ---\n")
            await self.start()
        finally:
            self.restarting = False

    def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)

    def exited(self) -> bool:
        return (
            not self.restarting
            and self.process is not None
            and (self.process.returncode is not None)
        )


async def run_origin_scenario(scenario: OriginScenario, options: RunOptions) -> Outcome:
    started = time.monotonic()
    prefix = f"conformance-{scenario.name}-{uuid.uuid4().hex[:8]}"
    topics = {
        f"topic_{name}": f"{prefix}.{name.replace('_', '.')}"
        for name in ("delta_in", "delta_in_rs", "delta_rq", "delta_rs")
    }
    # One partition: the checking replica reads the origin's messages in the order it
    # produced them (across partitions, order is not kept and judging it would be a guess).
    settings = options.settings.model_copy(update={**topics, "delta_in_partitions": 1})
    await ensure_topics(settings, options.bootstrap)
    judge = OriginJudge(options.schema, scenario.start, LONG_AGO if scenario.start else None)
    script = scenario.make()
    replica = CheckingReplica(settings, options.bootstrap, judge, script)
    state_dir = options.work_dir / f"{scenario.name}.state"  # kept across an origin restart
    shutil.rmtree(state_dir, ignore_errors=True)  # a work dir used before: start empty
    state_dir.mkdir(parents=True)
    values = {
        "broker": f"kafka://{options.bootstrap[0]}",
        "bootstrap": ",".join(options.bootstrap),
        "datamart": options.schema.datamart,
        "schema": str(options.schema_file),
        "deltas": str(scenario.deltas),
        "answer_timeout": f"{options.answer_timeout:g}",
        "state_dir": str(state_dir),
        **topics,
    }
    env = dict(os.environ, PODD_BROKER=values["broker"])
    env.update({f"PODD_{k.upper()}": v for k, v in topics.items()})
    log = options.work_dir / f"{scenario.name}.log"
    log.unlink(missing_ok=True)
    origin = _Origin(command_of(options.template, values), env, log)
    if isinstance(script, OriginRestart):
        script.restart = lambda: replica.later(origin.restart())
    reading = asyncio.create_task(replica.run())
    violations: list[Violation] = []
    try:
        await origin.start()
        deadline = started + options.deadline
        while not origin.exited() and time.monotonic() < deadline and not reading.done():
            await asyncio.sleep(0.1)
        timed_out = not origin.exited()
        origin.kill()
        if origin.process is not None:
            await origin.process.wait()
        await asyncio.sleep(options.quiet)
    finally:
        origin.kill()
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reading
    if replica.failure is not None:
        violations.append(Violation("harness", f"the checking replica failed: {replica.failure!r}"))
    violations += judge.finish()
    code = None if origin.process is None else origin.process.returncode
    violations += _ending(scenario, judge, timed_out, code, log, options)
    problems = tuple(Problem(v.rule, v.message, str(v.where or "")) for v in violations)
    return Outcome(
        scenario.name,
        "FAIL" if problems else "PASS",
        time.monotonic() - started,
        problems,
        output=f"origin exit code {code}; its output: {log}",
    )


def _ending(
    scenario: OriginScenario,
    judge: OriginJudge,
    timed_out: bool,
    code: int | None,
    log: Path,
    options: RunOptions,
) -> list[Violation]:
    """What the scenario wants of the origin's end: finished, or stopped saying why."""
    out: list[Violation] = []
    if scenario.expect == "finish-or-stop" and not timed_out and code:
        return _stopped_after(scenario, judge, log)
    if scenario.expect != "stop":
        goal = scenario.goal if scenario.goal is not None else scenario.start + scenario.deltas
        if judge.expected < goal:
            out.append(
                Violation(
                    "finish",
                    f"deltas {scenario.start}..{goal - 1} wanted, the replica expects "
                    f"{judge.expected} at the end"
                    + (
                        f" (the origin was still running at the {options.deadline:g} s deadline)"
                        if timed_out
                        else f" (it exited {code})"
                    ),
                )
            )
        elif timed_out or code != 0:
            out.append(
                Violation(
                    "finish",
                    "the origin did not exit 0 after its deltas: "
                    + ("still running" if timed_out else f"exit {code}"),
                )
            )
        return out
    assert scenario.code is not None
    if judge.stopped_by is None:
        out.append(
            Violation(
                "error-stop", f"no transfer completed, so {scenario.code.value} was never answered"
            )
        )
    elif timed_out:
        out.append(
            Violation(
                "error-stop",
                f"still running {options.deadline:g} s into the "
                f"scenario after {scenario.code.value}",
            )
        )
    elif code == 0:
        out.append(Violation("error-stop", f"exited 0 after {scenario.code.value}"))
    elif scenario.code.value not in log.read_text(errors="replace"):
        out.append(Violation("error-stop", f"its output does not name {scenario.code.value}"))
    return out


def _stopped_after(scenario: OriginScenario, judge: OriginJudge, log: Path) -> list[Violation]:
    """An origin may stop (non-zero) where it could go on, if it asked the replica's state
    and says why: it skipped nothing and sent nothing wrong (the rules say so)."""
    assert scenario.code is not None
    if judge.reask_needed:
        return [Violation("re-ask", f"stopped after {scenario.code.value} without asking delta.rq")]
    if scenario.code.value not in log.read_text(errors="replace"):
        return [Violation("error-stop", f"stopped; its output does not name {scenario.code.value}")]
    return []
