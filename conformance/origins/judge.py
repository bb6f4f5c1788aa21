"""The rules an origin keeps, checked message by message (pure: no Kafka, no clock).

`OriginJudge` sees everything the origin sends (`chunk`, `state_asked`) and everything the
checking replica answers (`answered`, `applied`, `told_missing`), and records a `Violation`
for each rule broken, with the offending message's topic, partition and offset. Each rule
has a short id, so a report (and a test) can say which rule an origin broke:

* `key`: a `delta.in` key that does not decode (a field written with another logical type
  than the contract's included), names another datamart, or a name too long; a `delta.rq`
  whose key is not the datamart's name;
* `framing`: a stream number outside 1..streamTotal, a chunk number below 1, `streamTotal`
  not the datamart's table count, one stream naming two tables or two streams one table,
  `streamTotal`, `deltaNum` or `deltaDate` changing within a transfer;
* `last-chunk`: a second last chunk in a stream, or a chunk beyond its last;
* `chunk-numbering`, `empty-stream`: a transfer whose last chunks are all sent but a chunk
  number was skipped, or a stream (an empty one, usually) never sent;
* `body`: a body that does not decode as its table by position and type (`sys_op` too);
* `resend-content`: a chunk sent again with other rows (compared decoded: a writer may
  encode the same rows anew), or a delta sent again with other rows or another date;
* `state-first`, `sequence`, `date-order`: a delta sent before `delta.rq` was asked, a delta
  other than the one the replica expects (a skipped or an applied one), a new delta dated
  no later than the one before;
* `request-id`: a `requestId` used for a second delta, or chunks sent under it after its
  final answer;
* `resend-exact`: after the replica named what it misses, a chunk it did not name;
* `wait-answer`: a new transfer while a complete one waits for its answer (and the origin
  has not asked `delta.rq` since);
* `error-stop`, `re-ask`: a new transfer after an answer that tells the origin to stop, or
  after `OUT_OF_SEQUENCE` without asking `delta.rq` first.
"""

from __future__ import annotations

from datetime import datetime

from conformance.origins.chunk_checks import MAX_ROWS_REMEMBERED, ChunkChecks
from conformance.origins.seen import (
    TransferSeen,
    Violation,
    Where,
)
from protocol.codec import decode_delta_in_key
from protocol.errors import STOP_CODES, ErrorCode, PoddError
from protocol.gaps import Gap
from protocol.messages import DeltaInKey, DeltaInResult, DeltaStatus
from protocol.schema import LogicalSchema


