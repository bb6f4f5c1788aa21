"""A store-neutral reading of a datamart as of a delta: one JSON line per row, every table,
values in their JSON form (`podd-loader dump --format jsonl`). The same deltas give the same
lines from PostgreSQL and from ClickHouse, which is how the two are compared."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import date, datetime, time
from typing import Any

from protocol.schema import LogicalSchema
from replica_store.interface import Store


def json_value(value: Any) -> Any:
    """A column value as JSON holds it: dates, times and timestamps as ISO text (UTC
    timestamps without an offset, as Prostore's TIMESTAMP), non-finite floats as text."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def dump_lines(store: Store, schema: LogicalSchema, as_of: int) -> Iterator[str]:
    """Every row of every table as of delta `as_of`, tables in schema order, rows sorted by
    their JSON text (so two stores' dumps compare line by line)."""
    for table in schema:
        names = table.column_names
        lines = [
            json.dumps(
                {"table": table.name, "row": dict(zip(names, map(json_value, row), strict=True))},
                ensure_ascii=False,
                sort_keys=False,
            )
            for row in store.read_as_of(schema.datamart, table, as_of)
        ]
        yield from sorted(lines)
