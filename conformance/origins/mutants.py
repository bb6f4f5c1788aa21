"""Faulty copies of the reference origin, each with one seeded fault: proof that
`podd-conformance origin` judges (each must fail, on the scenario and rule in `MUTANTS`).

    python -m conformance.origins.mutants NAME run --broker ... (podd-origin's `run` flags)

Each is `podd-origin run` with one part of `origin.reference.ReferenceOrigin` replaced. They are
test tools, never an origin to use.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import origin.session as session_module
from origin.cli import build_parser, settings_from
from origin.client import OriginClient
from origin.progress import DeltaProgress
from origin.reference import ReferenceOrigin
from origin.session import DeltaOutcome, OriginSession
from origin.sources import START_DATE, SourceDelta
from podd_runtime.exit_codes import run_command
from protocol.framing import Chunk
from protocol.messages import DeltaStatus


@dataclass(frozen=True)
class Mutant:
    fault: str
    scenario: str  # the scenario that must fail
    rule: str  # the judge's rule its first violation there must name


MUTANTS = {
    "skip-chunk": Mutant(
        "chunk 1 of the first stream is never sent: numbering starts at 2",
        "fresh-replica",
        "chunk-numbering",
    ),
    "omit-empty-stream": Mutant(
        "streams with no rows are left out, streamTotal lowered", "fresh-replica", "empty-stream"
    ),
    "second-last-chunk": Mutant(
        "the first stream gets a second last chunk", "fresh-replica", "last-chunk"
    ),
    "resend-everything": Mutant(
        "a gap report is answered with every chunk of the delta",
        "incomplete-resend",
        "resend-exact",
    ),
    "no-wait": Mutant(
        "the next delta is sent without waiting for the answer", "slow-answer", "wait-answer"
    ),
    "ignore-error": Mutant(
        "an ERROR answer is taken as OK and the next delta sent", "error-bad-chunk", "error-stop"
    ),
    "same-date": Mutant("every delta carries delta 0's date", "fresh-replica", "date-order"),
    "reuse-request-id": Mutant(
        "every transfer of the datamart uses one requestId", "fresh-replica", "request-id"
    ),
}


def _with_key(chunk: Chunk, **fields: Any) -> Chunk:
    return replace(chunk, key=chunk.key.model_copy(update=fields))


class MutantSession(OriginSession):
    mutant = ""

    def frame(self, delta: SourceDelta) -> tuple[str, list[Chunk]]:
        if self.mutant == "same-date":
            delta = replace(delta, date=START_DATE)
        request_id, chunks = super().frame(delta)
        if self.mutant == "skip-chunk":
            chunks = [
                _with_key(c, chunk_number=c.key.chunk_number + 1) if c.key.stream_number == 1 else c
                for c in chunks
            ]
        elif self.mutant == "omit-empty-stream":
            kept = {c.key.stream_number for c in chunks if c.rows}
            numbers = {old: new for new, old in enumerate(sorted(kept), start=1)}
            chunks = [
                _with_key(c, stream_number=numbers[c.key.stream_number], stream_total=len(kept))
                for c in chunks
                if c.key.stream_number in kept
            ]
        elif self.mutant == "second-last-chunk":
            last = max(c.key.chunk_number for c in chunks if c.key.stream_number == 1)
            first = next(c for c in chunks if c.key.stream_number == 1)
            chunks = [
                *chunks,
                replace(
                    _with_key(first, chunk_number=last + 1, is_last_chunk=True), body=b"", rows=0
                ),
            ]
        elif self.mutant == "reuse-request-id":
            request_id = f"{self.schema.datamart}-transfer"
            chunks = [_with_key(c, request_id=request_id) for c in chunks]
        return request_id, chunks

    async def transfer(
        self,
        delta: SourceDelta,
        framing: tuple[str, list[Chunk]] | None = None,
        *,
        on_sent: Callable[[], None] | None = None,
    ) -> DeltaOutcome:
        if self.mutant == "no-wait":
            started = time.perf_counter()
            _, chunks = framing or self.frame(delta)
            sent = await self.client.send_chunks(chunks)
            return DeltaOutcome(delta.num, delta.rows, sent, time.perf_counter() - started, None, 0)
        if self.mutant == "ignore-error":
            request_id, chunks = framing or self.frame(delta)
            started = time.perf_counter()
            sent = await self.client.send_chunks(chunks)
            result = await self.client.result(request_id, self.options.answer_timeout)
            if result is not None and result.status is DeltaStatus.ERROR:
                return DeltaOutcome(
                    delta.num, delta.rows, sent, time.perf_counter() - started, None, 0
                )
            if result is not None:
                return DeltaOutcome(
                    delta.num, delta.rows, sent, time.perf_counter() - started, result, 0
                )
        return await super().transfer(delta, framing, on_sent=on_sent)


async def drive(
    argv: Sequence[str],
    session_class: type[OriginSession] = OriginSession,
    client_class: type[OriginClient] = OriginClient,
) -> tuple[ReferenceOrigin, int]:
    """`podd-origin run` with these flags, its protocol session and its client of the given
    classes: the origin, and how many deltas it sent."""
    from origin.cli import source_for  # noqa: PLC0415

    settings = settings_from(build_parser().parse_args(list(argv)))
    schema = settings.logical_schema()
    async with client_class(settings, settings.bootstrap_servers()) as client:
        driver = ReferenceOrigin(
            client,
            source_for(settings, schema),
            settings.session_options(),
            DeltaProgress(settings.deltas, sys.stdout),
            session_class=session_class,
        )
        outcomes = await driver.run(settings.deltas)
    return driver, len(outcomes)


def tool_main(
    kind: str,
    names: Sequence[str],
    argv: Sequence[str] | None,
    run: Callable[[str, list[str]], Any],
) -> int:
    """The command line of a test origin: `python -m MODULE NAME run ...`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in names:
        module = f"conformance.origins.{kind}s"
        print(f"usage: python -m {module} {{{','.join(names)}}} run ...", file=sys.stderr)
        return 2
    return run_command(f"{kind} {args[0]}", lambda: asyncio.run(run(args[0], args[1:])))


async def _drive(name: str, argv: Sequence[str]) -> int:
    if name == "resend-everything":
        session_module.chunks_missing = lambda chunks, missing: list(chunks)

    class Named(MutantSession):
        mutant = name

    _, sent = await drive(argv, Named)
    print(f"{sent} delta(s) sent by the {name} mutant")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return tool_main("mutant", list(MUTANTS), argv, _drive)


if __name__ == "__main__":
    raise SystemExit(main())
