"""The origin scenarios: what the checking replica does in each, and what must come of it.

Every scenario judges every message by all of `judge`'s rules; each adds a situation (the
replica's state, an answer) and what the origin must do about it. An origin is run once per
scenario, on fresh topics, with `{deltas}` deltas to send (`origin_runner`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from conformance.origins.checking_replica import (
    CheckingReplica,
    Script,
    now_ms,
    other_request_id,
)
from conformance.origins.seen import TransferSeen
from conformance.scenario import ScenarioBase
from protocol.errors import STOP_CODES, ErrorCode
from protocol.gaps import Gap, removed_message

Expect = Literal["finish", "stop", "finish-or-stop"]


@dataclass(frozen=True)
class OriginScenario(ScenarioBase):
    """An origin scenario: the checking replica's script, and how the origin must end."""

    make: Callable[[], Script]
    deltas: int = 3
    start: int = 0
    #: "finish": the origin gets `deltas` deltas applied and exits 0; "stop": it exits
    #: non-zero, saying `code`, and sends nothing after the refusal; "finish-or-stop": either,
    #: a stop only after asking `delta.rq` (an origin may leave the replica to an operator).
    expect: Expect = "finish"
    code: ErrorCode | None = None
    #: The delta the replica must expect at the end (None: `start + deltas`).
    goal: int | None = None


class _Once(Script):
    """A script that treats the first complete transfer of delta `at` specially."""

    def __init__(self, at: int = 0) -> None:
        self.at = at
        self.done = False

    def first(self, transfer: TransferSeen) -> bool:
        if self.done or transfer.key.delta_num != self.at:
            return False
        self.done = True
        return True


class RefuseOnce(_Once):
    def __init__(self, code: ErrorCode) -> None:
        super().__init__()
        self.code = code

    async def on_complete(self, replica: CheckingReplica, transfer: TransferSeen) -> None:
        if self.first(transfer):
            await replica.answer_error(transfer, self.code)
        else:
            await replica.answer_ok(transfer)


class Rewound(_Once):
    """Deltas 0 and 1 apply; then the replica's database is restored to delta 0, and delta 2
    is answered OUT_OF_SEQUENCE: the origin must ask delta.rq and resend from delta 1."""

    def __init__(self) -> None:
        super().__init__(at=2)

    async def on_complete(self, replica: CheckingReplica, transfer: TransferSeen) -> None:
        if self.first(transfer):
            replica.judge.rewound(1)
            await replica.answer_error(
                transfer,
                ErrorCode.OUT_OF_SEQUENCE,
                "the replica expects delta 1 (its database was restored)",
            )
        else:
            await replica.answer_ok(transfer)


class IncompleteOnce(_Once):
    """INCOMPLETE_DELTA naming one chunk of the biggest stream: only it may come again."""

    async def on_complete(self, replica: CheckingReplica, transfer: TransferSeen) -> None:
        if self.first(transfer):
            await replica.answer_incomplete(transfer, [_one_chunk(transfer)])
        else:
            await replica.answer_ok(transfer)


class LastChunkOnce(_Once):
    """INCOMPLETE_DELTA naming a stream's last chunk ("stream S last chunk": the replica
    does not know where the stream ends): that stream's chunks may come again, no other."""

    async def on_complete(self, replica: CheckingReplica, transfer: TransferSeen) -> None:
        if self.first(transfer):
            await replica.answer_incomplete(transfer, [Gap(_one_chunk(transfer).stream)])
        else:
            await replica.answer_ok(transfer)


class RemovedOnce(_Once):
    """INCOMPLETE_DELTA saying the replica removed the transfer (its staging budget): the
    delta must come again whole, under a new requestId."""

    async def on_complete(self, replica: CheckingReplica, transfer: TransferSeen) -> None:
        if self.first(transfer):
            message = removed_message([_one_chunk(transfer)])
            await replica.answer_error(transfer, ErrorCode.INCOMPLETE_DELTA, message)
        else:
            await replica.answer_ok(transfer)


class MissingInState(_Once):
    """No answer; the next `delta.rq` is told one chunk is missing: only it may come again."""

    async def on_complete(self, replica: CheckingReplica, transfer: TransferSeen) -> None:
        if self.first(transfer):
            replica.judge.pretend_lost(transfer, [_one_chunk(transfer)], now_ms())
        else:
            await replica.answer_ok(transfer)


class SlowAnswer(_Once):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    async def on_complete(self, replica: CheckingReplica, transfer: TransferSeen) -> None:
        delay = self.seconds if self.first(transfer) else 0.0
        replica.later(replica.answer_ok(transfer, delay))


class LostAnswer(_Once):
    """Delta 0 is applied, its answer never sent: `delta.rq` shows it applied."""

    async def on_complete(self, replica: CheckingReplica, transfer: TransferSeen) -> None:
        if self.first(transfer):
            replica.judge.applied(transfer.key.delta_num, transfer.key.delta_date)
            transfer.final = replica.result(transfer)  # applied: a resend would be refused
            return
        await replica.answer_ok(transfer)


class DuplicateAnswer(_Once):
    """Delta 0's OK is sent again while delta 1 waits, then delta 1 is answered late."""

    def __init__(self, seconds: float) -> None:
        super().__init__(at=1)
        self.seconds = seconds
        self.previous: TransferSeen | None = None

    async def on_complete(self, replica: CheckingReplica, transfer: TransferSeen) -> None:
        if self.first(transfer) and self.previous is not None:
            await replica.send_result(replica.result(self.previous))
            replica.later(replica.answer_ok(transfer, self.seconds))
            return
        self.previous = transfer
        await replica.answer_ok(transfer)


