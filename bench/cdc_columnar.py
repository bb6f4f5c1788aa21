"""`python -m bench.cdc_columnar`: how fast the columnar design of issue 46 turns a batch of
Qlik messages into a delta's Avro bodies, against the origin's path today on the same
messages, in one process.

    python -m bench.cdc_columnar [--changes 30000] [--repeats 3] [--json]

Why: `bench.cdc_instructions` showed no single step of today's per-change path worth more
than a few percent; the issue asks for a columnar path. Before building it, this measures a
prototype of its whole chain on `bench.cdc_bench`'s messages, and checks that it makes the
same rows as today's path:
- read: one compiled pass over the batch's bytes (`podd_cdc.qlik_batch_kernel`);
- columns: per table, each field scattered to its column by its key's hash, DATE and DATETIME
  texts converted compiled (`bench.cdc_columnar_values`), strings left where the pass
  unescaped them;
- an UPDATE that moves a row to another key also deletes the old key, as today;
- the last change per key by (sequence, position), with one `numpy.lexsort`;
- each table's body written from those columns by the compiled body writer.

What it leaves out, so its figure is a floor for the design and not the origin's: the cut's
transactions, bound and duplicates, the order check, masks, REFRESH rows, types the bench
does not write, keys other than one integer column (a text key would be compared and sorted
by where its text stands), chunking (one body per table) and the messages the pass does not
read (none here; the exact path would take them). It finds a table by the bench's schemaIds
(`NAME-v1-...`) and a column by its name in capitals, where the origin has its catalog and
table mapping. Today's side is `bench.cdc_instructions.origin_path`: decode, check, feed,
cut every 2,000 messages, frame.
"""

from __future__ import annotations

import argparse
import io
import json
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

import fastavro
import numpy as np

from bench.cdc_columnar_values import hash_of, hashes, sequences, times
from bench.cdc_instructions import _WALL, PARTITIONS, _decoder, origin_path, prepared
from podd_cdc import qlik_batch_kernel as kernel
from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.qlik_batch import QlikBatch, read_batch
from podd_cdc.records import Position
from protocol.avro_encoder import _KINDS, container, encode_records
from protocol.body_writer import body_schema
from protocol.schema import LogicalSchema, Table
from protocol.types import TypeKind


def _columns(
    batch: QlikBatch, table: Table, side: Any, messages: Any, column_of: dict[int, int]
) -> tuple[Any, Any, Any]:
    """values, lengths, valid (`encode_records`' layout) of one row a message in `messages`
    (a mask), from the fields of each message's `side` (a mask over fields)."""
    out, fields = batch.out, batch.fields
    width, count = len(table.columns) + 1, int(messages.sum())
    picked = np.nonzero(side & messages[fields[:, kernel.F_MSG]])[0]
    names, which = np.unique(fields[picked, kernel.F_HASH], return_inverse=True)
    columns = np.array([column_of.get(int(h), -1) for h in names], np.int64)[which]
    rows = (np.cumsum(messages) - 1)[fields[picked, kernel.F_MSG]]
    values = np.zeros((width, count), np.int64)
    lengths = np.zeros((width, count), np.int64)
    valid = np.zeros((width, count), np.uint8)
    valid[width - 1] = 1
    for c, column in enumerate(table.columns):
        these = picked[columns == c]
        at = rows[columns == c]
        line = fields[these]
        valid[c, at] = line[:, kernel.F_KIND] != kernel.V_NULL
        if column.type.is_string:
            values[c, at] = line[:, kernel.F_STR0]
            lengths[c, at] = line[:, kernel.F_STR1] - line[:, kernel.F_STR0]
        elif column.type.kind in (TypeKind.DATE, TypeKind.TIMESTAMP):
            texts = line[line[:, kernel.F_KIND] == kernel.V_STR]  # a null has no text
            got, good = np.zeros(len(texts), np.int64), np.zeros(len(texts), np.bool_)
            with_time = column.type.kind == TypeKind.TIMESTAMP
            times(out, texts[:, kernel.F_STR0], texts[:, kernel.F_STR1], with_time, got, good)
            values[c, at[line[:, kernel.F_KIND] == kernel.V_STR]] = got
        else:
            values[c, at] = line[:, kernel.F_INT]
    return values, lengths, valid


def _body(table: Table, values: Any, lengths: Any, valid: Any, strings: Any) -> bytes:
    width = len(table.columns) + 1
    kinds = np.array([*(_KINDS[c.type.avro.primitive] for c in table.columns), _KINDS["int"]])
    nullable = np.array([True] * (width - 1) + [False], np.bool_)
    records = np.empty(values.shape[1] * width * 11 + int(lengths.sum()), np.uint8)
    ends = np.empty(values.shape[1], np.int64)
    encode_records(kinds.astype(np.int8), nullable, values, lengths, valid, strings, records, ends)
    return container(body_schema(table), "deflate", records, ends)


