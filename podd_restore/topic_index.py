"""One scan of a backup topic turned into what a check or a run needs: the increments of the
datamart (`BackupIndex`) with every message's place, and the changelog records of each. No
data body is kept: a run reads each delta's bodies again by place when it is that delta's
turn (`podd_restore.pipeline`).

Each message is judged alone and never stops the scan: an undecodable key is recorded with
its place (which increment it belonged to is unknown, so that increment stays incomplete);
an unreadable changelog body makes its increment unusable, with the place named.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from podd_restore.errors import RestoreError
from podd_restore.plan import BackupChunk, BackupIndex, Increment, Place
from protocol.backup import BackupKey, BackupMessageType, ChangelogRecord
from protocol.changelog import SchemaChange, parse_change
from protocol.codec import decode_message, read_records_of
from protocol.errors import MessageDecodeError, SchemaDefinitionError
from protocol.ocf import OcfLimits, content_digest

ChunkId = tuple[str, int, int, int]  # incrementId, deltaNum, streamNumber, chunkNumber
#: A changelog body decompresses to at most this many bytes.
CHANGELOG_LIMITS = OcfLimits.small(16 * 2**20)
#: Containers digested to compare increments: their headers read within these.
DIGEST_LIMITS = OcfLimits()


def chunk_id(key: BackupKey) -> ChunkId:
    return (key.increment_id, key.delta_num, key.stream_number, key.chunk_number)


@dataclass
class TopicIndex:
    datamart: str
    index: BackupIndex
    #: Changelog records held in all (not per message): what a topic may make us hold.
    max_changelog_records: int = 100_000
    changelog: dict[ChunkId, list[ChangelogRecord]] = field(default_factory=dict)
    changelog_records: int = 0
    #: When the first message was read (time.perf_counter()).
    first_message_at: float | None = None

    def on_message(self, place: Place, key_bytes: bytes | None, value: bytes | None) -> None:
        if self.first_message_at is None:
            self.first_message_at = time.perf_counter()
        try:
            key = decode_message(BackupKey, key_bytes)
        except MessageDecodeError as exc:
            self.index.refuse_key(place, str(exc))
            return
        first_copy = key.datamart == self.datamart and not self.index.knows(key)
        try:
            digest = content_digest(value, DIGEST_LIMITS) if first_copy else b""
            self.index.add(BackupChunk(key, place, len(value or b""), digest=digest))
        except OverflowError as exc:
            raise RestoreError(f"{place}: {exc}") from None
        if first_copy and key.message_type is BackupMessageType.CHANGELOG:
            self._read_changelog(key, place, value)

    def _read_changelog(self, key: BackupKey, place: Place, value: bytes | None) -> None:
        ident = chunk_id(key)
        try:
            left = self.max_changelog_records - self.changelog_records
            records = read_records_of(value, "ChangelogRecord", CHANGELOG_LIMITS, max(left, 0))
            self.changelog[ident] = [ChangelogRecord.from_avro_record(r) for r in records]
            self.changelog_records += len(records)
        except (MessageDecodeError, ValueError) as exc:
            increment = self.index.increments.get((key.increment_id, key.delta_num))
            if increment is not None:
                increment.problems.append(
                    f"{place}: the changelog body cannot be read: {exc} (at most "
                    f"{self.max_changelog_records} records are held for all runs together)"
                )

    def changes(self, increment: Increment) -> list[SchemaChange]:
        """The increment's changelog, parsed; `RestoreError` naming the message of a change
        that cannot be read."""
        out: list[SchemaChange] = []
        for chunk in increment.messages(BackupMessageType.CHANGELOG):
            for record in self.changelog.get(chunk_id(chunk.key), []):
                try:
                    out.append(parse_change(record, self.datamart))
                except SchemaDefinitionError as exc:
                    raise RestoreError(
                        f"delta {increment.delta_num} (run {increment.increment_id}), "
                        f"{chunk.place}: change {record.change_num} cannot be read: {exc}"
                    ) from None
        return out
