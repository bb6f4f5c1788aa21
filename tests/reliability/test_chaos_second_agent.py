"""When the chaos run starts its second agent (pure logic, no agent runs): only while the first
is up and holding its replica, and never while the run is killing and restarting it.

CI failed on this with a ClickHouse replica: the second agent started while the first was being
restarted after a kill, took the engine's directory lock, and ran as the datamart's writer; the
first's restarts were refused (exit code 2) until the run gave up."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest

from reliability import chaos_faults
from reliability.chaos_faults import ExtraFaults


class Record:
    def __init__(self) -> None:
        self.faults: Counter[str] = Counter()
        self.skipped: dict[str, str] = {}
        self.notes: list[str] = []
        self.failures: list[str] = []

    def recovered(self, fault: str, seconds: float) -> None:
        pass


class First:
    """The first agent as the supervisor sees it: up, or between a kill and its restart."""

    def __init__(self) -> None:
        self.up = True
        #: The run is killing it and starting it again (it may still look up, for a moment).
        self.killing = False

    def running(self) -> bool:
        return self.up


def run_second_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: First, meanwhile: Any
) -> tuple[list[bool], Record]:
    """The second-agent fault, with `meanwhile(faults)` run beside it (and first); whether the
    first was up, and not being killed, each time a second agent was started."""
    seen: list[bool] = []

    def second_agent(spec: object, data_dir: Path) -> tuple[int, float]:
        seen.append(first.running() and not first.killing)
        data_dir.mkdir(parents=True)
        (data_dir / "second-agent.log").write_text(
            "ClickHouse directory is in use by another process"
        )
        return 2, 0.1

    monkeypatch.setattr(chaos_faults, "second_agent", second_agent)
    record = Record()

    async def go() -> None:
        faults = ExtraFaults(
            8,
            cast(Any, None),
            tmp_path,
            lambda: "",
            None,
            [],
            record,
            clickhouse=True,
            first_running=first.running,
        )
        await asyncio.gather(meanwhile(faults), faults._inject("second agent"))

    asyncio.run(go())
    return seen, record


def test_the_second_agent_waits_for_the_first_to_be_up_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = First()
    first.up = False  # killed; its restart takes a while

    async def restart(faults: ExtraFaults) -> None:
        await asyncio.sleep(3)
        first.up = True

    started = time.monotonic()
    seen, record = run_second_agent(tmp_path, monkeypatch, first, restart)
    assert seen == [True]
    assert time.monotonic() - started >= 3
    assert record.notes == [
        "the second agent stopped at start in 0.1 s (exit code 2), naming the first"
    ]
    assert not record.failures


def test_a_kill_in_progress_keeps_the_second_agent_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = First()

    async def kill_and_restart(faults: ExtraFaults) -> None:
        async with faults.turn:  # as the run holds it from the kill to the restart's end
            first.killing = True
            await asyncio.sleep(1)  # the kill's thread has not marked the agent down yet
            first.up = False
            await asyncio.sleep(2)
            first.up, first.killing = True, False

    seen, record = run_second_agent(tmp_path, monkeypatch, first, kill_and_restart)
    assert seen == [True]
    assert record.notes == [
        "the second agent stopped at start in 0.1 s (exit code 2), naming the first"
    ]
    assert not record.failures
