"""Which delta a change belongs to: the one membership rule of docs/contracts/CDC.md's cut log.

`taken_by` serves the live cut (a change already in a delta is a copy), the restart and the
rebuild of a recorded delta, so a rebuilt delta is the delta first sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from podd_cdc.cutlog import Cut, partition_key
from podd_cdc.records import Change, Position, Record
from podd_cdc.rows import delta_rows
from protocol.apply_model import DeltaRow
from protocol.schema import LogicalSchema

Format = Literal["qlik", "dataworks"]


def taken_by(fmt: Format, cut: Cut, at: Position, change: Change, key: str | None = None) -> bool:
    """Whether `change`, read at `at`, belongs to `cut` or a delta before it (or, for Qlik, is
    a second copy of one that did). `key`: the partition's key, where the caller has it; the
    span is looked up only where the answer needs it (not for most changes)."""
    if change.cut_key is None:  # a full-load row
        span = cut.spans.get(key or partition_key(at.topic, at.partition))
        return span is not None and at.offset < span.refresh_upto
    if cut.bound is None:
        return False
    below = le(change.cut_key, cut.bound)
    if fmt == "qlik" or not below:
        return below
    span = cut.spans.get(key or partition_key(at.topic, at.partition))
    return span is not None and at.offset < span.end


def in_delta(fmt: Format, cut: Cut, prev: Cut | None, at: Position, change: Change) -> bool:
    """Whether `change`, read at `at` within the cut's spans, is one of delta `cut.delta`."""
    span = cut.spans.get(partition_key(at.topic, at.partition))
    if span is None or not span.lo <= at.offset < span.end:
        return False
    if change.cut_key is None:
        return span.refresh_from <= at.offset < span.refresh_upto
    if cut.bound is None or not le(change.cut_key, cut.bound):
        return False
    return prev is None or not taken_by(fmt, prev, at, change)


def le(a: Any, b: Any) -> bool:
    return bool(a <= b)


def rebuild(
    fmt: Format,
    schema: LogicalSchema,
    cut: Cut,
    prev: Cut | None,
    records: Iterable[tuple[Position, Record]],
) -> dict[str, list[DeltaRow]]:
    """Delta `cut.delta` again, from the records read back over its spans."""
    seen: set[tuple[Any, ...]] = set()
    changes = []
    for at, record in records:
        if not isinstance(record, Change) or not in_delta(fmt, cut, prev, at, record):
            continue
        if record.identity is not None:
            if record.identity in seen:
                continue
            seen.add(record.identity)
        changes.append((at, record))
    return delta_rows(schema, changes)
