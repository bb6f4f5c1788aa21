"""The fast path of CDC JSON: msgspec decodes a message straight into typed structs, in C.

orjson builds dicts that the decoders then walk value by value in Python (about 20 µs a Qlik
change). Here a table's row is a struct whose integer, float and text fields msgspec checks
while it parses (ranges, lengths); other columns arrive as JSON values and take the column's
own converter. The path only ever says yes to what the exact path accepts, with the same
values: anything it is not sure of (a value it cannot check, a message that is not plain
UTF-8, a big integer orjson would read as a float, an escaped NUL or surrogate, a message
over the size bound) makes it answer None, and the exact path decides, with its error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date
from functools import partial
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, UnsetType

from podd_cdc.tables import MappedTable
from podd_cdc.values import MAX_VALUE_BYTES, SourceColumn
from protocol.types import TypeKind

#: Integers orjson reads as integers; larger ones it reads as floats, so they take the exact
#: path.
_INT_LOW, _INT_HIGH = -(2**63), 2**64 - 1


class NotSure(Exception):
    """Raised inside the fast path: the exact path decides this message."""


def plain_message(value: bytes) -> bool:
    """A message the fast path may read: within the size bound (so no value is over it), and
    valid UTF-8 (msgspec does not check the text of fields it skips; orjson refuses it). Lone
    surrogate escapes msgspec refuses itself; NUL in text is checked on the row."""
    if len(value) > MAX_VALUE_BYTES:
        return False
    if not value.isascii():
        try:
            value.decode()
        except UnicodeDecodeError:
            return False
    return True


def checked(value: Any) -> Any:
    """A JSON value decoded as `Any`, if orjson would have decoded it the same."""
    kind = type(value)
    if kind is int and not _INT_LOW <= value <= _INT_HIGH:
        raise NotSure
    if kind is list or kind is dict:
        raise NotSure
    return value


def _field_type(column: SourceColumn) -> tuple[Any, bool]:
    """The struct field type of a column; and whether msgspec checks it fully."""
    if column.bounds is not None and isinstance(column.convert, partial):  # `_integer`
        low, high = column.bounds
        return Annotated[int, msgspec.Meta(ge=low, le=high)] | None, True
    kind = column.type.kind
    if kind in (TypeKind.FLOAT, TypeKind.DOUBLE):
        return float | None, True
    # msgspec reads only JSON booleans as bool, and only "YYYY-MM-DD" as a date: values the
    # converters take too, and read the same.
    if kind is TypeKind.BOOLEAN and column.convert.__name__ == "_boolean":
        return bool | None, True
    if kind is TypeKind.DATE and column.convert.__name__ == "_date":
        return date | None, True
    if hasattr(column.convert, "text_limit"):
        limit = column.convert.text_limit
        text = str if limit is None else Annotated[str, msgspec.Meta(max_length=limit)]
        return text | None, True
    return Any, False


class RowReader:
    """Reads one table's rows: every column (`whole`), or the key columns with the rest
    optional (`keyed`, a deleted row). Its structs live for one message and hold only values
    decoded from JSON, which cannot form a reference cycle: they stay out of the cyclic
    collector's sight (`gc=False`), as the records a run holds do (`podd_cdc.records`)."""

    def __init__(self, name: str, sources: Sequence[tuple[str, SourceColumn]], key: set[str]):
        rename = {f"c{i}": source for i, (source, _) in enumerate(sources)}
        typed = [_field_type(column) for _, column in sources]
        whole = [(f"c{i}", t) for i, (t, _) in enumerate(typed)]
        keyed_fields: list[Any] = [
            (f"c{i}", t) if sources[i][0] in key else (f"c{i}", t, None)
            for i, (t, _) in enumerate(typed)
        ]
        self._whole = msgspec.json.Decoder(
            msgspec.defstruct(
                f"{name}_row", whole, rename=rename, forbid_unknown_fields=True, gc=False
            )
        )
        self._keyed = msgspec.json.Decoder(
            msgspec.defstruct(f"{name}_key", keyed_fields, rename=rename, kw_only=True, gc=False)
        )
        # A row read inside its whole message (`podd_cdc.qlik_fast`): the key columns
        # required, the others UNSET when absent, no column unknown.
        either: list[Any] = [
            (f"c{i}", t) if sources[i][0] in key else (f"c{i}", t | UnsetType, UNSET)
            for i, (t, _) in enumerate(typed)
        ]
        self.row_type = msgspec.defstruct(
            f"{name}_in_message",
            either,
            rename=rename,
            kw_only=True,
            forbid_unknown_fields=True,
            gc=False,
        )
        converters: list[tuple[int, Callable[[Any], Any]]] = []
        texts: list[int] = []
        for i, ((_, column), (_, sure)) in enumerate(zip(sources, typed, strict=True)):
            if not sure:
                converters.append((i, column.fast()))
            elif hasattr(column.convert, "text_limit"):
                texts.append(i)
        self._convert = tuple(converters)
        self._texts = tuple(texts)

    def whole(self, raw: msgspec.Raw) -> tuple[Any, ...]:
        return self._values(msgspec.structs.astuple(self._whole.decode(raw)))

    def keyed(self, raw: msgspec.Raw) -> tuple[Any, ...]:
        return self._values(msgspec.structs.astuple(self._keyed.decode(raw)))

    def whole_of(self, row: Any) -> tuple[Any, ...]:
        """Every column of a `row_type` row: one absent is the exact path's to judge."""
        values = msgspec.structs.astuple(row)
        if UNSET in values:
            raise NotSure
        return self._values(values)

    def keyed_of(self, row: Any) -> tuple[Any, ...]:
        """A deleted `row_type` row: its key, the columns absent None. An empty one (no
        column given) the exact path reads as no row: it decides that one."""
        values = msgspec.structs.astuple(row)
        if UNSET in values:
            if all(v is UNSET for v in values):
                raise NotSure
            values = tuple([None if v is UNSET else v for v in values])
        return self._values(values)

    def _values(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        for i in self._texts:
            text = values[i]
            if text is not None and "\x00" in text:
                raise NotSure  # the exact path refuses NUL in text
        if not self._convert:
            return values
        out = list(values)
        try:
            for i, convert in self._convert:
                out[i] = convert(checked(out[i]))
        except (ValueError, TypeError, OverflowError, ArithmeticError) as exc:
            raise NotSure from exc
        return tuple(out)


def row_reader(table: MappedTable) -> RowReader:
    """The fast path's reader of `table`'s rows."""
    sources = [(c.source_name, c.mapped) for c in table.columns]
    key = {c.source_name for c in table.columns if c.name in table.table.primary_key}
    return RowReader(table.name, sources, key)


DecodeError = msgspec.DecodeError
Raw = msgspec.Raw
#: A field absent or JSON `null`, kept raw.
NULL = msgspec.Raw(b"null")
