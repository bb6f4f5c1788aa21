"""`python -m bench.cdc_columnar`: how fast the columnar design of issue 46 turns a batch of
Qlik messages into a delta's Avro bodies, against the origin's path today on the same
messages, in one process.

    python -m bench.cdc_columnar [--changes 30000] [--repeats 3] [--json]

Why: `bench.cdc_instructions` showed no single step of today's per-change path worth more
than a few percent; the issue asks for a columnar path. Before building it, this measures a
prototype of its whole chain on `bench.cdc_bench`'s messages, and checks that it makes the
same rows as today's path:
- read: one compiled pass over the batch's bytes (`podd_cdc.qlik_batch_kernel`);
- changes: per table, each message's operation, sequence, mask and transaction headers
  checked and each value converted as the exact decoder does (`podd_cdc.qlik_batch_changes`
  over `podd_cdc.qlik_columns`; a change it is not sure of stops the bench, as none should
  be here), strings left where the pass unescaped them;
- an UPDATE that moves a row to another key also deletes the old key, as today;
- the last change per key by (sequence, position), with one `numpy.lexsort`;
- each table's body written from those columns by the compiled body writer.

What it leaves out, so its figure is a floor for the design and not the origin's: the cut's
transactions, bound and duplicates, the order check, REFRESH rows' order, keys other than one
integer column (a text key would be compared and sorted by where its text stands), chunking
(one body per table) and the messages the pass does not read (none here; the exact path
would take them). Tables are the origin decoder's, by schema id, from the metadata messages
(`tables_of`). Today's side is `bench.cdc_instructions.origin_path`: decode, check, feed, cut
every 2,000 messages, frame.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, cast

import fastavro
import numpy as np

from bench.cdc_instructions import _WALL, PARTITIONS, _decoder, origin_path, prepared
from bench.run_args import in_process_args
from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_batch import QlikBatch, read_batch
from podd_cdc.qlik_batch_changes import TableChanges
from podd_cdc.qlik_batch_intake import batch_tables
from podd_cdc.qlik_delta_rows import change_rows
from podd_cdc.records import Position
from podd_cdc.rows import rows_records_digest
from podd_cdc.tables import MappedTable
from protocol.body_writer import column_bodies


def table_changes(
    batch: QlikBatch, decoder: QlikDecoder
) -> Iterator[tuple[MappedTable, TableChanges]]:
    """Each table's changes of a read batch (the origin's grouping,
    `qlik_batch_intake.batch_tables`). A change step 1 is not sure of stops the bench: none
    should be here."""
    for mapped, made in batch_tables(decoder, batch):
        if not made.sure.all():
            raise ValueError(
                f"{int((~made.sure).sum())} changes of {mapped.table.name} are the exact path's"
            )
        yield mapped, made


def last_per_key(key: Any, high: Any, low: Any, position: Any) -> Any:
    """Of rows with these keys, sequences and positions, the last to each key."""
    order = np.lexsort((np.arange(len(key)), position, low, high, key))
    return order[np.append(key[order][1:] != key[order][:-1], True)] if len(key) else order


def table_bodies(batch: QlikBatch, decoder: QlikDecoder) -> tuple[int, dict[str, list[bytes]]]:
    """The changes read, and per table one body of the last change per key."""
    changes, bodies = 0, {}
    for mapped, made in table_changes(batch, decoder):
        changes += len(made.messages)
        every = np.arange(len(made.messages))
        values, lengths, valid, where, _ = change_rows(mapped, made, every)
        high, low = made.sequence
        table = mapped.table
        key = values[table.key_positions[0]]
        last = last_per_key(key, high[where], low[where], made.messages[where])
        kept = [np.ascontiguousarray(a[:, last]) for a in (values, lengths, valid)]
        one = len(last) or 1  # one body a table
        values, lengths, valid = kept
        written = column_bodies(
            table, values, lengths, valid, batch.out, chunk_rows=one, codec="deflate"
        )
        bodies[table.name] = [body for body, _ in written]
    return changes, bodies


def body_rows(bodies: dict[str, list[bytes]]) -> dict[str, list[tuple[Any, ...]]]:
    """Each table's rows in its bodies as tuples (times naive, as the origin's rows hold
    them), sorted; tables without rows left out."""

    def plain(value: Any) -> Any:
        return value.replace(tzinfo=None) if isinstance(value, datetime) else value

    found = {}
    for name, chunks in bodies.items():
        rows = []
        for body in chunks:
            records = cast(Iterable[dict[str, Any]], fastavro.reader(io.BytesIO(body)))
            rows += [tuple(map(plain, r.values())) for r in records]
        if rows:
            found[name] = sorted(rows, key=repr)
    return found


def today_rows(data: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    """The rows today's origin cuts from the same messages as one delta, sorted."""
    return today_cut(data)[1]