class ForeignAnswer(_Once):
    """An OK for another requestId (same delta) first; the transfer's own answer late."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    async def on_complete(self, replica: CheckingReplica, transfer: TransferSeen) -> None:
        if self.first(transfer):
            await replica.send_result(replica.result(transfer, request_id=other_request_id()))
            replica.later(replica.answer_ok(transfer, self.seconds))
            return
        await replica.answer_ok(transfer)


class ReplicaRestart(_Once):
    """Delta 1 arrives, then the replica restarts and has lost it: no answer, and
    `delta.rq` shows delta 1 expected with nothing received."""

    def __init__(self) -> None:
        super().__init__(at=1)

    async def on_complete(self, replica: CheckingReplica, transfer: TransferSeen) -> None:
        if self.first(transfer):
            replica.forget(transfer)
            self.lost()
            return
        await replica.answer_ok(transfer)

    def lost(self) -> None:
        """What else happens once the transfer is lost (here nothing: the replica restarted)."""


class OriginRestart(ReplicaRestart):
    """Delta 1 arrives; the origin is killed (-9) before its answer and started again (the
    replica forgets the transfer: a restarted origin sends the delta anew)."""

    def __init__(self) -> None:
        super().__init__()
        #: Kills and restarts the origin (the runner sets it).
        self.restart: Callable[[], None] = lambda: None

    def lost(self) -> None:
        self.restart()


def _one_chunk(transfer: TransferSeen) -> Gap:
    number, stream = max(transfer.streams.items(), key=lambda item: len(item[1].chunks))
    last = stream.last or 1
    return Gap(number, last, last)


#: Seconds a late answer waits (the runner's answer timeout is longer).
LATE = 1.5


def scenarios() -> list[OriginScenario]:
    stop_codes = STOP_CODES
    out = [
        OriginScenario(
            "fresh-replica",
            "a replica with no delta: deltas 0, 1, 2 in order, "
            "every message framed by the protocol",
            Script,
        ),
        OriginScenario(
            "replica-at-n",
            "a replica at delta 6 expects 7: the origin starts there",
            Script,
            start=7,
            deltas=2,
        ),
        OriginScenario(
            "replica-ahead",
            "a replica at delta 999: nothing it has is sent again",
            Script,
            start=1000,
            deltas=1,
        ),
        OriginScenario(
            "incomplete-resend",
            "INCOMPLETE_DELTA names one chunk: exactly that chunk is resent, same requestId",
            IncompleteOnce,
            deltas=2,
        ),
        OriginScenario(
            "incomplete-last-chunk",
            "INCOMPLETE_DELTA names a stream's last chunk: that stream (or its last chunk) is "
            "resent, same requestId, nothing of another stream",
            LastChunkOnce,
            deltas=2,
        ),
        OriginScenario(
            "incomplete-removed",
            "INCOMPLETE_DELTA saying the replica removed the transfer: the delta again, whole, "
            "under a new requestId",
            RemovedOnce,
            deltas=2,
        ),
        OriginScenario(
            "state-missing-resend",
            "no answer; delta.rs names one chunk missing: exactly that chunk is resent",
            MissingInState,
            deltas=2,
        ),
        OriginScenario(
            "out-of-sequence",
            "the replica's database is restored to delta 0 and delta 2 is answered "
            "OUT_OF_SEQUENCE: delta.rq, then deltas 1 and 2 again, same rows",
            Rewound,
            expect="finish-or-stop",
            code=ErrorCode.OUT_OF_SEQUENCE,
            goal=2,
        ),
        OriginScenario(
            "load-failed",
            "LOAD_FAILED: the delta is resent, same rows, new requestId",
            lambda: RefuseOnce(ErrorCode.LOAD_FAILED),
            deltas=2,
        ),
        OriginScenario(
            "slow-answer",
            f"the answer comes {LATE:g} s late: nothing is sent before it",
            lambda: SlowAnswer(LATE),
            deltas=2,
        ),
        OriginScenario(
            "lost-answer",
            "delta 0 applied, its answer lost: delta.rq, then delta 1",
            LostAnswer,
            deltas=2,
        ),
        OriginScenario(
            "duplicate-answer",
            "delta 0's OK again while delta 1 waits: delta 2 waits for delta 1's own answer",
            lambda: DuplicateAnswer(LATE),
        ),
        OriginScenario(
            "foreign-answer",
            "an OK for another requestId: the origin waits for its own",
            lambda: ForeignAnswer(LATE),
            deltas=2,
        ),
        OriginScenario(
            "replica-restart",
            "the replica restarts and loses delta 1: it is resent, same rows",
            ReplicaRestart,
        ),
        OriginScenario(
            "origin-restart",
            "the origin is killed (-9) during delta 1 and "
            "started again: no delta skipped, none changed",
            OriginRestart,
        ),
    ]
    out += [
        OriginScenario(
            f"error-{code.value.lower().replace('_', '-')}",
            f"{code.value}: the origin stops with a clear message, sends nothing more",
            lambda code=code: RefuseOnce(code),  # type: ignore[misc]
            deltas=2,
            expect="stop",
            code=code,
        )
        for code in stop_codes
    ]
    return out
