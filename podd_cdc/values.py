"""Source column types → Prostore types, and source values → the replica's values.

The mappings are docs/contracts/CDC.md's "Types" tables. A converter takes one decoded value (JSON,
or Avro as fastavro reads it) and returns the value the replica stores, or raises `ValueError`
saying why it does not fit; the decoder turns that into `BadInput` with the position.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from functools import partial
from typing import Any

from protocol.types import ColumnType, TypeKind

Converter = Callable[[Any], Any]

INT32_RANGE = (-(2**31), 2**31 - 1)
BIGINT_RANGE = (-(2**63), 2**63 - 1)
#: A value longer than this (UTF-8 bytes) is bad input even in an unbounded VARCHAR.
MAX_VALUE_BYTES = 1 << 20

#: Qlik data types (docs/contracts/CDC.md); NUMERIC is decided by precision and scale.
QLIK_TYPES: dict[str, TypeKind] = {
    "INT1": TypeKind.INT32,
    "INT2": TypeKind.INT32,
    "INT4": TypeKind.INT32,
    "UINT1": TypeKind.INT32,
    "UINT2": TypeKind.INT32,
    "INT8": TypeKind.BIGINT,
    "UINT4": TypeKind.BIGINT,
    "UINT8": TypeKind.BIGINT,
    "REAL4": TypeKind.FLOAT,
    "REAL8": TypeKind.DOUBLE,
    "STRING": TypeKind.VARCHAR,
    "WSTRING": TypeKind.VARCHAR,
    "CLOB": TypeKind.VARCHAR,
    "NCLOB": TypeKind.VARCHAR,
    "BOOLEAN": TypeKind.BOOLEAN,
    "DATE": TypeKind.DATE,
    "TIME": TypeKind.TIME,
    "DATETIME": TypeKind.TIMESTAMP,
    "BYTES": TypeKind.VARCHAR,
    "BLOB": TypeKind.VARCHAR,
}
#: Qlik types whose JSON value is a number (the rest travel as strings).
QLIK_NUMBERS = frozenset(
    {"INT1", "INT2", "INT4", "INT8", "UINT1", "UINT2", "UINT4", "UINT8", "REAL4", "REAL8"}
)
#: The widest NUMERIC(p, 0) that fits BIGINT.
NUMERIC_BIGINT_PRECISION = 18

#: DataWorks column types (docs/contracts/CDC.md).
DATAWORKS_TYPES: dict[str, TypeKind] = {
    "BOOLEAN": TypeKind.BOOLEAN,
    "LONG": TypeKind.BIGINT,
    "DOUBLE": TypeKind.DOUBLE,
    "STRING": TypeKind.VARCHAR,
    "DATE": TypeKind.TIMESTAMP,
    "BYTES": TypeKind.VARCHAR,
}

_DECIMAL = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)\Z")
_INTEGER = re.compile(r"[+-]?\d{1,20}\Z")
_EPOCH = datetime(1970, 1, 1)
_EPOCH_DATE = date(1970, 1, 1)
_MICRO = timedelta(microseconds=1)


@dataclass(frozen=True)
class SourceColumn:
    """One column as the source declares it, mapped."""

    name: str
    type: ColumnType
    convert: Converter
    bounds: tuple[int, int] | None = None  # an integer column's range

    def fast(self) -> Converter:
        """`convert` with a fast path for the values most messages carry (an int in range, a
        short str, a float) and None kept as None; anything else takes the strict path."""
        strict = self.convert
        kind = self.type.kind
        if self.bounds is not None:
            low, high = self.bounds

            def integer(value: Any) -> Any:
                if type(value) is int and low <= value <= high:
                    return value
                return None if value is None else strict(value)

            return integer
        if kind in (TypeKind.FLOAT, TypeKind.DOUBLE):
            return lambda v: v if type(v) is float else (None if v is None else strict(v))
        if strict is _epoch_millis:  # DataWorks DATE: a time in ms
            low, high = BIGINT_RANGE

            def millis(value: Any) -> Any:
                if type(value) is int and low <= value <= high:
                    return millis_time(value)
                return None if value is None else strict(value)

            return millis
        if strict is _base64_text:  # DataWorks BYTES: base64 text, kept as it is
            short = MAX_VALUE_BYTES // 4

            def base64_text(value: Any) -> Any:
                if type(value) is str and len(value) <= short and _is_base64(value):
                    return value
                return None if value is None else strict(value)

            return base64_text
        if hasattr(strict, "text_limit"):  # a plain text column (not hex, not base64)
            limit = min(strict.text_limit or MAX_VALUE_BYTES, MAX_VALUE_BYTES // 4)

            def text(value: Any) -> Any:
                if type(value) is str and len(value) <= limit and "\x00" not in value:
                    return value
                return None if value is None else strict(value)

            return text
        return lambda v: None if v is None else strict(v)


def _integer(value: Any, bounds: tuple[int, int]) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not an integer")
    if isinstance(value, str) and _INTEGER.match(value.strip()):
        value = int(value.strip())
    if not isinstance(value, int):
        raise ValueError(f"{str(value)[:40]!r} is not an integer")
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{value} is outside {bounds[0]}..{bounds[1]}")
    return value


def _real(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{str(value)[:40]!r} is not a number")
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{str(value)[:40]!r} is not a number") from None


def _text(limit: int | None) -> Converter:
    def convert(value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"{str(value)[:40]!r} is not text")
        if len(value) > MAX_VALUE_BYTES or len(value.encode()) > MAX_VALUE_BYTES:
            raise ValueError(
                f"a value of {len(value.encode()):,} bytes (at most {MAX_VALUE_BYTES:,})"
            )
        if limit is not None and len(value) > limit:
            raise ValueError(f"{len(value)} characters do not fit VARCHAR({limit})")
        if "\x00" in value:
            raise ValueError("text holds a NUL character")
        return value

    convert.text_limit = limit  # type: ignore[attr-defined]  # read by SourceColumn.fast
    return convert


_text_any = _text(None)


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise ValueError(f"{str(value)[:40]!r} is not a boolean")


def _date(value: Any) -> date:
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    if isinstance(value, int) and not isinstance(value, bool):  # Avro date: days
        return date(1970, 1, 1) + timedelta(days=value)
    if not isinstance(value, str):
        raise ValueError(f"{str(value)[:40]!r} is not a date")
    return date.fromisoformat(value.strip()[:10])


def _time(value: Any) -> time:
    if isinstance(value, time):
        return value
    if isinstance(value, timedelta):  # some readers give a time of day as a duration
        return (datetime.min + value).time()
    if not isinstance(value, str):
        raise ValueError(f"{str(value)[:40]!r} is not a time of day")
    return time.fromisoformat(value.strip())


def _timestamp(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    if not isinstance(value, str):
        raise ValueError(f"{str(value)[:40]!r} is not a timestamp")
    parsed = datetime.fromisoformat(value.strip().replace(" ", "T", 1))
    return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed


#: The times in ms since 1970 a datetime holds (`millis_time`): years 1 to 9999.
MIN_MILLIS, MAX_MILLIS = -62_135_596_800_000, 253_402_300_799_999


def millis_time(millis: int) -> datetime:
    """A time in ms since 1970 as a naive UTC time (OverflowError past year 9999)."""
    return _EPOCH + timedelta(milliseconds=millis)


def micros(when: datetime) -> int:
    """A naive UTC time as µs since 1970 (as the columnar origin holds a timestamp)."""
    return (when - _EPOCH) // _MICRO


def micros_time(us: int) -> datetime:
    """µs since 1970 as a naive UTC time: `micros`' inverse."""
    return _EPOCH + timedelta(microseconds=us)


