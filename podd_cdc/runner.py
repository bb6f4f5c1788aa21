"""`podd-cdc run`: read CDC topics, cut deltas, drive the replica over the protocol.

1. Ask the replica's state (`delta.rq`) and reconcile it with the cut log: a replica ahead of
   the log, or behind its first record, is an error naming both; recorded deltas it has not
   applied are rebuilt from exactly their offsets and sent again.
2. Read every partition from where the last cut left it (or the start offsets).
3. When a delta is due, record its cut durably, then send it (`origin.session`) and wait for
   `delta.in.rs`; one delta in flight, as the protocol requires. The next delta is cut and
   framed meanwhile, and sent once the one in flight is applied.
4. Bad input stops reading its partition; what can still be cut before it is applied, then
   the run ends with the error. With a dead-letter topic, bad messages go there instead.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import structlog

from origin.client import OriginClient
from origin.session import OriginSession, Resync, SessionOptions
from origin.sources import SourceDelta
from podd_cdc.cutlog import Cut, CutLog
from podd_cdc.cutter import Cutter
from podd_cdc.cutters import AnyCutter
from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.dataworks_array_cutter import DataWorksArrayCutter
from podd_cdc.errors import AwaitingMetadata, BadInput, CdcError
from podd_cdc.intake import Handoff, Intake, make_decoder
from podd_cdc.membership import in_delta, rebuild
from podd_cdc.options import CdcOptions, CdcStats
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_array_cutter import QlikArrayCutter
from podd_cdc.qlik_cut import ColumnarDelta
from podd_cdc.records import Change, Position, Record
from podd_cdc.rows import digest_as_recorded
from podd_cdc.source_consumer import read_spans
from podd_cdc.topic_reader import TopicReader, partition_records
from protocol.body_writer import encode_body, record_bodies
from protocol.framing import CHUNK_CODEC, Chunk
from protocol.schema import LogicalSchema, Table

log = structlog.get_logger("podd_cdc")
#: The collector's thresholds while the origin runs (see `CdcOrigin.run`).
GC_THRESHOLDS = (100_000, 50, 100)
#: A progress line while reading, this often.
PROGRESS_SECONDS = 10.0


class CdcOrigin:
    def __init__(
        self,
        client: OriginClient,
        schema: LogicalSchema,
        options: CdcOptions,
        session_options: SessionOptions,
        out: Callable[[str], None],
    ) -> None:
        self.client = client
        self.schema = schema
        self.options = options
        self.session = OriginSession(client, schema, session_options)
        self.cutlog = CutLog(options.state_dir, schema.datamart)
        self.out = out
        self.stats = CdcStats()
        self.intake = Intake(options, schema, client, self.stats)
        self._named_silent: set[str] = set()
        self._progress_at = time.monotonic()

    # --- 1. reconcile -----------------------------------------------------------------
    async def run(self) -> CdcStats:
        """Run until `until_idle`, an error, or cancellation. The garbage collector runs less
        often meanwhile: the origin holds up to `max_pending` changes, and collecting every
        700 allocations rescanned them all (measured: a 50,000-change cut took 0.75 s with
        the default thresholds, 0.43 s with these)."""
        thresholds = gc.get_threshold()
        gc.set_threshold(*GC_THRESHOLDS)
        try:
            return await self._run()
        finally:
            gc.set_threshold(*thresholds)

    async def _run(self) -> CdcStats:
        expected = (await self.session.state()).expected_delta_num
        last = self.cutlog.last
        if last is not None:
            first = min(self.cutlog.cuts)
            if expected > last.delta + 1:
                raise CdcError(
                    f"the replica of {self.schema.datamart} expects delta {expected}, but the "
                    f"cut log in {self.options.state_dir} ends at delta {last.delta}: the "
                    "replica is ahead of this origin's cuts"
                )
            if expected < first:
                raise CdcError(
                    f"the replica expects delta {expected}, but the cut log in "
                    f"{self.options.state_dir} starts at delta {first}"
                )
            for number in range(expected, last.delta + 1):
                await self._send(self.cutlog.cuts[number], await self._rebuilt(number))
                self.stats.rebuilt += 1
            expected = last.delta + 1
        await self._live(expected)
        return self.stats

    async def _records(self, cut: Cut) -> list[tuple[Position, Record]]:
        """The records of `cut`'s recorded offsets, read back and decoded."""
        decoder = make_decoder(self.options, self.schema)
        records: list[tuple[Position, Record]] = []
        bootstrap = self.client.bootstrap
        async for message in read_spans(self.client.settings, bootstrap, cut.spans):
            try:
                record = decoder.decode(message.topic, message.value)
            except (BadInput, AwaitingMetadata):
                continue  # never part of a delta: sent to the dead-letter topic back then
            records.append((Position(message.topic, message.partition, message.offset), record))
        return records

    async def _rebuilt(self, number: int) -> dict[str, Any]:
        cut = self.cutlog.cuts[number]
        records = await self._records(cut)
        rows = rebuild(self.options.fmt, self.schema, cut, self.cutlog.get(number - 1), records)
        if digest_as_recorded(cut.digest, self.schema, rows) != cut.digest:
            raise CdcError(
                f"delta {number} read back from its recorded offsets differs from the delta "
                "recorded: the source topic changed under the cut log"
            )
        log.info("delta rebuilt from the cut log", deltaNum=number)
        return rows

    # --- 2-3. read, cut, send -----------------------------------------------------------
    async def _live(self, number: int) -> None:
        options = self.options
        batch = partition_records(options.bounds.max_rows, on_arrays=options.on_arrays)
        reader = TopicReader(self.client.settings, self.client.bootstrap, options.settle, batch)
        keys = await reader.start(options.topics)
        try:
            starts = await self._starts(reader, keys)
            for key, offset in starts.items():
                reader.seek(key, offset)
            cutter = self._cutter(starts)
            await self._seed_taken(cutter)
            handoff = Handoff()
            reading = asyncio.create_task(self.intake.run(reader, cutter, handoff))
            try:
                await self._cut_and_send(reader, cutter, reading, number, handoff)
            finally:
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)
        finally:
            await reader.stop()

    def _cutter(self, starts: dict[str, int]) -> AnyCutter:
        """The cutter: on arrays (`CdcOptions.on_arrays`), fed from read batches; else a
        change at a time."""
        last, bounds = self.cutlog.last, self.options.bounds
        decoder = self.intake.decoder
        if self.options.on_arrays and isinstance(decoder, QlikDecoder):
            return QlikArrayCutter(self.schema, decoder.by_name.__getitem__, starts, last, bounds)
        if self.options.on_arrays and isinstance(decoder, DataWorksDecoder):
            table_of = decoder.by_name.__getitem__
            return DataWorksArrayCutter(self.schema, table_of, starts, last, bounds)
        return Cutter(self.options.fmt, self.schema, starts, last, bounds)

    async def _seed_taken(self, cutter: AnyCutter) -> None:
        """Qlik, after a restart: the changes the last delta took, read back from its
        offsets, so that a copy of one written after its cut counts as a duplicate, as it
        would have in the run that cut it (`podd_cdc.sequence_guard`)."""
        last = self.cutlog.last
        if self.options.fmt != "qlik" or last is None:
            return
        started = time.monotonic()
        prev = self.cutlog.get(last.delta - 1)
        records = await self._records(last)
        taken = [
            r.identity
            for at, r in records
            if isinstance(r, Change) and in_delta("qlik", last, prev, at, r)
        ]
        cutter.remember_taken(taken)
        seconds = round(time.monotonic() - started, 3)
        log.info(
            "the last delta's changes read back",
            deltaNum=last.delta,
            changes=len(taken),
            seconds=seconds,
        )

    async def _starts(self, reader: TopicReader, keys: list[str]) -> dict[str, int]:
        last = self.cutlog.last
        first = await reader.first_offsets(self.options.start_latest)
        starts = {}
        for key in keys:
            if last is not None and key in last.spans:
                starts[key] = last.spans[key].next_lo
            else:
                starts[key] = self.options.start_offsets.get(key, first[key])
        return starts

    async def _cut_and_send(
        self,
        reader: TopicReader,
        cutter: AnyCutter,
        reading: asyncio.Task[None],
        number: int,
        handoff: Handoff,
    ) -> None:
        """Cut, frame and send, one delta in flight. While delta N is sent and applied, delta
        N + 1 is cut (recorded first, as every cut) and framed, so the replica does not wait
        on the origin between two deltas; `delta_waiting` is set while it waits (the
        intake then reads no further than delta N + 2's worth). It looks again after each
        batch the intake feeds, or after 50 ms."""
        sending: asyncio.Task[None] | None = None
        ready: tuple[Cut, SourceDelta, tuple[str, list[Chunk]]] | None = None
        try:
            while True:
                if reading.done():
                    reading.result()  # raises what stopped the reader
                    raise CdcError("the reader stopped")
                if sending is not None and sending.done():
                    finished, sending = sending, None
                    finished.result()  # raises what stopped the send
                if ready is not None and sending is None:
                    handoff.chunks_out.clear()  # set again once its chunks are on the broker
                    transfer = self._transfer(
                        *ready, lag=reader.lag(), on_sent=handoff.chunks_out.set
                    )
                    sending = asyncio.create_task(transfer)
                    ready = None
                    handoff.delta_waiting.clear()
                quiet = reader.quiet()
                if ready is None:
                    # By age only with nothing in flight and no full delta waiting unread.
                    backlog = reader.lag() >= self.options.bounds.max_rows
                    by_age = sending is None and not backlog
                    found, stop = self._cut(reader, cutter, quiet, number, by_age)
                    if found is not None:
                        ready = (found[0], *self._frame(*found))
                        handoff.delta_waiting.set()
                        number += 1
                        continue
                    if stop is not None:
                        if sending is None:
                            raise stop
                        await asyncio.wait([sending])  # what was cut before it is applied
                        continue
                if self._idle(reader, cutter, quiet) and sending is None and ready is None:
                    if cutter.pending:
                        log.warning(
                            "changes of incomplete transactions held, not sent",
                            changes=cutter.pending,
                        )
                    return
                await handoff.next_batch(0.05)
        finally:
            if sending is not None:
                sending.cancel()
                await asyncio.gather(sending, return_exceptions=True)

    def _cut(
        self, reader: TopicReader, cutter: AnyCutter, quiet: set[str], number: int, by_age: bool
    ) -> tuple[tuple[Cut, Any] | None, CdcError | None]:
        """Delta `number` if one is due, recorded in the cut log; else what stops the run,
        if anything does (bad input with nothing left to cut, or the memory bound). While a
        delta is in flight, or a full delta's worth of messages waits unread (not `by_age`),
        only a full one is cut: each delta costs the replica a load, and in a backlog a cut
        by age takes what was read during the last load, ever smaller."""
        live = set(cutter.parts) - set(self.intake.blocked)
        stuck = bool(self.intake.blocked) and quiet >= live
        full = cutter.full
        started = time.monotonic()
        made = cutter.cut(
            number, quiet, started, datetime.now(UTC), force=stuck or full, by_age=by_age
        )
        found = (made.cut, made) if isinstance(made, ColumnarDelta) else made
        if found is not None:
            self.cutlog.record(found[0])
        self.stats.cut_seconds += time.monotonic() - started
        if cutter.silent - self._named_silent:
            log.warning(
                "partitions carry no heartbeats: they do not hold the watermark",
                partitions=sorted(cutter.silent - self._named_silent),
            )
            self._named_silent |= cutter.silent
        if found is not None:
            cut = found[0]
            log.info(
                "delta cut",
                deltaNum=cut.delta,
                changes=cut.changes,
                rows=cut.rows,
                lag=reader.lag(),
                pending=cutter.pending,
            )
            return found, None
        if stuck:
            return None, next(iter(self.intake.blocked.values()))
        if full:
            bounds = self.options.bounds
            held = f"{cutter.pending:,} changes ({cutter.pending_bytes:,} bytes)"
            return None, BadInput(
                cutter.oldest_open(),
                f"{held} are held and none can be cut: a transaction larger than "
                f"{bounds.max_pending:,} changes or {bounds.max_pending_bytes:,} bytes, or one "
                "never completed",
            )
        return None, None

    def _idle(self, reader: TopicReader, cutter: AnyCutter, quiet: set[str]) -> bool:
        """Whether `until_idle` has passed with every partition settled (and a progress line
        every `PROGRESS_SECONDS`)."""
        if time.monotonic() - self._progress_at >= PROGRESS_SECONDS:
            self._progress_at = time.monotonic()
            log.info(
                "reading",
                messages=self.stats.messages,
                held=cutter.pending,
                lag=reader.lag(),
                deltas=self.stats.deltas,
            )
        idle = self.options.until_idle
        settled = quiet >= set(cutter.parts) and not self.intake.waiting
        return idle is not None and settled and time.monotonic() - reader.last_arrival() >= idle

    async def _send(self, cut: Cut, rows: dict[str, Any]) -> None:
        await self._transfer(cut, *self._frame(cut, rows))

    def _frame(self, cut: Cut, rows: Any) -> tuple[SourceDelta, tuple[str, list[Chunk]]]:
        """Delta `cut` framed: of its rows, or of the records a columnar cut wrote."""
        started = time.monotonic()
        if isinstance(rows, ColumnarDelta):
            bodies = partial(_bodies, rows, self.session)
            delta = SourceDelta(cut.delta, cut.date, {}, bodies, written_rows=cut.rows)
        else:
            delta = SourceDelta(cut.delta, cut.date, rows)
        framing = self.session.frame(delta)
        self.stats.frame_seconds += time.monotonic() - started
        return delta, framing

    async def _transfer(
        self,
        cut: Cut,
        delta: SourceDelta,
        framing: tuple[str, list[Chunk]],
        lag: int | None = None,
        on_sent: Callable[[], None] | None = None,
    ) -> None:
        """Send `delta` until the replica applied it; `on_sent` runs once its chunks are on
        the broker, or once the transfer ends without it."""
        started = self.stats.last_sent = time.monotonic()
        if self.stats.first_sent is None:
            self.stats.first_sent = started
        try:
            outcome = await self.session.transfer(delta, framing, on_sent=on_sent)
        except Resync:
            state = await self.session.state()
            raise CdcError(
                f"delta {cut.delta} was refused OUT_OF_SEQUENCE and the replica now expects "
                f"{state.expected_delta_num}: another origin drives it? Run again to reconcile"
            ) from None
        finally:
            if on_sent is not None:
                on_sent()  # once more where the send failed: nothing waits on it for ever
        self.stats.last_answer = time.monotonic()
        self.stats.load_seconds += self.stats.last_answer - started
        self.stats.deltas += 1
        self.stats.changes += cut.changes
        self.stats.rows += cut.rows
        behind = "" if lag is None else f"; {lag:,} message(s) behind"
        self.out(
            f"delta {cut.delta}: {cut.changes:,} changes -> {cut.rows:,} rows, "
            f"dated {cut.date.isoformat()}, applied in {outcome.seconds:.2f} s{behind}"
        )


def _bodies(made: ColumnarDelta, session: OriginSession, table: Table) -> list[tuple[bytes, int]]:
    """Table `table`'s chunk bodies of a columnar cut, from the records it wrote (one empty
    body where it has no rows)."""
    chunk_rows = session.options.chunk_rows
    found = made.records.get(table.name)
    if found is None:
        return [(encode_body(table, [], codec=CHUNK_CODEC), 0)]
    return record_bodies(table, *found, chunk_rows=chunk_rows, codec=CHUNK_CODEC)