def table_bodies(batch: QlikBatch, schema: LogicalSchema) -> tuple[int, dict[str, bytes]]:
    """The changes read, and per table one body of the last change per key."""
    heads, fields, out = batch.heads, batch.fields, batch.out
    ids, table_of = np.unique(hashes(out, *batch.texts(kernel.M_SCHEMA_ID)), return_inverse=True)
    high, low = np.empty(len(heads), np.int64), np.empty(len(heads), np.int64)
    in_order = np.empty(len(heads), np.bool_)
    seq_starts, seq_ends = batch.texts(kernel.M_SEQ)
    sequences(out, seq_starts, seq_ends, high, low, in_order)
    operation = out[np.minimum(heads[:, kernel.M_OP], max(len(out) - 1, 0))]
    deleted, updated = operation == ord("D"), operation == ord("U")
    row_side = fields[:, kernel.F_SIDE] == deleted[fields[:, kernel.F_MSG]]
    by_name = {t.name: t for t in schema.tables}
    changes, bodies = 0, {}
    for u in range(len(ids)):
        first = int(np.argmax(table_of == u))
        start, end = heads[first, kernel.M_SCHEMA_ID : kernel.M_SCHEMA_ID + 2]
        table = by_name.get(bytes(out[start:end]).decode().rsplit("-v", 2)[0])
        if table is None:
            continue
        column_of = {hash_of(c.name.upper()): i for i, c in enumerate(table.columns)}
        mine = (table_of == u) & batch.read & in_order
        changes += int(mine.sum())
        values, lengths, valid = _columns(batch, table, row_side, mine, column_of)
        values[-1] = deleted[mine]
        moves = mine & updated  # an UPDATE to another key deletes the old key
        old = _columns(batch, table, fields[:, kernel.F_SIDE] == 1, moves, column_of)
        keys = list(table.key_positions)
        moved = (old[0][keys] != values[keys][:, updated[mine]]).any(axis=0)
        old[0][-1] = 1
        values, lengths, valid = (
            np.concatenate([o[:, moved], n], axis=1)
            for o, n in zip(old, (values, lengths, valid), strict=True)
        )
        where = np.concatenate([np.nonzero(moves)[0][moved], np.nonzero(mine)[0]])
        order = np.lexsort((np.arange(len(where)), where, low[where], high[where], values[keys[0]]))
        key = values[keys[0]][order]
        last = order[np.append(key[1:] != key[:-1], True)]
        kept = [np.ascontiguousarray(a[:, last]) for a in (values, lengths, valid)]
        bodies[table.name] = _body(table, kept[0], kept[1], kept[2], out)
    return changes, bodies


def body_rows(bodies: dict[str, bytes]) -> dict[str, list[tuple[Any, ...]]]:
    """Each body's rows as tuples (times naive, as the origin's rows hold them), sorted."""

    def plain(value: Any) -> Any:
        return value.replace(tzinfo=None) if isinstance(value, datetime) else value

    found = {}
    for name, body in bodies.items():
        records = cast(Iterable[dict[str, Any]], fastavro.reader(io.BytesIO(body)))
        rows = (tuple(map(plain, r.values())) for r in records)
        found[name] = sorted(rows, key=repr)
    return found


def today_rows(data: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    """The rows today's origin cuts from the same messages as one delta, sorted."""
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
    return {
        name: sorted(((*r.values, r.sys_op) for r in rows), key=repr)
        for name, rows in found[1].items()
        if rows
    }


def measure(changes: int, repeats: int) -> dict[str, Any]:
    data = prepared("qlik", changes)
    messages = [value for _, value in data["messages"]]
    batch = read_batch(messages[:500])  # numba's compile (cached on disk after the first run)
    table_bodies(batch, data["schema"])
    columnar, today = [], []
    for _ in range(repeats):  # alternating: this machine's speed drifts
        started = time.process_time()
        read_changes, bodies = table_bodies(read_batch(messages), data["schema"])
        columnar.append(time.process_time() - started)
        started = time.process_time()
        origin_path("qlik", data["schema"], data["messages"])
        today.append(time.process_time() - started)
    per = 1e6 / data["source_changes"]
    return {
        "messages": len(messages),
        "source_changes": data["source_changes"],
        "read_changes": read_changes,
        "same_rows_as_today": body_rows(bodies) == today_rows(data),
        "columnar_us_per_change": [round(s * per, 2) for s in columnar],
        "today_us_per_change": [round(s * per, 2) for s in today],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cdc_columnar", description=__doc__)
    parser.add_argument("--changes", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
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
