"""One scan of a backup topic turned into what a check or a run needs: the increments of the
datamart (`BackupIndex`), the changelog records of each, and (for a run) every data body
the restore will apply, staged durably as it arrives.

Each message is judged alone and never stops the scan: an undecodable key is recorded with
its place (which increment it belonged to is unknown, so that increment stays incomplete);
an unreadable changelog body makes its increment unusable, with the place named.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from podd_restore.errors import RestoreError
from podd_restore.plan import BackupChunk, BackupIndex, Increment, Place
from podd_restore.restore_staging import RestoreStaging
from protocol.backup import BackupKey, BackupMessageType, ChangelogRecord
from protocol.changelog import SchemaChange, parse_change
from protocol.codec import decode_message, read_records_of
from protocol.errors import MessageDecodeError, SchemaDefinitionError
from protocol.ocf import ContainerError, OcfLimits, decoded_size

ChunkId = tuple[str, int, int, int]  # incrementId, deltaNum, streamNumber, chunkNumber
#: A changelog body decompresses to at most this many bytes.
CHANGELOG_LIMITS = OcfLimits.small(16 * 2**20)


def _decoded(body: bytes | None, limits: OcfLimits) -> int | None:
    """What a staged body decompresses to, so the loader plans its slices on the rows' real
    size, not the compressed one (None: unreadable; the load reports it)."""
    try:
        return decoded_size(body, limits) if body else 0
    except ContainerError:
        return None


def chunk_id(key: BackupKey) -> ChunkId:
    return (key.increment_id, key.delta_num, key.stream_number, key.chunk_number)


@dataclass
class TopicIndex:
    datamart: str
    index: BackupIndex
    #: Data bodies of deltas from `stage_from` on (and up to `stage_to`) are staged.
    staging: RestoreStaging | None = None
    stage_from: int = 0
    stage_to: int | None = None
    #: Changelog records held in all (not per message): what a topic may make us hold.
    max_changelog_records: int = 100_000
    #: Data bodies staged in all, in bytes.
    max_staged_bytes: int = 64 * 2**30
    changelog: dict[ChunkId, list[ChangelogRecord]] = field(default_factory=dict)
    changelog_records: int = 0
    staged_bytes: int = 0
    #: The loader's bounds on a body (its settings'), under which staged bodies are measured.
    body_limits: OcfLimits = field(default_factory=OcfLimits)
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
        path = decoded = None
        if first_copy and key.message_type is BackupMessageType.TABLE_DATA:
            path = self._stage(key, value)
            if path is not None:
                decoded = _decoded(value, self.body_limits)
        try:
            self.index.add(BackupChunk(key, place, len(value or b""), path, decoded))
        except OverflowError as exc:
            raise RestoreError(f"{place}: {exc}") from None
        if first_copy and key.message_type is BackupMessageType.CHANGELOG:
            self._read_changelog(key, place, value)

    def _stage(self, key: BackupKey, value: bytes | None) -> str | None:
        """The staged body's path, for the deltas this run applies."""
        if self.staging is None or key.delta_num < self.stage_from:
            return None
        if self.stage_to is not None and key.delta_num > self.stage_to:
            return None
        self.staged_bytes += len(value or b"")
        if self.staged_bytes > self.max_staged_bytes:
            raise RestoreError(
                f"the data to restore takes more than {self.max_staged_bytes / 2**20:,.0f} MiB "
                "of staging (PODD_RESTORE_MAX_STAGED_MIB): restore fewer deltas at a time "
                "(--to-delta)"
            )
        return self.staging.stage(key, value)

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
