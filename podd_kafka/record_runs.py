"""A partition's records handed out a Kafka batch at a time, made into `ConsumerRecord`s
only where a reader asks for one.

aiokafka makes a `ConsumerRecord` (eleven fields) of every record a consumer reads, in a
Python generator, which costs about twice what reading the batch costs: 3.2 µs a message
against 1.0 for the batch's own records (a 558-byte message, 8,000 of them). A reader that
takes a partition's values and offsets in bulk (the CDC origin's batch read) needs none of
them. A consumer made with `value_deserializer=RUNS` gets from `getmany` one item per
record batch, or per `MOST_IN_A_LIST` of its records: a list of the records as the batch
decoder made them (they have `offset`, `timestamp`, `timestamp_type`, `key`, `value`,
`headers`), read through the batch guard as every batch is (`podd_kafka.batch_guard`),
control batches and the records before the fetch offset left out as aiokafka leaves them
out. `getmany`'s `max_records` then counts lists. `RecordRun` holds such records of one
partition and is a sequence of `ConsumerRecord`s, each made when it is taken.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, overload

from aiokafka import ConsumerRecord


class _Runs:
    """The marker `value_deserializer` of a consumer that takes its records a batch at a
    time; called as a deserializer (it is never, in that mode), it hands the value on."""

    def __call__(self, value: bytes | None) -> bytes | None:
        return value

    def __repr__(self) -> str:
        return "RUNS"


RUNS = _Runs()


#: The most records in one list: a record batch of more comes as several lists, so that a
#: batch of many small records (a compressed one may inflate to `max_batch_decoded_mib`)
#: never has them all made at once.
MOST_IN_A_LIST = 2000


def unpack_runs(partition_records: Any) -> Iterator[list[Any]]:
    """What `PartitionRecords._unpack_records` yields for a `RUNS` consumer: each record
    batch's records at or past the fetch offset, in lists of at most `MOST_IN_A_LIST` (none
    for a control batch or a batch with none of them), `next_fetch_offset` moved past each
    list as aiokafka moves it past each record, and past the batch at its end. A
    read-committed consumer has no such mode (aborted transactions are left out record by
    record there)."""
    if partition_records._isolation_level != 0:
        raise ValueError("a consumer reading record runs must read uncommitted records")
    records = partition_records._records
    while records.has_next():
        batch = records.next_batch()
        if partition_records._check_crcs:
            batch.validate_crc()  # the guard's: a bad CRC ends that batch when it is read
        if batch.is_control_batch:
            partition_records.next_fetch_offset = batch.next_offset
            continue
        start, records_of = partition_records.next_fetch_offset, iter(batch)
        while found := list(islice(records_of, MOST_IN_A_LIST)):
            last = len(found) < MOST_IN_A_LIST
            partition_records.next_fetch_offset = (
                batch.next_offset if last else found[-1].offset + 1
            )
            if found[0].offset < start:  # a fetch from inside the batch
                found = [record for record in found if record.offset >= start]
            if found:
                yield found
        partition_records.next_fetch_offset = batch.next_offset


class RecordRun(Sequence[ConsumerRecord[Any, Any]]):
    """Records of one partition in offset order (`records`: as the batch decoder made them);
    indexing makes a `ConsumerRecord`, slicing another `RecordRun`."""

    __slots__ = ("partition", "records", "topic")

    def __init__(self, topic: str, partition: int, records: list[Any]) -> None:
        self.topic = topic
        self.partition = partition
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    @overload
    def __getitem__(self, index: int) -> ConsumerRecord[Any, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> RecordRun: ...

    def __getitem__(self, index: int | slice) -> ConsumerRecord[Any, Any] | RecordRun:
        if isinstance(index, slice):
            return RecordRun(self.topic, self.partition, self.records[index])
        return self._made(self.records[index])

    def __iter__(self) -> Iterator[ConsumerRecord[Any, Any]]:
        return map(self._made, self.records)

    def values(self) -> list[bytes | None]:
        return [record.value for record in self.records]

    def offsets(self) -> list[int]:
        return [record.offset for record in self.records]

    def _made(self, record: Any) -> ConsumerRecord[Any, Any]:
        key, value = record.key, record.value
        return ConsumerRecord(
            self.topic,
            self.partition,
            record.offset,
            record.timestamp,
            record.timestamp_type,
            key,
            value,
            record.checksum,
            -1 if key is None else len(key),
            -1 if value is None else len(value),
            tuple(record.headers),
        )


@dataclass(frozen=True, slots=True)
class MadeRecord:
    """A record as a `RecordRun` reads one, made of a value rather than fetched."""

    value: bytes | None
    offset: int
    key: bytes | None = None
    timestamp: int = 0
    timestamp_type: int = 0
    checksum: int | None = None
    headers: tuple[Any, ...] = ()


def run_of_values(
    topic: str, partition: int, values: Iterable[bytes | None], first: int = 0
) -> RecordRun:
    """`values` as one partition's run from offset `first`, as a fetch would hand them over:
    for the warm-up, the benches and tests, which feed a reader's steps without a broker."""
    records = [MadeRecord(value, offset) for offset, value in enumerate(values, first)]
    return RecordRun(topic, partition, records)
