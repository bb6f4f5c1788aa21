"""The DataWorks origin on arrays against the origin a change at a time, driven as the origin
drives them: the same fetches read by the same intake (`Intake._read_fetch`), one with the
DataWorks cutter on arrays (batches held by `dataworks_batch_intake.hold_fetch`, the rest by
the exact decoder), one with `Cutter` (every message by the exact decoder); cuts asked alike
after each fetch. Both hold, count and name the same, cut the same deltas at the same asks
(the same `Cut`, but for the digest's kind) with the same rows, over late changes, one- and
two-message updates, key changes, markers, second copies, heartbeats, a partition without
heartbeats, messages the batch reader leaves to the exact decoder, and bad input (which stops
its partition's reading in both)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.cutters import AnyCutter
from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.dataworks_array_cutter import DataWorksArrayCutter
from podd_cdc.errors import BadInput
from podd_cdc.intake import Intake
from podd_cdc.options import CdcOptions, CdcStats
from podd_cdc.qlik_batch_intake import MIN_BATCH
from podd_cdc.qlik_cut import ColumnarDelta
from podd_cdc.qlik_delta_rows import python_rows_of
from podd_cdc.rows import rows_records_digest
from podd_kafka.record_runs import RecordRun, run_of_values
from protocol.schema import LogicalSchema
from tools.cdc_write.dataworks_writer import DataWorksWriter
from tools.cdc_write.source import SourceDatabase
from tools.cdc_write.tables import dataworks_marketing

PARTITIONS = 3  # the third carries no heartbeat: it is silent once read to its end
WALL = datetime(2030, 1, 1, tzinfo=UTC)


class _Reader:
    """What the intake asks of the topic reader while it reads a fetch."""

    def __init__(self) -> None:
        self.paused: set[str] = set()

    def is_paused(self, key: str) -> bool:
        return key in self.paused

    def pause(self, key: str, offset: int) -> None:
        del offset
        self.paused.add(key)

    def resume(self, key: str) -> None:
        self.paused.discard(key)


def _escaped(value: bytes) -> bytes:
    """The same message with its `version` written with a `\\u` escape (the batch reader
    leaves those to the exact decoder)."""
    return value.replace(b'"version": "1.0"', b'"version": "\\u0031.0"')


def _topic(seed: int) -> list[list[bytes]]:
    """Each partition's messages: DataWorks' own writing of some transactions, with copies,
    escaped messages and markers mixed in."""
    tables = dataworks_marketing()
    db = SourceDatabase(tables, seed=seed, null_ratio=0.1, key_change_ratio=0.05)
    writer = DataWorksWriter(
        tables,
        partitions=PARTITIONS - 1,
        heartbeat_every=150,
        late_ratio=0.05,
        one_record_ratio=0.3,
        marker_ratio=0.05,
        seed=seed,
    )
    rng = random.Random(seed)
    parts: list[list[bytes]] = [[] for _ in range(PARTITIONS)]
    for written in writer.transactions(db.transaction(rng.randint(1, 40)) for _ in range(150)):
        value = written.value
        if rng.random() < 0.003:
            value = _escaped(value)
        parts[written.partition].append(value)
        if rng.random() < 0.02:
            parts[written.partition].append(value)  # a second copy, right after
        if written.partition == 0 and rng.random() < 0.05:
            parts[PARTITIONS - 1].append(value)  # a copy in the silent partition
    bad = parts[1]
    bad.insert(len(bad) * 4 // 5, b'{"payload": "none"}')  # bad input: it stops partition 1
    return parts


def _schema(parts: list[list[bytes]]) -> LogicalSchema:
    learner = DataWorksDecoder()
    for value in (v for part in parts for v in part):
        with contextlib.suppress(BadInput):
            learner.decode("t", value)
    return LogicalSchema(datamart="m", tables=tuple(t.table for t in learner.by_name.values()))


class Origin:
    """An intake and a cutter, on arrays or not, fed the same fetches."""

    def __init__(self, schema: LogicalSchema, columnar: bool, max_rows: int, state: Path) -> None:
        self.options = CdcOptions("dataworks", ["t"], state, columnar=columnar)
        self.intake = Intake(self.options, schema, None, CdcStats())  # type: ignore[arg-type]
        starts = {f"t:{p}": 0 for p in range(PARTITIONS)}
        bounds = Bounds(max_rows=max_rows, max_age=3600.0)
        decoder = self.intake.decoder
        assert isinstance(decoder, DataWorksDecoder)
        self.cutter: AnyCutter = (
            DataWorksArrayCutter(schema, decoder.by_name.__getitem__, starts, None, bounds)
            if columnar
            else Cutter("dataworks", schema, starts, None, bounds)
        )
        self.reader = _Reader()

    def read(self, runs: list[tuple[str, RecordRun]]) -> None:
        live = [(k, run) for k, run in runs if k not in self.intake.blocked]
        asyncio.run(self.intake._read_fetch(self.reader, self.cutter, live, WALL))  # type: ignore[arg-type]

    def cut(self, delta: int, quiet: set[str], force: bool) -> Any:
        return self.cutter.cut(delta, quiet, 0.0, WALL, force=force, by_age=False)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_origin_on_arrays_cuts_what_the_origin_a_change_at_a_time_cuts(
    seed: int, tmp_path: Path
) -> None:
    parts = _topic(seed)
    schema = _schema(parts)
    rng = random.Random(seed)
    max_rows = rng.choice([300, 1000, 5000])
    arrays = Origin(schema, True, max_rows, tmp_path)
    records = Origin(schema, False, max_rows, tmp_path)
    read = [0] * PARTITIONS
    delta = cuts = 0
    while any(read[p] < len(parts[p]) for p in range(PARTITIONS)):
        runs = []
        for p in range(PARTITIONS):
            size = rng.choice([MIN_BATCH // 8, MIN_BATCH, 3 * MIN_BATCH])
            taken = parts[p][read[p] : read[p] + size]
            if taken:
                runs.append((f"t:{p}", run_of_values("t", p, taken, read[p])))
            read[p] += len(taken)
        rng.shuffle(runs)
        arrays.read(runs)
        records.read(runs)
        assert arrays.intake.blocked.keys() == records.intake.blocked.keys()
        done = {f"t:{p}" for p in range(PARTITIONS) if read[p] == len(parts[p])}
        for _ in range(3):
            force = rng.random() < 0.2
            made, expected = arrays.cut(delta, done, force), records.cut(delta, done, force)
            assert (made is None) == (expected is None), delta
            if expected is None:
                break
            assert isinstance(made, ColumnarDelta)
            cut, rows = expected
            assert made.cut == replace(cut, digest=made.cut.digest), delta
            assert made.cut.digest == rows_records_digest(schema, rows)
            assert python_rows_of(made.tables) == rows
            delta += 1
            cuts += 1
        for name in ("pending", "pending_bytes", "duplicates", "late", "silent"):
            assert getattr(arrays.cutter, name) == getattr(records.cutter, name), name
    assert cuts >= 2
    assert list(arrays.intake.blocked) == ["t:1"]
    total = sum(map(len, parts))
    assert arrays.intake.stats.batched > total // 4, total  # held from batches, not exactly


def test_a_sequence_id_longer_than_the_arrays_hold_is_bad_input_at_its_offset(
    tmp_path: Path,
) -> None:
    """The exact decoder takes ids of up to 40 digits; held on arrays, more than 36 is bad
    input named by offset (it stops its partition; the record path holds it)."""
    parts = _topic(4)
    first = parts[0][:5]
    long_id = first[2].replace(b'"sequenceId": "', b'"sequenceId": "' + b"9" * 25, 1)
    messages = [*first[:2], long_id, *first[3:]]
    schema = _schema([messages])
    run = [("t:0", run_of_values("t", 0, messages))]
    arrays, records = Origin(schema, True, 10, tmp_path), Origin(schema, False, 10, tmp_path)
    arrays.read(run)
    records.read(run)
    stop = arrays.intake.blocked["t:0"]
    assert stop.at is not None
    assert stop.at.offset == 2
    assert "more digits than the columnar origin holds" in stop.reason
    assert not records.intake.blocked
