"""What the scenarios share: the origin connection, the datamart's reference model, and the
checks every scenario makes of an answer, of `delta.rs` and (with a DSN) of the replica."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from origin.client import OriginClient
from origin.sources import START_DATE
from protocol.apply_model import DeltaRow, ReplicaModel, apply_delta
from protocol.errors import ErrorCode
from protocol.framing import Chunk, frame_delta
from protocol.messages import DeltaInResult, DeltaState, DeltaStatus
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from replica_store.replica_reader import differences


class ScenarioFailed(AssertionError):
    """The agent broke a rule; the message says which and how."""


class ScenarioSkipped(Exception):
    """The scenario cannot run with the options given."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise ScenarioFailed(message)


@dataclass(frozen=True)
class HarnessOptions:
    rows_per_delta: int = 60
    seed: int = 7
    #: Seconds to wait for an answer (a load included).
    answer_timeout: float = 120.0
    #: Seconds to watch for answers that must not come (a duplicate, a dropped chunk).
    quiet_period: float = 2.0
    #: The agent's INCOMPLETE_DELTA timeout plus margin; 0 skips the scenario that waits for it.
    incomplete_wait: float = 0.0
    #: Rows of the delta whose load `delta.rs` must show as LOADING.
    load_rows: int = 200_000


@dataclass(frozen=True)
class AppliedDelta:
    num: int
    date: datetime
    rows_by_table: Mapping[str, Sequence[DeltaRow]]
    result: DeltaInResult


@dataclass
class Context:
    client: OriginClient
    schema: LogicalSchema
    options: HarnessOptions
    dsn: str | None = None
    model: ReplicaModel = field(init=False)
    applied: list[AppliedDelta] = field(default_factory=list)
    rng: random.Random = field(init=False)
    _workload: Workload = field(init=False)

    def __post_init__(self) -> None:
        self.model = ReplicaModel(self.schema)
        spec = WorkloadSpec(rows_per_delta=self.options.rows_per_delta, seed=self.options.seed)
        self._workload = Workload(self.schema, spec)
        self.rng = random.Random(self.options.seed)  # noqa: S311 (reproducible, not secret)

    # --- building transfers ---------------------------------------------------------------

    @property
    def expected(self) -> int:
        return self.model.expected_delta_num

    @staticmethod
    def date_of(num: int) -> datetime:
        return START_DATE + timedelta(hours=num)

    def next_rows(self) -> dict[str, list[DeltaRow]]:
        return self._workload.next_delta()

    def frame(
        self,
        num: int,
        rows_by_table: Mapping[str, Sequence[DeltaRow]],
        *,
        date: datetime | None = None,
        chunk_rows: int = 10,
        schema: LogicalSchema | None = None,
    ) -> tuple[str, list[Chunk]]:
        request_id = f"conformance-{num}-{uuid.uuid4()}"
        chunks = frame_delta(
            schema or self.schema,
            request_id=request_id,
            delta_num=num,
            delta_date=date or self.date_of(num),
            rows_by_table=rows_by_table,
            chunk_rows=chunk_rows,
        )
        return request_id, list(chunks)

    async def send(self, chunks: Iterable[Chunk], *, shuffle: bool = False) -> None:
        """Produce chunks in order, or shuffled over every partition of `delta.in`."""
        await self.client.send_chunks(chunks, shuffle=self.rng if shuffle else None)

    def last_applied(self) -> AppliedDelta:
        check(bool(self.applied), "needs an applied delta, and no earlier scenario applied one")
        return self.applied[-1]

    # --- judging answers ------------------------------------------------------------------

    async def answer(self, request_id: str, *, after: int = 0) -> DeltaInResult:
        result = await self.client.result(request_id, self.options.answer_timeout, after=after)
        check(
            result is not None,
            f"no delta.in.rs for transfer {request_id} in {self.options.answer_timeout:g} s",
        )
        assert result is not None
        return result

    async def final_answer(self, request_id: str) -> DeltaInResult:
        """The first answer that is not the interim INCOMPLETE_DELTA."""
        seen = 0
        while True:
            result = await self.answer(request_id, after=seen)
            if result.error_code != ErrorCode.INCOMPLETE_DELTA:
                return result
            seen += 1

    async def no_more_answers(self, request_id: str, count: int) -> None:
        """After a quiet period, the transfer still has exactly `count` answers."""
        await asyncio.sleep(self.options.quiet_period)
        answers = self.client.results.get(request_id, [])
        check(
            len(answers) == count,
            f"transfer {request_id} got {len(answers)} answers, want {count}: "
            + "; ".join(f"{a.status}/{a.error_code}" for a in answers),
        )

    async def expect_applied(
        self, request_id: str, num: int, rows_by_table: Mapping[str, Sequence[DeltaRow]]
    ) -> DeltaInResult:
        """OK for delta `num` with the model's counts; the model takes the delta."""
        result = await self.final_answer(request_id)
        check(
            result.status is DeltaStatus.OK,
            f"delta {num}: {result.status} {result.error_code}: {result.error_message}",
        )
        check(result.delta_num == num, f"answered deltaNum {result.delta_num}, want {num}")
        date = self.date_of(num)
        check(result.delta_date == date, f"answered deltaDate {result.delta_date}, want {date}")
        # The agent says the delta is applied: from here on the model holds it too.
        self.model, counts = apply_delta(self.model, num, date, rows_by_table)
        self.applied.append(AppliedDelta(num, date, rows_by_table, result))
        got = {
            (t.table_name, t.rows_received, t.rows_upserted, t.rows_deleted) for t in result.tables
        }
        want = {(c.table_name, c.rows_received, c.rows_upserted, c.rows_deleted) for c in counts}
        check(got == want, f"delta {num}: table counts {sorted(got)}, want {sorted(want)}")
        await self.expect_state(expected=num + 1)
        self.check_replica()
        return result

    async def expect_rejected(self, request_id: str, code: ErrorCode) -> DeltaInResult:
        """ERROR `code`; the replica and its state unchanged."""
        result = await self.final_answer(request_id)
        check(
            result.status is DeltaStatus.ERROR and result.error_code == code,
            f"answered {result.status} {result.error_code} ({result.error_message}), want {code}",
        )
        check(bool(result.error_message), f"{code} came without an errorMessage")
        await self.expect_state(expected=self.expected)
        self.check_replica()
        return result

    async def state(self, datamart: str | None = None) -> DeltaState:
        state = await self.client.ask(datamart or self.schema.datamart, self.options.answer_timeout)
        check(state is not None, "no delta.rs answered the delta.rq")
        assert state is not None
        return state

    async def expect_state(self, *, expected: int) -> DeltaState:
        state = await self.state()
        check(
            state.expected_delta_num == expected,
            f"delta.rs says expectedDeltaNum {state.expected_delta_num}, want {expected}",
        )
        if self.applied:
            last = self.applied[-1]
            check(
                state.delta_ok_num == last.num and state.delta_ok_date == last.date,
                f"delta.rs says deltaOk {state.delta_ok_num} at {state.delta_ok_date}, "
                f"want {last.num} at {last.date}",
            )
        return state

    def check_replica(self, *, as_of: bool = False) -> None:
        if self.dsn is None:
            return
        span = range(self.expected) if as_of else None
        found = differences(self.dsn, self.model, as_of=span)
        check(not found, "the replica differs from the reference model: " + "; ".join(found))
