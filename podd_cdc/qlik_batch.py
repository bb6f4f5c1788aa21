"""A batch of Qlik JSON data messages read by the compiled kernel (`podd_cdc.qlik_batch_kernel`):
the arrays it fills, and what one message read says, in Python's terms.

The arrays are the columnar origin's input (issue 46); `message` is the same reading as
Python values, one message at a time, for the tests that hold the kernel to JSON's reading
and for a caller that needs one message whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from podd_cdc import column_kernels, json_rows
from podd_cdc import qlik_batch_kernel as kernel
from podd_kafka.record_columns import JoinedValues, values_at

_WORDS = kernel.word_table()
#: The header texts, by the name Qlik gives them, and their column in `heads`.
HEADER_TEXTS = dict(zip(kernel.WORDS[8:15], kernel._HEADER_SLOTS.tolist(), strict=True))
#: `fields` has room for a field every this many bytes of the batch: the shortest field,
#: `"":0,`, takes five, and a message that would need more room is not read.
BYTES_A_FIELD = 5


@dataclass(frozen=True)
class ReadMessage:
    """What one message read by the kernel says: the envelope's schema id, the headers
    given (null ones left out), and each row as its fields in the order written (None where
    the row is null or not given)."""

    schema_id: str | None
    headers: dict[str, Any]
    data: list[tuple[str, Any]] | None
    before: list[tuple[str, Any]] | None
    has_message: bool


@dataclass(frozen=True)
class QlikBatch:
    """The kernel's arrays for one batch: texts, a line a message, a line a field."""

    out: Any
    heads: Any
    fields: Any
    field_starts: Any  # message m's fields are lines field_starts[m] to field_starts[m + 1]

    @property
    def read(self) -> Any:
        """Which messages the kernel read (the rest are the exact path's)."""
        return self.heads[:, kernel.M_OK] == 1

    def texts(self, column: int) -> tuple[Any, Any]:
        """Each message's (start, end) in `out` of a text header; -1 where there is none."""
        return self.heads[:, column], self.heads[:, column + 1]

    def _row(self, m: int, side: int) -> list[tuple[str, Any]]:
        return row_fields(
            self.out, self.fields[self.field_starts[m] : self.field_starts[m + 1]], side
        )

    def _text(self, start: int, end: int) -> str:
        return bytes(self.out[start:end]).decode()

    def message(self, m: int) -> ReadMessage | None:
        """Message `m` as the kernel read it; None if it was not read."""
        head = self.heads[m].tolist()
        if head[kernel.M_OK] != 1:
            return None
        headers: dict[str, Any] = {
            name: self._text(head[slot], head[slot + 1])
            for name, slot in HEADER_TEXTS.items()
            if head[slot] >= 0
        }
        has = head[kernel.M_HAS]
        if has & kernel.HAS_COUNTER:
            headers["transactionEventCounter"] = head[kernel.M_COUNTER]
        if head[kernel.M_LAST] >= 0:
            headers["transactionLastEvent"] = head[kernel.M_LAST] == 1
        schema = head[kernel.M_SCHEMA_ID]
        return ReadMessage(
            schema_id=None if schema < 0 else self._text(schema, head[kernel.M_SCHEMA_ID + 1]),
            headers=headers,
            data=self._row(m, 0) if has & kernel.HAS_DATA else None,
            before=self._row(m, 1) if has & kernel.HAS_BEFORE else None,
            has_message=bool(has & kernel.HAS_MESSAGE),
        )


def row_fields(out: Any, lines: Any, side: int) -> list[tuple[str, Any]]:
    """The fields of `side` among one message's `lines` (`podd_cdc.json_rows`), as Python's
    JSON reads them, in the order written: (key, value)."""
    k = json_rows

    def text(start: int, end: int) -> str:
        return bytes(out[start:end]).decode()

    row = []
    for line in lines[lines[:, k.F_SIDE] == side].tolist():
        value: Any = None
        kind = line[k.F_KIND]
        if kind == k.V_INT:
            value = line[k.F_INT]
        elif kind == k.V_BOOL:
            value = line[k.F_INT] == 1
        elif kind == k.V_STR:
            value = text(line[k.F_STR0], line[k.F_STR1])
        elif kind == k.V_NUMBER:  # as Python's JSON reads it: a float or a large int
            value = json.loads(text(line[k.F_STR0], line[k.F_STR1]))
        row.append((text(line[k.F_KEY0], line[k.F_KEY1]), value))
    return row


def read_batch(messages: list[bytes], allocate: Callable[..., Any] = np.empty) -> QlikBatch:
    """`messages` read by the kernel into arrays made by `allocate` (`read_values`)."""
    return read_values(values_at([messages]), allocate)


def read_values(values: JoinedValues, allocate: Callable[..., Any] = np.empty) -> QlikBatch:
    """The messages `buf[starts[m]:ends[m]]` of `values` (`record_columns.values_at`) read by
    the kernel into arrays made by `allocate` (uninitialised: the kernel sets every cell it
    hands on). Memory: about 15 bytes of arrays a byte read."""
    buf, starts, ends = values
    out, heads, fields = output_arrays(len(buf), len(starts), kernel.HEAD_COLUMNS, allocate)
    used, count = kernel.read_batch(buf, starts, ends, *_WORDS, out, heads, fields)
    return QlikBatch(out[:used], heads, *message_fields(fields[:count], len(starts)))


def output_arrays(
    size: int, count: int, head_columns: int, allocate: Callable[..., Any] = np.empty
) -> tuple[Any, Any, Any]:
    """What a batch reader's kernel writes, for `count` messages in `size` bytes, made by
    `allocate` (uninitialised: the kernel sets every cell it hands on): the texts (as large
    as the bytes), a line of `head_columns` a message, and room for a field every
    `BYTES_A_FIELD` bytes."""
    out = allocate(size, np.uint8)
    heads = allocate((count, head_columns), np.int64)
    fields = allocate((size // BYTES_A_FIELD + 1, json_rows.FIELD_COLUMNS), np.int64)
    return out, heads, fields


def message_fields(fields: Any, count: int) -> tuple[Any, Any]:
    """The lines of `fields` a kernel filled, and where each of `count` messages' begin."""
    return fields, np.searchsorted(fields[:, json_rows.F_MSG], np.arange(count + 1))


def distinct_texts(out: Any, starts: Any, ends: Any, keys: Any = None) -> tuple[Any, Any]:
    """The texts `out[starts[k]:ends[k]]` grouped by `keys` (their hashes unless given): the
    first text of each group, and each text's group, or -1 where its bytes are not that first
    text's (a hash can be made to collide: the caller takes such a text by itself)."""
    if keys is None:
        keys = column_kernels.text_hashes(out, starts, ends)
    _, first, which = np.unique(keys, return_index=True, return_inverse=True)
    texts = [out[starts[k] : ends[k]].tobytes() for k in first.tolist()]
    bounds = np.cumsum([0, *map(len, texts)])
    same = which.reshape(-1).astype(np.int64)
    joined = np.frombuffer(b"".join(texts), np.uint8)
    column_kernels.same_texts(out, starts, ends, joined, bounds, same)
    return first, same
