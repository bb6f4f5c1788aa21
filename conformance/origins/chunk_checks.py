"""The rules of one chunk within its transfer (`ChunkChecks`, the base of `OriginJudge`):
names and bounds, framing, last chunks, bodies, chunks after a final answer."""

from __future__ import annotations

import hashlib

from conformance.origins.seen import StreamSeen, TransferSeen, Violation, Where, listed, named
from protocol.body import decode_body
from protocol.errors import ErrorCode, PoddError
from protocol.messages import DeltaInKey
from protocol.schema import LogicalSchema, Table

#: Final answers after which a resend must use a new requestId: the replica keeps nothing
#: of the transfer (INCOMPLETE_DELTA as a final answer: it removed the transfer).
RESEND_UNDER_NEW_ID = frozenset({ErrorCode.INCOMPLETE_DELTA.value, ErrorCode.LOAD_FAILED.value})

MAX_NAME_CHARS = 256
MAX_SUBSCRIPTION_CHARS = 65_536
#: Rows whose content is remembered (to compare resends); beyond it, content is not compared.
MAX_ROWS_REMEMBERED = 1_000_000


class ChunkChecks:
    def __init__(self, schema: LogicalSchema) -> None:
        self.schema = schema
        self.tables: dict[str, Table] = {t.name: t for t in schema}
        self.violations: list[Violation] = []
        self._rows_kept = 0

    def flag(
        self, rule: str, message: str, where: Where | None = None, code: ErrorCode | None = None
    ) -> None:
        """Record a violation; `code`: the chunk is refused, and a correct replica answers
        its transfer so at once."""
        self.violations.append(Violation(rule, message, where, code))

    def _names_fit(self, key: DeltaInKey, where: Where) -> bool:
        long = [
            n
            for n, v in (
                ("requestId", key.request_id),
                ("datamart", key.datamart),
                ("tableName", key.table_name),
            )
            if len(v) > MAX_NAME_CHARS
        ]
        if len(key.subscription) > MAX_SUBSCRIPTION_CHARS:
            long.append("subscription")
        if long:
            self.flag("key", f"{', '.join(long)} longer than the protocol's bounds", where)
            return False
        if key.datamart != self.schema.datamart:
            self.flag("key", f"datamart {key.datamart!r}, not {self.schema.datamart!r}", where)
            return False
        return True

    def _after_final(
        self, transfer: TransferSeen, key: DeltaInKey, body: bytes | None, where: Where
    ) -> None:
        """A chunk under a requestId already answered. Produced after the answer: under a
        requestId the answer finished for good (LOAD_FAILED, removed), a resend that needed
        a new one; a copy otherwise (Kafka may deliver one twice), unless the replica had
        named what to resend. Produced before it (a producer's retry, delivered late): no
        reaction to the answer. A second last chunk is a fault whenever it was produced;
        any other new chunk after the answer, a transfer reusing the requestId."""
        final = transfer.final
        assert final is not None
        reaction = not where.before(transfer.answered_at_ms)
        if reaction and final.error_code in RESEND_UNDER_NEW_ID:  # nothing of it is kept
            self.flag(
                "request-id",
                f"a chunk under {key.request_id}, answered {final.error_code}: the delta "
                "goes again under a new requestId",
                where,
            )
            return
        stream = transfer.streams.get(key.stream_number)
        number, digest = key.chunk_number, self._chunk_digest(key, body)
        held = None if stream is None else stream.chunks.get(number)
        if digest in (held, transfer.dropped.get((key.stream_number, number))):
            self._resend_named(transfer, key, where)
            return
        fault = _last_chunk_fault(None if stream is None else stream.last, key)
        if fault is not None:
            self.flag("last-chunk", fault, where)
        elif reaction:
            status = f"{final.status.value} {final.error_code or ''}".rstrip()
            self.flag(
                "request-id",
                f"a chunk under {key.request_id} after its final answer ({status}): a new "
                "transfer needs a new requestId",
                where,
            )

    def _resend_named(self, transfer: TransferSeen, key: DeltaInKey, where: Where) -> None:
        """A chunk sent again after the replica reported what it misses must be one it
        named (one produced before that report is no reaction to it)."""
        reported = transfer.reported
        if reported is None or named(reported, key) or where.before(transfer.reported_at_ms):
            return
        self.flag(
            "resend-exact",
            f"stream {key.stream_number} chunk {key.chunk_number} resent; the replica missed "
            f"only {listed(reported)}",
            where,
        )

    def _check_framing(self, key: DeltaInKey, where: Where) -> bool:
        tables = len(self.tables)
        if key.stream_total != tables:
            self.flag(
                "empty-stream" if key.stream_total < tables else "framing",
                f"streamTotal {key.stream_total}: the datamart has {tables} tables, and every "
                "table has a stream in every delta (an empty one too)",
                where,
                ErrorCode.BAD_CHUNK,
            )
            return False
        if not 1 <= key.stream_number <= key.stream_total or key.chunk_number < 1:
            self.flag(
                "framing",
                f"stream {key.stream_number} of {key.stream_total}, chunk {key.chunk_number}",
                where,
                ErrorCode.BAD_CHUNK,
            )
            return False
        if key.table_name not in self.tables:
            message = f"table {key.table_name!r} is not in the datamart"
            self.flag("framing", message, where, ErrorCode.UNKNOWN_TABLE)
            return False
        return True

    def _add_chunk(
        self, transfer: TransferSeen, key: DeltaInKey, body: bytes | None, where: Where
    ) -> bool:
        stream = transfer.streams.get(key.stream_number)
        if stream is None:
            others = [n for n, s in transfer.streams.items() if s.table == key.table_name]
            if others:
                self.flag(
                    "framing",
                    f"streams {others[0]} and {key.stream_number} both name {key.table_name}",
                    where,
                    ErrorCode.BAD_CHUNK,
                )
                return False
            stream = transfer.streams[key.stream_number] = StreamSeen(key.table_name)
        elif stream.table != key.table_name:
            self.flag(
                "framing",
                f"stream {key.stream_number} names {stream.table} and {key.table_name}",
                where,
                ErrorCode.BAD_CHUNK,
            )
            return False
        number, digest = key.chunk_number, self._chunk_digest(key, body)
        if (
            transfer.missing is not None
            and not named(transfer.missing, key)
            and not where.before(transfer.reported_at_ms)
        ):
            self.flag(
                "resend-exact",
                f"stream {key.stream_number} chunk {number} resent; the replica missed only "
                f"{listed(transfer.missing)}",
                where,
            )
        before = transfer.dropped.get((key.stream_number, number))
        if before is not None and before != digest:
            self.flag(
                "resend-content",
                f"stream {key.stream_number} chunk {number} resent with other rows",
                where,
            )
        if number in stream.chunks:
            if stream.chunks[number] != digest:
                self.flag(
                    "resend-content",
                    f"stream {key.stream_number} chunk {number} sent again with other rows",
                    where,
                )
            return False
        fault = _last_chunk_fault(stream.last, key)
        if fault is not None:
            self.flag("last-chunk", fault, where, ErrorCode.BAD_CHUNK)
            return False
        if key.is_last_chunk:
            stream.last = number
        rows = self._rows(key, body, where)
        if rows is None:
            return False
        stream.chunks[number] = digest
        stream.rows[number] = rows
        return True

    def _chunk_digest(self, key: DeltaInKey, body: bytes | None) -> str:
        """What a chunk holds, to tell a copy or a resend from another chunk: its rows as
        decoded (a writer draws a new sync marker and may compress anew each time it
        encodes the same rows), or its bytes where they do not decode."""
        table = self.tables.get(key.table_name)
        digest = hashlib.sha256()
        try:
            if table is None:
                raise PoddError("no such table")
            for batch in decode_body(table, body):
                for row in batch.to_pylist():
                    digest.update(hashlib.sha256(repr(row).encode()).digest())
        except PoddError:
            return "bytes:" + hashlib.sha256(body or b"").hexdigest()
        return "rows:" + digest.hexdigest()

    def _rows(self, key: DeltaInKey, body: bytes | None, where: Where) -> list[bytes] | None:
        """A digest of each row of the body, decoded as the table (None: it does not)."""
        try:
            batches = list(decode_body(self.tables[key.table_name], body))
        except PoddError as exc:
            code = getattr(exc, "code", None) or ErrorCode.BAD_CHUNK
            self.flag("body", f"{key.table_name} chunk {key.chunk_number}: {exc}", where, code)
            return None
        rows: list[bytes] = []
        for batch in batches:
            self._rows_kept += batch.num_rows
            if self._rows_kept > MAX_ROWS_REMEMBERED:
                continue
            rows += [hashlib.sha256(repr(r).encode()).digest() for r in batch.to_pylist()]
        return rows


def _last_chunk_fault(last: int | None, key: DeltaInKey) -> str | None:
    """What is wrong with the chunk given its stream's last chunk so far (None: nothing)."""
    number = key.chunk_number
    if last is None:
        return None
    if key.is_last_chunk and number != last:
        return f"stream {key.stream_number}: chunks {last} and {number} are both its last"
    if number > last:
        return f"stream {key.stream_number}: chunk {number} after its last, {last}"
    return None
