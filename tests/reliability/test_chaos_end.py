"""When the chaos run's origin stops (pure logic, no broker): not at its own last outcome,
but when the replica's `delta.rs` says it holds every delta, once the faults are all in.

CI failed on this: the database was rewound by two deltas after the origin's last delta was
answered, the origin stopped at its own count, and deltas 18 and 19 were missing."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from reliability.chaos import _deltas_left
from reliability.chaos_report import ChaosRun


class Replica:
    """`OriginSession.state` as the replica answers it: it expects `expected`."""

    def __init__(self, expected: int) -> None:
        self.expected, self.asked = expected, 0

    async def state(self) -> Any:
        self.asked += 1
        return SimpleNamespace(expected_delta_num=self.expected)


def left(done: list[int], expected: int, injected: bool, timeout: float = 5) -> tuple[int, int]:
    async def go() -> tuple[int, int]:
        event = asyncio.Event()
        if injected:
            event.set()
        replica = Replica(expected)
        outcomes = cast(Any, [SimpleNamespace(delta_num=n) for n in done])
        count = await _deltas_left(20, outcomes, cast(Any, replica), event, ChaosRun(20), timeout)
        return count, replica.asked

    return asyncio.run(go())


def test_before_its_last_delta_the_origin_counts_its_own_outcomes() -> None:
    assert left(list(range(15)), expected=15, injected=False) == (4, 0)  # all but the last


def test_the_last_delta_waits_until_every_fault_is_in() -> None:
    assert left(list(range(19)), expected=19, injected=True) == (1, 1)
    run_short = left(list(range(19)), expected=19, injected=False, timeout=0.2)
    assert run_short == (0, 0)  # the faults never came in: the run reports a failure


def test_a_replica_rewound_after_the_last_delta_gets_the_lost_deltas_again() -> None:
    assert left(list(range(20)), expected=18, injected=True) == (2, 1)


def test_the_run_ends_when_the_replica_holds_every_delta() -> None:
    assert left([*range(20), 18, 19], expected=20, injected=True) == (0, 1)


def test_a_fault_still_being_injected_is_waited_for_and_then_named() -> None:
    run = ChaosRun(20)

    async def go() -> int:
        outcomes = cast(Any, [SimpleNamespace(delta_num=n) for n in range(20)])
        return await _deltas_left(20, outcomes, cast(Any, Replica(20)), asyncio.Event(), run, 0.2)

    assert asyncio.run(go()) == 0
    assert run.failures == ["the faults were still being injected 0.2 s before the last delta"]
