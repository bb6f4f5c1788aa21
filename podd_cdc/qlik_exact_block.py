"""Changes the exact decoder made, held on arrays beside the ones read on arrays (the
columnar origin's way back to one holder, docs/cdc/internals.md).

A message the batch is not sure of is the exact decoder's (`podd_cdc.qlik.QlikDecoder`):
its `Change` holds Python values. `ExactBlock` keeps such changes of one table, a line
each, and makes the rows of some of them in the layout `qlik_delta_rows` makes rows of a
block of columns (`DeltaTable`), so that one delta can take changes of both kinds and
choose the last change per key among all of them. Each Python value is held as the batch
holds the value it converts to (`qlik_columns.column_values` is the inverse): an integer,
a float's bits, days, microseconds, 0 or 1, or a text's bytes. A change's rows keep their
order (an old key's delete before its upsert). `qlik_feed.exact_lines` gives the lines
`QlikHeld.feed` takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import time
from typing import Any

import numpy as np

from podd_cdc.qlik_columns import TEXT_FORMS, forms_of
from podd_cdc.qlik_delta_rows import DeltaTable
from podd_cdc.records import Change
from podd_cdc.tables import MappedTable
from podd_cdc.values import days, micros


@dataclass(frozen=True)
class ExactBlock:
    """Changes of one table from the exact decoder: what held changes point into
    (`HeldChanges.block`, and `line` there), as a `qlik_delta_rows.TableBlock` is."""

    table: MappedTable
    changes: Sequence[Change]

    def rows(self, lines: Any, ranks: Any) -> tuple[DeltaTable, tuple[Any, Any]]:
        """The rows changes `lines` make, with each row's change's rank and its place among
        that change's rows."""
        forms = forms_of(self.table)
        made: list[tuple[Any, ...]] = []
        rank: list[int] = []
        sub: list[int] = []
        for line, of in zip(lines.tolist(), ranks.tolist(), strict=True):
            for k, row in enumerate(self.changes[line].rows):
                made.append((*row.values, row.sys_op))
                rank.append(of)
                sub.append(k)
        values, lengths, valid, strings = _columns(forms, made)
        rows = DeltaTable(self.table.table, forms, values, lengths, valid, strings)
        return rows, (np.array(rank, np.int64), np.array(sub, np.int64))


def _columns(forms: tuple[str, ...], made: list[tuple[Any, ...]]) -> tuple[Any, Any, Any, Any]:
    """Rows of Python values (`sys_op` last) in `DeltaTable`'s layout."""
    width, count = len(forms) + 1, len(made)
    values, lengths = np.zeros((width, count), np.int64), np.zeros((width, count), np.int64)
    valid = np.zeros((width, count), np.bool_)
    strings = bytearray()
    for r, row in enumerate(made):
        for c, value in enumerate(row[:-1]):
            if value is None:
                continue
            valid[c, r] = True
            form = forms[c]
            if form in TEXT_FORMS:
                data = value.encode()
                values[c, r], lengths[c, r] = len(strings), len(data)
                strings += data
            else:
                values[c, r] = _number(form, value)
        values[-1, r], valid[-1, r] = row[-1], True
    return values, lengths, valid, np.frombuffer(bytes(strings), np.uint8)


def _number(form: str, value: Any) -> int:
    """A Python value of a column taken in `form`, as the batch holds it."""
    if form == "real":
        return int(np.float64(value).view(np.int64).item())
    if form == "date":
        return days(value)
    if form in ("timestamp", "millis"):
        return micros(value)
    if form == "time":
        if not isinstance(value, time) or value.tzinfo is not None:
            raise ValueError(f"a time of day with a zone ({value}) is not held on arrays")
        seconds = (value.hour * 60 + value.minute) * 60 + value.second
        return seconds * 1_000_000 + value.microsecond
    if form in ("integer", "boolean"):
        return int(value)
    raise ValueError(f"a column taken as {form!r} is not held on arrays")