def days(when: date) -> int:
    """A date as days since 1970-01-01 (as the columnar origin holds a date)."""
    return (when - _EPOCH_DATE).days


def days_date(count: int) -> date:
    """Days since 1970-01-01 as a date: `days`' inverse."""
    return _EPOCH_DATE + timedelta(days=count)


def _epoch_millis(value: Any) -> datetime:
    return millis_time(_integer(value, BIGINT_RANGE))


def _decimal_text(value: Any) -> str:
    if isinstance(value, Decimal):
        value = format(value, "f")
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not _DECIMAL.match(value.strip()):
        raise ValueError(f"{str(value)[:40]!r} is not a decimal number")
    return value.strip()


def _numeric_integer(value: Any) -> int:
    if isinstance(value, Decimal):
        if value != value.to_integral_value():
            raise ValueError(f"{value} is not a whole number")
        value = int(value)
    return _integer(value, BIGINT_RANGE)


def _hex_text(value: Any) -> str:
    if isinstance(value, bytes):
        return str(_text(None)(value.hex().upper()))
    text = str(_text(None)(value))
    try:
        binascii.unhexlify(text)
    except (binascii.Error, ValueError):
        raise ValueError("BYTES value is not hexadecimal text") from None
    return text


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _base64_text(value: Any) -> str:
    text = str(_text(None)(value))
    if not _is_base64(text):
        raise ValueError("BYTES value is not base64 text")
    return text


