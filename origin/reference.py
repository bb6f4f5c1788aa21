"""The reference origin: deltas from a source (the seeded workload, or saved deltas), each
sent through an `OriginSession` in the order the replica expects them.

Ask the replica's state; send the delta it expects and wait until it is applied; go on with
the next. A `Resync` (the replica expects another delta) asks the state again and resumes
from there. While the replica applies delta N, delta N + 1 is read and framed in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from origin.client import OriginClient
from origin.session import DeltaOutcome, OriginSession, Resync, SessionOptions
from origin.sources import DeltaSource, SourceDelta
from protocol.framing import Chunk

log = structlog.get_logger("origin")


@dataclass(frozen=True)
class _Framed:
    delta: SourceDelta
    framing: tuple[str, list[Chunk]]  # requestId, chunks


class ReferenceOrigin:
    def __init__(
        self,
        client: OriginClient,
        source: DeltaSource,
        options: SessionOptions | None = None,
        on_delta: Callable[[DeltaOutcome], None] | None = None,
        session_class: type[OriginSession] = OriginSession,
    ) -> None:
        self.source = source
        self.session = session_class(client, source.schema, options)
        self.on_delta = on_delta or (lambda _: None)

    async def run(self, count: int | None = None) -> list[DeltaOutcome]:
        """Send up to `count` deltas (None: until the source ends), from what the replica
        expects. Raises ReplicaRefused or NoAnswer when it cannot go on.

        While the replica applies delta N, delta N + 1 is read and framed in a thread, so
        the next send does not wait for it (still one delta in flight, as the protocol
        requires)."""
        outcomes: list[DeltaOutcome] = []
        expected = (await self.session.state()).expected_delta_num
        ahead: tuple[int, asyncio.Task[_Framed | None]] | None = None
        while count is None or len(outcomes) < count:
            framed = None
            if ahead is not None:  # always waited for: the source is never read by two threads
                (number, task), ahead = ahead, None
                await asyncio.wait([task])
                if number == expected:  # else a resync made it useless
                    framed = task.result()
            framed = framed or self._prepare(expected)
            if framed is None:
                log.info("source has no more deltas", next=expected)
                break

            def read_ahead(number: int = expected + 1) -> None:
                nonlocal ahead
                if count is None or len(outcomes) + 1 < count:
                    ahead = (number, asyncio.create_task(asyncio.to_thread(self._prepare, number)))

            try:
                outcome = await self.session.transfer(
                    framed.delta, framed.framing, on_sent=read_ahead
                )
            except Resync:
                expected = (await self.session.state()).expected_delta_num
                log.info("resuming from the replica's state", expected=expected)
                continue
            outcomes.append(outcome)
            self.on_delta(outcome)
            expected += 1
        if ahead is not None:
            await asyncio.wait([ahead[1]])
        return outcomes

    def _prepare(self, number: int) -> _Framed | None:
        delta = self.source.delta(number)
        return None if delta is None else _Framed(delta, self.session.frame(delta))
