"""An origin's side of the protocol, for one datamart: ask the replica's state, send one
delta's transfer and wait until the replica applied it, resending as the protocol allows. The
reference origin (`origin.reference`), the CDC origin and the conformance harness's faulty
origins all drive a replica through it.

A transfer (`OriginSession.transfer`):

1. Frame delta N (one stream per table, `chunk_rows` rows per chunk) under a new
   requestId and produce every chunk on `delta.in`.
2. Wait for `delta.in.rs` of that requestId:
   - OK: delta N is done.
   - INCOMPLETE_DELTA: resend only the chunks its message names, same requestId (or, when
     it says the replica removed the transfer, all of it under a new requestId).
   - OUT_OF_SEQUENCE: `Resync`: the caller asks the state and resumes from it.
   - LOAD_FAILED: resend under a new requestId, a few times, with backoff.
   - any other error: the origin cannot fix it (`ReplicaRefused`).
3. No answer within the timeout: ask the state. Delta N applied → done (the answer was
   lost); our transfer open with gaps → send the gaps; loading → wait on; the replica
   knows nothing of it → resend under a new requestId; it expects an earlier delta →
   `Resync`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from origin.client import OriginClient
from origin.errors import NoAnswer, ReplicaRefused
from origin.sources import SourceDelta
from podd_runtime.backoff import Backoff
from protocol.errors import ErrorCode
from protocol.framing import Chunk, frame_bodies, frame_delta
from protocol.gaps import parse_gaps, says_removed
from protocol.messages import DeltaInResult, DeltaState, DeltaStatus, ReplicaState
from protocol.schema import LogicalSchema

log = structlog.get_logger("origin")


def chunks_missing(chunks: Iterable[Chunk], missing: str | Iterable[str]) -> list[Chunk]:
    """The chunks that the gaps name (`stream S chunks A-B`; `stream S last chunk` means
    the stream's tail is unknown to the replica, so the whole stream is sent again)."""
    gaps = parse_gaps(missing)

    def named(chunk: Chunk) -> bool:
        number = chunk.key.chunk_number
        return any(
            gap.stream == chunk.key.stream_number
            and (gap.first is None or gap.last is None or gap.first <= number <= gap.last)
            for gap in gaps
        )

    return [c for c in chunks if named(c)]


@dataclass(frozen=True)
class DeltaOutcome:
    """One delta the replica applied, as the origin saw it."""

    delta_num: int
    rows: int
    chunks_sent: int
    seconds: float
    result: DeltaInResult | None  # None: applied, but its answer was lost (seen in delta.rs)
    resends: int


@dataclass
class SessionOptions:
    chunk_rows: int = 1000
    answer_timeout: float = 120.0
    state_timeout: float = 30.0
    state_attempts: int = 3
    load_failed_retries: int = 3
    retry_backoff: float = 2.0
    #: Chunks are sent at this many rows per second (0: unpaced).
    rows_per_second: float = 0.0


class Resync(Exception):
    """The replica expects another delta than the one in flight."""


class OriginSession:
    """One datamart's protocol session with its replica, over an `OriginClient`."""

    def __init__(
        self,
        client: OriginClient,
        schema: LogicalSchema,
        options: SessionOptions | None = None,
    ) -> None:
        self.client = client
        self.schema = schema
        self.options = options or SessionOptions()

    async def state(self) -> DeltaState:
        """`delta.rq` until answered; refuses a replica that does not serve the datamart."""
        for _ in range(self.options.state_attempts):
            state = await self.client.ask(self.schema.datamart, self.options.state_timeout)
            if state is None:
                log.warning("no delta.rs yet; asking again", datamart=self.schema.datamart)
                continue
            if (
                state.state is ReplicaState.FAILED
                and state.error_code == ErrorCode.UNKNOWN_DATAMART
            ):
                raise ReplicaRefused(
                    state.expected_delta_num, state.error_code, state.error_message or ""
                )
            return state
        raise NoAnswer(
            f"no delta.rs for {self.schema.datamart} after {self.options.state_attempts} "
            f"requests of {self.options.state_timeout:g} s: is a replica agent listening on "
            f"{self.client.settings.topic_delta_rq}?"
        )

    async def transfer(
        self,
        delta: SourceDelta,
        framing: tuple[str, list[Chunk]] | None = None,
        *,
        on_sent: Callable[[], None] | None = None,
    ) -> DeltaOutcome:
        """Send one delta until the replica applied it (`framing`: its requestId and
        chunks, when already framed); `on_sent` runs once its chunks are acknowledged."""
        started = time.perf_counter()
        resends = load_failures = 0
        request_id, chunks = framing or self.frame(delta)
        sent = await self.client.send_chunks(chunks, rows_per_second=self.options.rows_per_second)
        if on_sent is not None:
            on_sent()
        seen = 0  # answers of this requestId already handled
        while True:
            result = await self.client.result(request_id, self.options.answer_timeout, after=seen)
            if result is not None:
                seen += 1
            if result is not None and result.status is DeltaStatus.OK:
                return DeltaOutcome(
                    delta.num, delta.rows, sent, time.perf_counter() - started, result, resends
                )
            if result is None:
                state = await self.state()
                log.warning("no delta.in.rs in time", deltaNum=delta.num, requestId=request_id)
                if state.expected_delta_num > delta.num:
                    return DeltaOutcome(
                        delta.num, delta.rows, sent, time.perf_counter() - started, None, resends
                    )
                if state.expected_delta_num < delta.num:
                    raise Resync
                ours = [p for p in state.in_progress if p.request_id == request_id]
                if ours and ours[0].missing:
                    again = chunks_missing(chunks, ours[0].missing)
                elif ours or state.state is ReplicaState.LOADING:
                    continue  # complete there, or loading: wait on
                else:  # the replica has nothing of it: start over
                    request_id, chunks = self.frame(delta)
                    seen, again = 0, chunks
            elif result.error_code == ErrorCode.INCOMPLETE_DELTA and says_removed(
                result.error_message
            ):  # nothing of it is kept, and its requestId is finished there: start over
                request_id, chunks = self.frame(delta)
                seen, again = 0, chunks
            elif result.error_code == ErrorCode.INCOMPLETE_DELTA:
                again = chunks_missing(chunks, [result.error_message or ""])
                if not again:  # nothing parsable named: send all of it again
                    again = chunks
            elif result.error_code == ErrorCode.OUT_OF_SEQUENCE:
                raise Resync
            elif (
                result.error_code == ErrorCode.LOAD_FAILED
                and load_failures < self.options.load_failed_retries
            ):
                load_failures += 1
                await asyncio.sleep(Backoff(self.options.retry_backoff).delay(load_failures))
                request_id, chunks = self.frame(delta)
                seen, again = 0, chunks
            else:  # STOP_CODES, or LOAD_FAILED once its resends are used up
                raise ReplicaRefused(
                    delta.num, result.error_code or "ERROR", result.error_message or ""
                )
            resends += 1
            sent += await self.client.send_chunks(again)
            log.info("resent", deltaNum=delta.num, requestId=request_id, chunks=len(again))

    def frame(self, delta: SourceDelta) -> tuple[str, list[Chunk]]:
        """A new requestId for `delta`, and its chunks: of its bodies written already, or of
        its rows."""
        request_id = f"{self.schema.datamart}-{delta.num}-{uuid.uuid4()}"
        if delta.bodies is not None:
            written = frame_bodies(
                self.schema,
                request_id=request_id,
                delta_num=delta.num,
                delta_date=delta.date,
                bodies=delta.bodies,
            )
            return request_id, list(written)
        chunks = frame_delta(
            self.schema,
            request_id=request_id,
            delta_num=delta.num,
            delta_date=delta.date,
            rows_by_table=delta.rows_by_table,
            chunk_rows=self.options.chunk_rows,
        )
        return request_id, list(chunks)
