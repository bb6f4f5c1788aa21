"""How each writer puts a source value on the wire, and what the replica must hold for it
(docs/contracts/CDC.md "Types", written out here a second time on purpose: see the package's
doc)."""

from __future__ import annotations

import base64
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from tools.cdc_write.source import SourceColumn

_QLIK_JSON_NUMBERS = {"INT1", "INT2", "INT4", "INT8", "UINT1", "UINT2", "UINT4", "REAL4", "REAL8"}
_EPOCH = datetime(1970, 1, 1)


def qlik_json(column: SourceColumn, value: Any) -> Any:
    """A Qlik JSON value: numbers for INT*, REAL* and UINT1/2/4, strings for the rest."""
    if value is None:
        return None
    kind = column.type.upper()
    if kind in _QLIK_JSON_NUMBERS:
        return value
    return qlik_text(column, value)


def qlik_text(column: SourceColumn, value: Any) -> str:
    kind = column.type.upper()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.hex().upper()
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, time):
        return value.strftime("%H:%M:%S.%f")
    if isinstance(value, Decimal):
        return format(value, "f")
    del kind
    return str(value)


def qlik_avro_type(column: SourceColumn) -> str:
    """The Avro type of a Qlik column when the task enables no logical types."""
    kind = column.type.upper()
    if kind in ("INT1", "INT2", "INT4", "UINT1", "UINT2"):
        return "int"
    if kind in ("INT8", "UINT4"):
        return "long"
    return {
        "REAL4": "float",
        "REAL8": "double",
        "BOOLEAN": "boolean",
        "BYTES": "bytes",
        "BLOB": "bytes",
    }.get(kind, "string")


def qlik_avro(column: SourceColumn, value: Any) -> Any:
    if value is None:
        return None
    avro = qlik_avro_type(column)
    if avro in ("int", "long", "float", "double", "boolean", "bytes"):
        return value
    return qlik_text(column, value)


def qlik_replica(column: SourceColumn, value: Any) -> Any:
    """What the replica holds for a Qlik value."""
    if value is None:
        return None
    kind = column.type.upper()
    if kind == "NUMERIC":
        return value if isinstance(value, int) else format(value, "f")
    if kind in ("BYTES", "BLOB"):
        return value.hex().upper()
    return value


def dataworks_json(column: SourceColumn, value: Any) -> Any:
    if value is None:
        return None
    kind = column.type.upper()
    if kind == "DATE":
        return (value - _EPOCH) // timedelta(milliseconds=1)
    if kind == "BYTES":
        return base64.b64encode(value).decode()
    return value


def dataworks_replica(column: SourceColumn, value: Any) -> Any:
    if value is not None and column.type.upper() == "BYTES":
        return base64.b64encode(value).decode()
    return value
