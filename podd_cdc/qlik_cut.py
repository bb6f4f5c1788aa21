"""A delta cut on arrays (steps 2 to 4 of the columnar origin, docs/cdc/internals.md):
what `Cutter.cut` records in the cut log and hands on, from the changes `QlikHeld` holds
(`cut_delta`) or `DataWorksHeld` took (`delta_of`, which both use).

`cut_delta` takes what a look found, makes each table's rows on columns
(`qlik_delta_rows.delta_tables`) and their Avro records once: the cut log's digest is the
records digest of those records (`rows.records_digest`), and the delta's chunks are ranges
of the same records (`protocol.body_writer.record_bodies`). The `Cut` is the one `Cutter`
records for the same changes, but for the digest's kind (a rebuild checks each cut by the
kind it recorded: `rows.digest_as_recorded`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from podd_cdc.cutlog import Cut, Span
from podd_cdc.qlik_delta_rows import Block, DeltaTable, delta_tables, table_records, written
from podd_cdc.qlik_held import HeldChanges, Look, QlikHeld, sequence_key_of
from podd_cdc.rows import records_digest
from protocol.schema import LogicalSchema


@dataclass(frozen=True)
class ColumnarDelta:
    """A delta cut: its record in the cut log, the changes it took, its rows, and each
    table's Avro records and where each ends (what `record_bodies` cuts chunks from)."""

    cut: Cut
    taken: HeldChanges
    tables: dict[str, DeltaTable]
    records: dict[str, tuple[Any, Any]]


def cut_delta(
    delta: int,
    schema: LogicalSchema,
    held: QlikHeld,
    look: Look,
    blocks: Mapping[int, Block],
    keys: Sequence[str],
    last: Cut | None,
    wall: datetime,
) -> ColumnarDelta:
    """Delta `delta` of what `look` found: taken from `held`, its rows made from `blocks`;
    `keys` names each partition (`cutlog.partition_key`), `last` is the last cut, `wall`
    dates a delta none of whose changes has a source time."""
    taken = held.take(look)
    bound = None if look.bound is None else sequence_key_of(look.bound)
    return delta_of(
        delta,
        schema,
        taken.changes,
        (bound, taken.date(last, wall)),
        taken.spans,
        blocks,
        keys,
        last,
    )


def delta_of(
    delta: int,
    schema: LogicalSchema,
    taken: HeldChanges,
    bound_and_date: tuple[Any, datetime],
    spans: Sequence[Span],
    blocks: Mapping[int, Block],
    keys: Sequence[str],
    last: Cut | None,
) -> ColumnarDelta:
    """Delta `delta` of the changes `taken` (either format's), cut at the bound (as the cut
    log records it) and dated as `bound_and_date` says, with each partition's span: its rows
    made from `blocks`, their records written once, for the digest and the chunks."""
    tables = delta_tables(schema, taken, blocks)
    records = {name: table_records(rows) for name, rows in tables.items()}
    bound, date = bound_and_date
    cut = Cut(
        delta,
        date,
        bound,
        last.bound if last is not None else None,
        dict(zip(keys, spans, strict=True)),
        len(taken),
        sum(len(rows) for rows in tables.values()),
        records_digest({name: written(*found) for name, found in records.items()}),
    )
    return ColumnarDelta(cut, taken, tables, records)