def qlik_column(
    name: str, type_name: str, length: int | None, precision: int | None, scale: int | None
) -> SourceColumn:
    """A Qlik column (metadata `tableColumns`) mapped to the replica's type and converter."""
    name_upper = type_name.upper()
    if name_upper == "NUMERIC":
        if (scale or 0) == 0 and precision is not None and precision <= NUMERIC_BIGINT_PRECISION:
            return SourceColumn(name, ColumnType(TypeKind.BIGINT), _numeric_integer, BIGINT_RANGE)
        return SourceColumn(name, ColumnType(TypeKind.VARCHAR), _decimal_text)
    kind = QLIK_TYPES.get(name_upper)
    if kind is None:
        raise ValueError(f"column {name}: Qlik type {type_name!r} has no mapping")
    length = length if length and length > 0 else None
    ranges: dict[str, tuple[int, int]] = {
        "UINT8": (0, BIGINT_RANGE[1]),
        "UINT4": (0, 2**32 - 1),
        "UINT1": (0, 255),
        "UINT2": (0, 65_535),
        "INT1": (-128, 127),
        "INT2": (-32_768, 32_767),
        "INT4": INT32_RANGE,
        "INT8": BIGINT_RANGE,
    }
    if name_upper in ranges:
        bounds = ranges[name_upper]
        return SourceColumn(name, ColumnType(kind), partial(_integer, bounds=bounds), bounds)
    converters: dict[str, Converter] = {"BYTES": _hex_text, "BLOB": _hex_text}
    by_kind: dict[TypeKind, Converter] = {
        TypeKind.FLOAT: _real,
        TypeKind.DOUBLE: _real,
        TypeKind.BOOLEAN: _boolean,
        TypeKind.DATE: _date,
        TypeKind.TIME: _time,
        TypeKind.TIMESTAMP: _timestamp,
    }
    if name_upper in ("STRING", "WSTRING"):
        return SourceColumn(name, ColumnType(kind, length), _text(length))
    convert = converters.get(name_upper) or by_kind.get(kind) or _text_any
    return SourceColumn(name, ColumnType(kind), convert)


def dataworks_column(name: str, type_name: str) -> SourceColumn:
    """A DataWorks column (`schema.dataColumn`) mapped to the replica's type and converter."""
    kind = DATAWORKS_TYPES.get(type_name.upper())
    if kind is None:
        raise ValueError(f"column {name}: DataWorks type {type_name!r} has no mapping")
    if type_name.upper() == "LONG":
        return SourceColumn(
            name, ColumnType(kind), partial(_integer, bounds=BIGINT_RANGE), BIGINT_RANGE
        )
    converters: dict[str, Converter] = {
        "BOOLEAN": _boolean,
        "DOUBLE": _real,
        "STRING": _text_any,
        "DATE": _epoch_millis,
        "BYTES": _base64_text,
    }
    return SourceColumn(name, ColumnType(kind), converters[type_name.upper()])


def convert_value(column: SourceColumn, value: Any) -> Any:
    """`value` for the replica; None stays None. Raises ValueError naming the column."""
    if value is None:
        return None
    try:
        return column.convert(value)
    except (ValueError, OverflowError, InvalidOperation) as exc:
        raise ValueError(f"column {column.name}: {exc}") from None


def batch_form(column: SourceColumn) -> str:
    """How the batch reader (`podd_cdc.qlik_columns`) takes this column's values: `integer`
    (in `bounds`), `real`, `text` (at most `text_limit` characters), `boolean`, `date`,
    `time`, `timestamp`, `hex` (BYTES as hexadecimal text), `decimal` (NUMERIC kept as
    text), `millis` (DataWorks' DATE: an integer of ms since 1970), `base64` (DataWorks'
    BYTES, kept as its text), or `exact`: every value but NULL goes to the exact path."""
    convert = column.convert
    if column.bounds is not None:
        return "integer"
    if hasattr(convert, "text_limit"):
        return "text"
    forms: dict[Converter, str] = {
        _real: "real",
        _boolean: "boolean",
        _date: "date",
        _time: "time",
        _timestamp: "timestamp",
        _hex_text: "hex",
        _decimal_text: "decimal",
        _epoch_millis: "millis",
        _base64_text: "base64",
    }
    return forms.get(convert, "exact")