def today_cut(data: dict[str, Any]) -> tuple[str, dict[str, list[tuple[Any, ...]]]]:
    """Of the delta today's origin cuts of the same messages as one, the records digest of
    its rows (`rows_records_digest`, as a rebuild by today's path would check a delta the
    columnar path cut), and its rows, sorted."""
    schema = data["schema"]
    decoder = _decoder("qlik", schema)
    keys = [f"t:{p}" for p in range(PARTITIONS)]
    cutter = Cutter("qlik", schema, dict.fromkeys(keys, 0), None, Bounds(max_rows=10**9))
    offsets = [0] * PARTITIONS
    for partition, value in data["messages"]:
        at = Position("t", partition, offsets[partition])
        offsets[partition] += 1
        record = decoder.decode("t", value)
        cutter.check(at, record, _WALL, keys[partition])
        cutter.feed(at, record, 0.0, len(value), keys[partition])
    found = cutter.cut(0, set(cutter.parts), 0.0, _WALL, force=True)
    assert found is not None
    return rows_records_digest(schema, found[1]), {
        name: sorted(((*r.values, r.sys_op) for r in rows), key=repr)
        for name, rows in found[1].items()
        if rows
    }


def tables_of(data: dict[str, Any]) -> QlikDecoder:
    """A decoder that has read the tables the messages describe (the origin's mapping)."""
    decoder = _decoder("qlik", data["schema"])
    for _, value in data["messages"]:
        if b'"type": "DT"' not in value:
            decoder.decode("t", value)
    return cast(QlikDecoder, decoder)


def measure(changes: int, repeats: int) -> dict[str, Any]:
    data = prepared("qlik", changes)
    messages = [value for _, value in data["messages"]]
    tables = tables_of(data)
    batch = read_batch(messages[:500])  # numba's compile (cached on disk after the first run)
    table_bodies(batch, tables)
    read_changes, bodies = table_bodies(read_batch(messages), tables)
    columnar, today = alternating(repeats, data, lambda: table_bodies(read_batch(messages), tables))
    return {
        "messages": len(messages),
        "source_changes": data["source_changes"],
        "read_changes": read_changes,
        "same_rows_as_today": body_rows(bodies) == today_rows(data),
        "columnar_us_per_change": columnar,
        "today_us_per_change": today,
    }


def alternating(
    repeats: int, data: dict[str, Any], run: Callable[[], Any]
) -> tuple[list[float], list[float]]:
    """CPU µs a source change of `run()` and of today's path on `data`'s messages, in
    alternating runs (this machine's speed drifts)."""
    ours, today = [], []
    for _ in range(repeats):
        started = time.process_time()
        run()
        ours.append(time.process_time() - started)
        started = time.process_time()
        origin_path("qlik", data["schema"], data["messages"])
        today.append(time.process_time() - started)
    per = 1e6 / data["source_changes"]
    return [round(s * per, 2) for s in ours], [round(s * per, 2) for s in today]


def main(argv: list[str] | None = None) -> int:
    args = in_process_args("python -m bench.cdc_columnar", __doc__ or "", argv)
    found = measure(args.changes, args.repeats)
    if args.json:
        print(json.dumps(found, indent=1))
        return 0
    print(
        f"{found['source_changes']:,} Qlik changes ({found['read_changes']:,} read by the "
        f"kernel); the same rows as today's path: {found['same_rows_as_today']}"
    )
    print(f"  columnar prototype: {found['columnar_us_per_change']} CPU µs a change")
    print(f"  today's path:       {found['today_us_per_change']} CPU µs a change")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
