"""Kafka record batches a consumer cannot decode are skipped and reported, never fatal.

aiokafka decodes a fetched batch while the consumer's `getmany`/`getone` iterates it. A
batch it cannot decode (a codec it lacks, corrupt compressed bytes, a bad CRC, a record
that does not parse) raises out of that call, and the same batch is fetched again at every
retry and every restart: on a shared topic, one hostile or broken producer stops the
consumer for good. And a compressed batch is inflated in full: a zstd batch of a megabyte
on the wire can hold gigabytes.

`install(guard)` makes every aiokafka consumer of this process (Faust's too) read batches
through `BatchGuard`: before a compressed batch (format v2) is inflated, its decompressed
size is checked against the guard's bound (`protocol.bounded_codecs.check_size`); any
error while reading a batch ends that batch only. Either way the batch's offsets are
skipped, as aiokafka skips an aborted transaction's batch, and `guard.on_poison` gets a
`PoisonBatch` naming topic, partition and offsets. The records of the batch read before an
error are delivered as usual.

A consumer made with `value_deserializer=record_runs.RUNS` is handed pieces of records
instead of a `ConsumerRecord` a record (`podd_kafka.record_runs`): the plain batches of a
fetch (v2, not compressed, not a control batch, their CRC right) are read by a kernel across
batches (`podd_kafka.fetch_columns`), and a batch with a record it cannot read is skipped
and reported the same way, after the records before it; every other batch is read here as
above, a compressed one decompressed within the same bound.

This works through two names of aiokafka's fetcher module (`MemoryRecords`,
`PartitionRecords`); `install` refuses an aiokafka without them and a test holds the
behaviour to the installed aiokafka.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np
import structlog
from aiokafka.consumer import fetcher

from podd_kafka.fetch_columns import (
    CODECS,
    RECORDS_AT,
    Piece,
    batch_columns,
    fetch_pieces,
    v2_crc_matches,
)
from podd_kafka.record_columns import RecordError
from podd_kafka.record_kernel import ATTRIBUTES_AT, CODEC_MASK, MAGIC_AT
from podd_kafka.record_runs import RUNS, offsets_of, unpack_runs
from podd_kafka.settings import KafkaSettings
from protocol.bounded_codecs import CodecError, check_size

log = structlog.get_logger("podd_kafka")


@dataclass(frozen=True)
class PoisonBatch:
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    reason: str


#: Batches already logged (bounded): a reader that seeks back over one (a restore reads a
#: delta's messages again) does not log it again.
_LOGGED: OrderedDict[tuple[str, int, int], None] = OrderedDict()
_LOGGED_MAX = 10_000


def log_poison(batch: PoisonBatch) -> None:
    """Log a skipped batch, once per process."""
    where = (batch.topic, batch.partition, batch.first_offset)
    if where in _LOGGED:
        return
    _LOGGED[where] = None
    while len(_LOGGED) > _LOGGED_MAX:
        _LOGGED.popitem(last=False)
    log.error(
        "a record batch that cannot be read was skipped",
        topic=batch.topic,
        partition=batch.partition,
        first_offset=batch.first_offset,
        last_offset=batch.last_offset,
        reason=batch.reason,
    )


@dataclass
class BatchGuard:
    """The most bytes a batch may decompress to, and who hears of a skipped batch."""

    max_decoded_bytes: int = 256 * 2**20
    on_poison: Callable[[PoisonBatch], None] = log_poison

    def problem(self, raw: bytes) -> str | None:
        """Why the v2 batch `raw` must not be inflated, or None."""
        if len(raw) <= RECORDS_AT or raw[MAGIC_AT] != 2:
            return None  # the older formats: their codec errors are caught while reading
        (attributes,) = struct.unpack_from(">h", raw, ATTRIBUTES_AT)
        codec = attributes & CODEC_MASK
        if codec == 0:
            return None
        name = CODECS.get(codec)
        if name is None:
            return f"compression codec {codec} is not a Kafka codec"
        try:
            check_size(name, raw[RECORDS_AT:], self.max_decoded_bytes)
        except CodecError as exc:
            return f"{name.removeprefix('kafka-')}: {exc}"
        return None


def crc_matches(raw: Any, batch: Any) -> bool:
    """Whether batch `raw` (its bytes whole, as `bytes` or a uint8 array; `batch` as aiokafka
    read them) holds the CRC of its bytes. A v2 batch's is the CRC-32C of everything after
    its CRC field, computed by `google_crc32c` (the CPU's CRC instruction where it has one:
    0.55 ms for a 5 MB batch, a copy included, against 2.3 ms by aiokafka's own, about 0.26
    µs of a CDC message of 700 bytes); the older formats' by aiokafka."""
    if len(raw) > RECORDS_AT and raw[MAGIC_AT] == 2:
        (size,) = struct.unpack_from(">i", raw, 8)
        if size + 12 == len(raw):
            return v2_crc_matches(raw, 0, len(raw))
    return bool(batch.validate_crc())


