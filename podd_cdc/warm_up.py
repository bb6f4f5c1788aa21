"""`podd-cdc warm-up`: the origin's compiled steps built into numba's cache before a first run.

The columnar paths and the body writer are numba kernels, compiled at their first call
and cached: next to the package where it can be written, else under `NUMBA_CACHE_DIR` or the
user's cache directory (`~/.cache/numba`). A first run in a fresh install or container
compiles them inside its first delta: 32 CPU s for 108 kernel signatures on the project's
2-core machine (docs/operator/deploying.md). The warm-up runs the origin's own steps, in
process, without Kafka or a replica, over made-up messages (`podd_cdc.warm_up_messages`):
Qlik and DataWorks held from a read batch and message by message, cut on arrays and framed
from their records; Qlik and DataWorks cut a change at a time and framed from rows. So every kernel
meets the argument types a run gives it, and a later run loads them (about 0.4 CPU s).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime

from podd_cdc import dataworks_batch_intake, qlik_batch_intake
from podd_cdc.cutlog import partition_key
from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.dataworks_array_cutter import DataWorksArrayCutter
from podd_cdc.membership import Format
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_array_cutter import QlikArrayCutter
from podd_cdc.qlik_batch_intake import MIN_BATCH
from podd_cdc.records import Position
from podd_cdc.warm_up_messages import (
    TOPIC,
    dataworks_messages,
    qlik_data,
    qlik_metadata,
)
from podd_kafka.record_runs import run_of_values
from protocol.body_writer import record_bodies
from protocol.framing import CHUNK_CODEC, Chunk, frame_delta
from protocol.kernel_cache import WarmedUp, warmed_up
from protocol.schema import LogicalSchema

KEY = partition_key(TOPIC, 0)
#: Transactions of four Qlik changes: enough for a batch to be read on arrays, and some.
QLIK_TRANSACTIONS = MIN_BATCH // 4 + 50
#: Qlik messages read one at a time after the batch (the exact path, into the same cutter).
QLIK_ONE_BY_ONE = 40
#: DataWorks changes (about 1.4 messages each): enough for a batch to be read on arrays.
DATAWORKS_CHANGES = MIN_BATCH + 200
#: DataWorks messages read one at a time after the batch.
DATAWORKS_ONE_BY_ONE = 40
#: The packages whose kernels the warm-up counts.
KERNEL_PACKAGES = ("podd_cdc.", "podd_kafka.", "protocol.")


def warm_up() -> WarmedUp:
    """Run every path of the origin that calls a kernel once; what numba did meanwhile."""
    started = time.process_time()
    wall = datetime.now(UTC)
    batch = 4 * QLIK_TRANSACTIONS
    data = qlik_data(QLIK_TRANSACTIONS + QLIK_ONE_BY_ONE // 4)
    held = qlik_on_arrays([qlik_metadata()], data, batch, wall)
    if held != batch:
        raise RuntimeError(f"{held} of the warm-up's {batch} batched messages were held")
    by_record("qlik", QlikDecoder(), [qlik_metadata(), *data[batch:]], wall)
    # a minute before the clock the sequence check reads: not ahead of it
    dataworks = dataworks_messages(DATAWORKS_CHANGES, int(wall.timestamp() * 1000) - 60_000)
    batched = len(dataworks) - DATAWORKS_ONE_BY_ONE
    held = dataworks_on_arrays(dataworks, batched, wall)
    if held != batched:
        raise RuntimeError(f"{held} of the warm-up's {batched} DataWorks messages were held")
    by_record("dataworks", DataWorksDecoder(), dataworks, wall)
    return warmed_up(KERNEL_PACKAGES, started)


def qlik_on_arrays(metadata: list[bytes], data: list[bytes], batch: int, wall: datetime) -> int:
    """The columnar origin's steps, over Qlik JSON messages of one partition: the tables'
    descriptions `metadata` read, the first `batch` of `data` held from one read batch as
    far as it is sure of them, the rest fed a message at a time (the exact path, into the
    same cutter), a delta cut on arrays and its chunks framed from the records it wrote.
    How many were held from the batch."""
    described = QlikDecoder()
    for value in metadata:
        described.decode(TOPIC, value)
    schema = _described(described)
    decoder = QlikDecoder(schema)
    for value in metadata:
        decoder.decode(TOPIC, value)
    cutter = QlikArrayCutter(schema, decoder.by_name.__getitem__, {KEY: 0}, None, Bounds())
    fetch = [(KEY, run_of_values(TOPIC, 0, data[:batch]))]
    held = qlik_batch_intake.hold_fetch(decoder, cutter, fetch, time.monotonic(), wall)
    count = held.get(KEY, (0, 0))[0]
    _exactly_then_framed(decoder, cutter, data[count:], count, wall)
    return count


def dataworks_on_arrays(messages: list[bytes], batch: int, wall: datetime) -> int:
    """The columnar origin's steps over DataWorks JSON messages of one partition: the first
    `batch` held from one read batch as far as it is sure of them (their schemas learnt as
    the exact decoder learns them), the rest fed a message at a time, a delta cut on arrays
    and its chunks framed from the records it wrote. How many were held from the batch."""
    learner = DataWorksDecoder()
    for value in messages:
        learner.decode(TOPIC, value)
    schema = _described(learner)
    decoder = DataWorksDecoder(schema)
    bounds = Bounds()
    cutter = DataWorksArrayCutter(schema, decoder.by_name.__getitem__, {KEY: 0}, None, bounds)
    fetch = [(KEY, run_of_values(TOPIC, 0, messages[:batch]))]
    held = dataworks_batch_intake.hold_fetch(decoder, cutter, fetch, time.monotonic(), wall)
    count = held.get(KEY, (0, 0))[0]
    _exactly_then_framed(decoder, cutter, messages[count:], count, wall)
    return count


def _exactly_then_framed(
    decoder: QlikDecoder | DataWorksDecoder,
    cutter: QlikArrayCutter | DataWorksArrayCutter,
    rest: list[bytes],
    first: int,
    wall: datetime,
) -> None:
    """The messages `rest` (from offset `first`) fed a message at a time by the exact path
    into a cutter on arrays, then a delta cut and its chunks framed from the records it
    wrote."""
    for offset, value in enumerate(rest, first):
        at = Position(TOPIC, 0, offset)
        record = decoder.decode(TOPIC, value)
        cutter.check(at, record, wall, KEY)
        cutter.feed(at, record, time.monotonic(), len(value), KEY)
    made = cutter.cut(0, {KEY}, time.monotonic(), wall, force=True)
    if made is None:
        raise RuntimeError("the warm-up's changes were not cut")
    for table in cutter.schema:
        if table.name in made.records:
            record_bodies(table, *made.records[table.name], chunk_rows=1000, codec=CHUNK_CODEC)


def by_record(
    fmt: Format, decoder: QlikDecoder | DataWorksDecoder, messages: Iterable[bytes], wall: datetime
) -> tuple[LogicalSchema, list[Chunk]]:
    """A change at a time: decoded, checked, fed, cut, and framed from its rows. The schema
    of the tables described, and the delta's chunks."""
    records = [(Position(TOPIC, 0, k), decoder.decode(TOPIC, v)) for k, v in enumerate(messages)]
    schema = _described(decoder)
    cutter = Cutter(fmt, schema, {KEY: 0}, None, Bounds())
    for at, record in records:
        cutter.check(at, record, wall, KEY)
        cutter.feed(at, record, time.monotonic(), 0, KEY)
    found = cutter.cut(0, {KEY}, time.monotonic(), wall, force=True)
    if found is None:
        raise RuntimeError(f"the warm-up's {fmt} changes were not cut")
    cut, rows = found
    chunks = frame_delta(
        schema, request_id="warm-up", delta_num=0, delta_date=cut.date, rows_by_table=rows
    )
    return schema, list(chunks)


def _described(decoder: QlikDecoder | DataWorksDecoder) -> LogicalSchema:
    """The replica's schema of the tables `decoder` has read descriptions of."""
    return LogicalSchema(
        datamart="warm_up", tables=tuple(t.table for t in decoder.by_name.values())
    )