class OriginJudge(ChunkChecks):
    """Every message of one origin in one scenario, judged as it comes."""

    def __init__(
        self, schema: LogicalSchema, expected: int, last_date: datetime | None = None
    ) -> None:
        super().__init__(schema)
        #: The delta the replica expects now, and the date of the last applied one (at the
        #: start: what the replica reports, so a first delta dated before it is judged too).
        self.expected = expected
        self.last_date = last_date
        self.transfers: dict[str, TransferSeen] = {}
        self.asked = 0  # delta.rq seen
        self.stopped_by: DeltaInResult | None = None  # a stop answer given
        self.reask_needed = False  # OUT_OF_SEQUENCE answered, no delta.rq since
        #: When those answers were sent (ms): what was produced before is no reaction.
        self.stopped_at_ms: int | None = None
        self.reask_since_ms: int | None = None
        #: First complete content seen of each delta: (date, per-table digests).
        self.deltas: dict[int, tuple[datetime, dict[str, str]]] = {}
        #: Transfers the replica lost (it restarted), and when (ms).
        self.forgotten: dict[str, int | None] = {}

    def request_key(self, key: bytes | None, datamart: str, where: Where) -> None:
        """A `delta.rq`'s key must be the datamart's name as UTF-8 (PROTOCOL.md,
        "Encoding"): control messages are keyed so, and a log-compacted or partitioned
        topic relies on it. It is judged; the request is still answered."""
        if key != datamart.encode():
            shown = "no key" if key is None else f"the key {bytes(key[:60])!r}"
            self.flag("key", f"a delta.rq with {shown}, not the datamart's name", where)

    def state_asked(self) -> None:
        self.asked += 1
        self.reask_needed = False
        for transfer in self.transfers.values():
            if transfer.completed:
                transfer.asked_since_complete = True

    def chunk(
        self, key_bytes: bytes | None, body: bytes | None, where: Where
    ) -> TransferSeen | None:
        """Judge one `delta.in` message; returns its transfer when the chunk is new."""
        try:
            key = decode_delta_in_key(key_bytes)
        except PoddError as exc:
            self.flag("key", f"the key does not decode: {exc}", where)
            return None
        if not self._names_fit(key, where):
            return None
        transfer = self.transfers.get(key.request_id)
        if transfer is None and where.before(self.forgotten.get(key.request_id)):
            return None  # a copy produced before the replica lost the transfer: no new one
        if transfer is None:
            if not self._new_transfer(key, where):
                return None
            transfer = self.transfers[key.request_id] = TransferSeen(key)
        elif not self._same_transfer(transfer, key, body, where):
            return None
        return transfer if self._add_chunk(transfer, key, body, where) else None

    def _new_transfer(self, key: DeltaInKey, where: Where) -> bool:
        """The first chunk of a requestId: the sequence rules of a new transfer."""
        number = key.delta_num
        if self.asked == 0:
            self.flag("state-first", f"delta {number} sent before delta.rq was asked", where)
        if self.stopped_by is not None and not where.before(self.stopped_at_ms):
            code = self.stopped_by.error_code
            self.flag(
                "error-stop",
                f"delta {number} sent after delta {self.stopped_by.delta_num} was refused "
                f"{code}, which the origin cannot fix: it must stop",
                where,
            )
        elif self.reask_needed and not where.before(self.reask_since_ms):
            self.flag(
                "re-ask", f"delta {number} sent after OUT_OF_SEQUENCE without delta.rq", where
            )
        waiting = next(
            (
                t
                for t in self.transfers.values()
                if t.final is None
                and (
                    (t.completed and not t.asked_since_complete)
                    or (number > self.expected == t.key.delta_num)
                )
            ),
            None,
        )
        if waiting is not None:
            self.flag(
                "wait-answer",
                f"delta {number} sent while delta {waiting.key.delta_num} "
                f"({waiting.request_id}) has no answer",
                where,
            )
        elif number != self.expected:
            what = "already applied" if number < self.expected else "skips deltas"
            self.flag(
                "sequence",
                f"delta {number} sent, the replica expects {self.expected} ({what})",
                where,
            )
        if (
            self.last_date is not None
            and number > self._last_applied()
            and (key.delta_date <= self.last_date)
        ):
            self.flag(
                "date-order",
                f"delta {number} dated {key.delta_date.isoformat()}, not after the previous "
                f"delta's {self.last_date.isoformat()}",
                where,
            )
        seen = self.deltas.get(number)
        if seen is not None and seen[0] != key.delta_date:
            self.flag("resend-content", f"delta {number} sent again with another date", where)
        self._check_framing(key, where)
        return True

    def _last_applied(self) -> int:
        return self.expected - 1

    def _same_transfer(
        self, transfer: TransferSeen, key: DeltaInKey, body: bytes | None, where: Where
    ) -> bool:
        first = transfer.key
        changed = [
            name
            for name, a, b in (
                ("deltaNum", first.delta_num, key.delta_num),
                ("deltaDate", first.delta_date, key.delta_date),
                ("streamTotal", first.stream_total, key.stream_total),
            )
            if a != b
        ]
        if changed:
            rule = "request-id" if "deltaNum" in changed else "framing"
            what = "used for a second delta" if "deltaNum" in changed else "within a transfer"
            message = f"{key.request_id} {what}: {', '.join(changed)} changed"
            self.flag(rule, message, where, ErrorCode.BAD_CHUNK)
            return False
        if transfer.final is not None:
            self._after_final(transfer, key, body, where)
            return False
        return self._check_framing(key, where)

    # --- what the replica does ---------------------------------------------------------------
    def completed(self, transfer: TransferSeen) -> None:
        """The transfer is complete: its content is compared with the delta's first."""
        transfer.completed, transfer.missing = True, None
        transfer.asked_since_complete = False
        content = transfer.content()
        number = transfer.key.delta_num
        seen = self.deltas.setdefault(number, (transfer.key.delta_date, content))
        if self._rows_kept <= MAX_ROWS_REMEMBERED and seen[1] != content:
            differ = sorted(t for t in content if content[t] != seen[1].get(t))
            self.flag(
                "resend-content",
                f"delta {number} sent again with other rows in "
                f"{', '.join(differ)} ({transfer.request_id})",
            )

    def told_missing(
        self, transfer: TransferSeen, gaps: list[Gap], at_ms: int | None = None
    ) -> None:
        """The replica said (`delta.rs`) it misses `gaps` of an open transfer: resends
        must be among them (no gap: nothing may be resent). `at_ms`: when it said so."""
        transfer.missing = transfer.reported = list(gaps)
        transfer.reported_at_ms = at_ms

    def pretend_lost(
        self, transfer: TransferSeen, gaps: list[Gap], at_ms: int | None = None
    ) -> None:
        """The replica drops the chunks `gaps` name from a complete transfer, to say it
        misses them (INCOMPLETE_DELTA or `delta.rs`): they, and only they, must come again."""
        for gap in gaps:
            stream = transfer.streams.get(gap.stream)
            if stream is not None and gap.first is None and stream.last is not None:
                # "stream S last chunk": the replica forgets where the stream ends
                transfer.dropped[(gap.stream, stream.last)] = stream.chunks.pop(stream.last)
                stream.rows.pop(stream.last, None)
                stream.last = None
                continue
            if stream is None or gap.first is None or gap.last is None:
                continue
            for number in range(gap.first, gap.last + 1):
                if number in stream.chunks:
                    transfer.dropped[(gap.stream, number)] = stream.chunks.pop(number)
                    stream.rows.pop(number, None)
        transfer.missing = transfer.reported = list(gaps)
        transfer.reported_at_ms = at_ms
        transfer.completed = False

    def answered(
        self, transfer: TransferSeen, result: DeltaInResult, at_ms: int | None = None
    ) -> None:
        """A final answer was sent at `at_ms` (INCOMPLETE_DELTA is not final:
        `told_missing`). What the origin produced before it is no reaction to it."""
        transfer.final, transfer.answered_at_ms = result, at_ms
        if result.status is DeltaStatus.OK:
            self.applied(result.delta_num, result.delta_date)
        elif result.error_code == ErrorCode.OUT_OF_SEQUENCE:
            self.reask_needed, self.reask_since_ms = True, at_ms
        elif result.error_code in STOP_CODES:
            self.stopped_by, self.stopped_at_ms = result, at_ms

    def applied(self, delta_num: int, delta_date: datetime) -> None:
        if delta_num == self.expected:
            self.expected, self.last_date = delta_num + 1, delta_date

    def forget(self, request_id: str, at_ms: int | None = None) -> None:
        """The replica lost the transfer at `at_ms` (it restarted): it knows nothing of it
        now, and a resend under the same requestId is a new transfer; a copy produced
        before the loss is not (Kafka delivered it late: not the origin's doing)."""
        self.transfers.pop(request_id, None)
        self.forgotten[request_id] = at_ms

    def rewound(self, expected: int) -> None:
        """The replica went back in time (its database restored): it expects `expected`
        again, and the deltas from there on are to be sent again, with the same rows."""
        self.expected = expected
        before = self.deltas.get(expected - 1)
        self.last_date = None if before is None else before[0]

    def finish(self) -> list[Violation]:
        """The scenario is over: transfers left with a skipped chunk or a stream not sent."""
        for transfer in self.transfers.values():
            if transfer.completed or transfer.complete():
                continue
            streams = transfer.streams
            if len(streams) < transfer.key.stream_total and all(
                s.last is not None for s in streams.values()
            ):
                absent = sorted(set(range(1, transfer.key.stream_total + 1)) - set(streams))
                self.flag(
                    "empty-stream",
                    f"{transfer.request_id}: stream(s) {', '.join(map(str, absent))} never sent",
                )
            for number, stream in sorted(streams.items()):
                if stream.last is not None and not stream.complete():
                    lost = [
                        n
                        for n in range(1, stream.last + 1)
                        if n not in stream.chunks and (number, n) not in transfer.dropped
                    ]
                    if not lost:
                        continue  # the replica dropped them: they came
                    self.flag(
                        "chunk-numbering",
                        f"{transfer.request_id}: stream {number} "
                        f"ends at chunk {stream.last} but chunk(s) "
                        f"{', '.join(map(str, lost[:10]))} never came",
                    )
        return self.violations