_state: dict[str, Any] = {"guard": BatchGuard()}
_ORIGINAL_RECORDS = getattr(fetcher, "MemoryRecords", None)
_ORIGINAL_PARTITION = getattr(fetcher, "PartitionRecords", None)


def install(guard: BatchGuard) -> None:
    """Read every aiokafka consumer's batches of this process through `guard` (the last
    guard installed is the one used)."""
    if _ORIGINAL_RECORDS is None or _ORIGINAL_PARTITION is None:
        raise RuntimeError("this aiokafka's fetcher has no MemoryRecords/PartitionRecords")
    _state["guard"] = guard
    fetcher.MemoryRecords = _GuardedRecords
    fetcher.PartitionRecords = _make_partition_records()


class _GuardedRecords:
    """aiokafka's MemoryRecords, also handing out where each batch is in the fetch's bytes."""

    def __init__(self, raw: bytes) -> None:
        self._inner = _ORIGINAL_RECORDS(raw)  # type: ignore[misc]
        self.raw = raw
        self.array = np.frombuffer(raw, np.uint8)
        self._pos = 0
        self.topic, self.partition = "?", -1

    def has_next(self) -> bool:
        return bool(self._inner.has_next())

    def next_batch(self) -> Any:
        batch = self._inner.next_batch()
        if batch is None:
            return None
        # Every format starts with offset (8 bytes) and a size (4) that excludes those 12.
        (size,) = struct.unpack_from(">i", self.raw, self._pos + 8)
        start, self._pos = self._pos, self._pos + 12 + size
        return _GuardedBatch(batch, self, start, self._pos)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def pieces(self, most: int, check_crcs: bool) -> Iterator[Piece]:
        """The fetch's records in pieces of at most `most`, each with the offset a reader
        stands at after it (`fetch_columns.fetch_pieces`): a batch the kernel does not read
        is read as `_GuardedBatch` reads every batch, one the kernel cannot read reported as
        skipped. What is left after the batches framed, aiokafka's MemoryRecords judges: a
        batch cut short is none, a length it refuses raises as it did."""

        def other(start: int, end: int) -> Iterator[Piece]:
            return self._other(start, end, most, check_crcs)

        left = yield from fetch_pieces(self.array, most, check_crcs, other, self._refused)
        if left < len(self.raw):
            _ORIGINAL_RECORDS(self.raw[left:]).next_batch()  # type: ignore[misc]

    def _batch(self, start: int, end: int) -> _GuardedBatch:
        inner = _ORIGINAL_RECORDS(self.raw[start:end]).next_batch()  # type: ignore[misc]
        return _GuardedBatch(inner, self, start, end)

    def _other(self, start: int, end: int, most: int, check_crcs: bool) -> Iterator[Piece]:
        """A batch the kernel does not read (compressed, a control batch, an older format,
        its CRC wrong), as `unpack_runs` read every batch before."""
        batch = self._batch(start, end)
        if check_crcs:
            batch.validate_crc()  # a bad CRC ends the batch when it is read
        if not batch.is_control_batch:
            for piece in batch.pieces(most):
                last = len(piece) < most
                yield piece, batch.next_offset if last else int(offsets_of(piece)[-1]) + 1
        yield None, batch.next_offset

    def _refused(self, start: int, end: int, reason: str) -> None:
        self._batch(start, end)._skip(reason)


