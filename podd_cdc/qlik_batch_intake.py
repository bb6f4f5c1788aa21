"""A fetch of Qlik JSON messages held from arrays (the columnar intake, issue 46): the runs
of a fetch (one a partition), read as one batch (`qlik_batch.read_batch`), are held by the
Qlik cutter on arrays (`qlik_array_cutter.feed_lines`), each up to the first message the
batch is not sure of: a message the kernel does not read (Avro, a table's description, an
escape it leaves to Python, bad input), of a table not known or whose newest description
was refused, larger than a value may be, or whose change the batch is not sure of
(`qlik_batch_changes`). That message and the rest of its run are read as today, one at a
time by the exact decoder, which names bad input, waits for metadata and stops on schema
changes; so are the changes the order check on arrays leaves to the exact one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np

from podd_cdc import qlik_batch_kernel as kernel
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_array_cutter import QlikArrayCutter
from podd_cdc.qlik_batch import QlikBatch, distinct_texts, read_values
from podd_cdc.qlik_batch_changes import TableChanges, tables_changes
from podd_cdc.qlik_delta_rows import TableBlock
from podd_cdc.qlik_feed import ReadAt, batch_lines, message_codes
from podd_cdc.qlik_held import HeldChanges
from podd_cdc.tables import MappedTable
from podd_cdc.transaction_codes import TransactionCodes
from podd_cdc.values import MAX_VALUE_BYTES
from podd_kafka.record_columns import JoinedValues, values_at
from podd_kafka.record_runs import RecordRun

#: A fetch of fewer messages is read a message at a time: reading a batch costs about 4 ms
#: whatever its size (each table's columns, a few dozen array steps each); measured on the
#: bench's messages, 34 µs a message in fetches of 200, 18 at 500, 14 at 2,000, where one
#: at a time costs about 25.
MIN_BATCH = 400


def hold_fetch(
    decoder: QlikDecoder,
    cutter: QlikArrayCutter,
    runs: list[tuple[str, RecordRun]],
    arrived: float,
    wall: datetime,
) -> dict[str, tuple[int, int]]:
    """Hold the first messages of each partition's run in a fetch (`runs`: key and messages,
    in offset order) from arrays, as far as the batch is sure of them and the order check
    on arrays passes them. Per partition: how many were held, and how many after them are
    for the exact decoder before a batch may be sure again (the first not held, and the
    messages right after it the kernel did not read either: a run of table descriptions
    is read exactly as one). Nothing is held from a fetch of fewer than `MIN_BATCH`
    messages (an empty answer)."""
    count = sum(len(messages) for _, messages in runs)
    if count < MIN_BATCH:
        return {}
    values, offsets, partition, sizes = fetch_arrays(runs, cutter.parts)
    batch = read_values(values)
    tables = batch_tables(decoder, batch, sizes)
    unread = ~(batch.read & (sizes <= MAX_VALUE_BYTES))
    sure = np.zeros(count, np.bool_)
    for _, made in tables:
        sure[made.messages[made.sure]] = True
    for _, made in tables:
        sure[made.messages[~made.sure]] = False  # a message with a change not sure of
    first, where, held, start = {}, {}, np.zeros(count, np.bool_), 0
    for key, messages in runs:  # each run up to its first message not sure of
        ours = sure[start : start + len(messages)]
        first[key] = int(np.argmin(ours)) if not ours.all() else len(messages)
        held[start : start + first[key]] = True
        where[key] = start
        start += len(messages)
    chosen = [
        (made, np.nonzero(held[made.messages])[0], TableBlock(table, batch.out, made))
        for table, made in tables
    ]
    kept = [(made, these, cutter.new_block(block)) for made, these, block in chosen if len(these)]
    if not kept:
        return then_exactly(runs, first, where, unread)

    def lines(codes: TransactionCodes) -> HeldChanges:
        def read(made: TableChanges, these: Any) -> ReadAt:
            at = made.messages[these]
            return ReadAt(partition[at], offsets[at], arrived, sizes[at])

        messages = np.concatenate([m.messages[k] for m, k, _ in kept])
        coded = message_codes(batch, messages, codes)  # every table's ids looked up at once
        return HeldChanges.joined(
            [batch_lines(batch, m, k, read(m, k), block, coded) for m, k, block in kept]
        )

    judged = cutter.feed_lines(lines, wall)
    for p, at in zip(judged.partition.tolist(), judged.offset.tolist(), strict=True):
        key = cutter.keys[p]  # read again from the first message judged
        read_from = offsets[where[key] : where[key] + first[key]]
        first[key] = min(first[key], int(np.searchsorted(read_from, at)))
    return then_exactly(runs, first, where, unread)


def fetch_arrays(
    runs: list[tuple[str, RecordRun]], parts: dict[str, int]
) -> tuple[JoinedValues, Any, Any, Any]:
    """A fetch's runs as a batch reader takes them: the values in one buffer and where each
    is (`record_columns.values_at`), and each message's offset, partition (its number in
    `parts`) and size."""
    values = values_at([piece for _, run in runs for piece in run.value_pieces()])
    offsets = np.concatenate([run.offset_array() for _, run in runs])
    partition = np.concatenate([np.full(len(ms), parts[key], np.int64) for key, ms in runs])
    _, starts, ends = values
    return values, offsets, partition, ends - starts


def then_exactly(
    runs: list[tuple[str, RecordRun]], first: dict[str, int], where: dict[str, int], unread: Any
) -> dict[str, tuple[int, int]]:
    """Per run, its messages held (`first`) and then those for the exact decoder: the
    first not held, and the unread ones right after it (`where`: each run's place in the
    batch)."""
    found = {}
    for key, messages in runs:
        held, at = first[key], where[key]
        if held == len(messages):
            found[key] = (held, 0)
            continue
        after = unread[at + held + 1 : at + len(messages)]
        found[key] = (held, 1 + (int(np.argmin(after)) if not after.all() else len(after)))
    return found


def batch_tables(
    decoder: QlikDecoder, batch: QlikBatch, sizes: Any = None
) -> list[tuple[MappedTable, TableChanges]]:
    """Each known table's changes among the messages the kernel read (no larger than a
    value may be, where `sizes` gives the messages' sizes): grouped by schema id, the exact
    bytes compared (a message whose schema id only shares a hash is in no group)."""
    read = batch.read if sizes is None else batch.read & (sizes <= MAX_VALUE_BYTES)
    read = np.nonzero(read)[0]
    if not len(read):
        return []
    starts, ends = (a[read] for a in batch.texts(kernel.M_SCHEMA_ID))
    first, same = distinct_texts(batch.out, starts, ends)
    groups = []
    for group, k in enumerate(first.tolist()):
        schema_id = batch.out[starts[k] : ends[k]].tobytes().decode()
        mapped = decoder.batch_table(schema_id)
        if mapped is not None:
            groups.append((mapped, read[same == group], decoder.mask_check(schema_id)))
    made_of = tables_changes(batch, groups)
    return [(mapped, made) for (mapped, _, _), made in zip(groups, made_of, strict=True)]
