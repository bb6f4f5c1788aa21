"""What a decoded CDC message is: a row change, a heartbeat, a table's metadata, or nothing.

Decoders produce these; the cutter consumes them. A change's `rows` are already in the
replica's layout (the table's columns in logical order, `sys_op` apart): one upsert or
delete, or a delete of the old key then an upsert of the new one when the key changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from protocol.schema import Table


# The records a run holds are msgspec structs outside the cyclic garbage collector
# (`gc=False`): a cutter holds up to `max_pending` changes of several objects each, and with
# them tracked, the collector's passes over that growing heap cost more than decoding,
# feeding and cutting together (15.1 against 6.3 us a Qlik change decoded, in-process). No
# record can be part of a reference cycle: each holds only values decoded from a message
# (text, numbers, times, tuples of them) and records below it, so reference counting alone
# frees every one.
class Position(msgspec.Struct, frozen=True, order=True, gc=False):
    """Where a message was read: topic, partition, offset."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"topic {self.topic} partition {self.partition} offset {self.offset}"


class RowChange(msgspec.Struct, gc=False):
    table: str
    sys_op: int
    values: tuple[Any, ...]


class Change(msgspec.Struct, gc=False):
    """One source change.

    `cut_key` places it against a delta's bound: Qlik's `changeSequence` (None for a full-load
    `REFRESH` row), DataWorks' `eventTime` in ms. `order` sorts the changes of one delta
    (the source's sequence; a tuple of one length per format, since the delta's rows sort
    by it spread flat, `podd_cdc.rows`). `identity` is the same for a change written twice.
    `source_time`: Qlik's `timestamp` (a delta's date is its changes' latest); DataWorks
    changes carry none, their `cut_key` is the time.
    """

    rows: tuple[RowChange, ...]
    cut_key: Any  # str (Qlik sequence) | int (DataWorks ms) | None; one kind per run
    order: tuple[Any, ...]
    identity: tuple[Any, ...] | None
    source_time: datetime | None = None
    transaction: str | None = None
    counter: int | None = None
    last_in_transaction: bool = False


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """DataWorks `MHEARTBEAT`: the writer's progress in this partition, in ms."""

    event_time_ms: int


@dataclass(frozen=True, slots=True)
class TableSeen:
    """A table's structure as the source describes it (Qlik metadata message)."""

    schema_id: str
    table: Table
    source: dict[str, Any]  # the metadata message as decoded, kept so it can be replayed


@dataclass(frozen=True, slots=True)
class Skipped:
    """A message with no row change (transaction markers, GTIDs, index DDL): counted."""

    what: str


Record = Change | Heartbeat | TableSeen | Skipped
