"""Prostore's BACKUP_TO_KAFKA message formats (restore from backup topics comes later).

A backup topic carries a key record (below) and, for table data, a body of rows as in
`delta.in`; for the changelog, a body of `ChangelogRecord`s. The field lists follow
Prostore; the record names and namespace (`podd.backup`) are this project's.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar

from protocol.messages import Long, MicrosTimestamp, WireModel


class BackupMessageType(IntEnum):
    TABLE_DATA = 0
    CHANGELOG = 1


class BackupKey(WireModel):
    avro_name: ClassVar[str] = "BackupKey"

    increment_id: str
    message_type: BackupMessageType
    datamart: str
    delta_num: Long
    delta_date: MicrosTimestamp
    table_name: str | None = None
    stream_number: Long
    stream_total: Long
    chunk_number: Long
    is_last_chunk: bool


class ChangelogRecord(WireModel):
    avro_name: ClassVar[str] = "ChangelogRecord"

    change_num: Long
    entity_name: str
    change_query: str