class _GuardedBatch:
    """One batch: refused before inflating, or read with any error ending it quietly."""

    def __init__(self, batch: Any, records: _GuardedRecords, start: int, end: int) -> None:
        self._batch = batch
        self._records = records
        self._start, self._end = start, end
        self._problem: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def validate_crc(self) -> bool:
        # aiokafka raises on a bad CRC and fetches the batch again, for ever: end it instead
        if not crc_matches(self._records.array[self._start : self._end], self._batch):
            self._problem = "its CRC does not match its bytes"
        return True

    def __iter__(self) -> Iterator[Any]:
        return self._read()

    def pieces(self, most: int) -> Iterator[Sequence[Any]]:
        """The batch's records in sequences of at most `most`: a v2 batch's as
        `RecordColumns` (`podd_kafka.record_columns`), an older one's as lists of
        aiokafka's records."""
        if self._batch.magic < 2:
            records = self._read()
            while found := list(islice(records, most)):
                yield found
            return
        guard: BatchGuard = _state["guard"]
        problem = self._problem
        if problem is None:
            try:
                data, start, end = self._records.array, self._start, self._end
                yield from batch_columns(data, start, end, most, guard.max_decoded_bytes)
                return
            except RecordError as exc:
                problem = str(exc)
        self._skip(problem)

    def _read(self) -> Iterator[Any]:
        guard: BatchGuard = _state["guard"]
        raw = self._records.raw[self._start : self._end]
        problem = self._problem or guard.problem(raw)
        if problem is None:
            try:
                yield from self._batch
                return
            except Exception as exc:  # the codec, the record parser: anything in the batch
                problem = f"{type(exc).__name__}: {str(exc)[:300]}"
        self._skip(problem)

    def _skip(self, problem: str) -> None:
        """Report the batch as skipped, for `problem`."""
        guard: BatchGuard = _state["guard"]
        (first,) = struct.unpack_from(">q", self._records.raw, self._start)  # v2: base offset
        poison = PoisonBatch(
            self._records.topic,
            self._records.partition,
            first,
            int(self._batch.next_offset) - 1,
            problem,
        )
        try:
            guard.on_poison(poison)
        except Exception as exc:
            log.warning("reporting a skipped batch failed", error=repr(exc)[:300])


def _make_partition_records() -> type:
    base: Any = _ORIGINAL_PARTITION

    class GuardedPartitionRecords(base):  # type: ignore[misc]
        """aiokafka's PartitionRecords, telling its records which partition they are."""

        def __init__(self, tp: Any, records: Any, *args: Any, **kwargs: Any) -> None:
            if isinstance(records, _GuardedRecords):
                records.topic, records.partition = tp.topic, tp.partition
            super().__init__(tp, records, *args, **kwargs)

        def _unpack_records(self) -> Iterator[Any]:
            if self._value_deserializer is RUNS:
                return unpack_runs(self)
            return super()._unpack_records()  # type: ignore[no-any-return]

    return GuardedPartitionRecords


def guard_batches(
    settings: KafkaSettings, on_poison: Callable[[PoisonBatch], None] = log_poison
) -> BatchGuard:
    """Install a guard bounded by `settings.max_batch_decoded_mib`; returns it."""
    guard = BatchGuard(int(settings.max_batch_decoded_mib * 2**20), on_poison)
    install(guard)
    return guard
