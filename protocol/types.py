"""Prostore column types and how each one travels (Avro) and lands (Arrow, PostgreSQL).

The table in REPLICA.md "Types" is the source of every mapping here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pyarrow as pa


class TypeKind(StrEnum):
    BOOLEAN = "BOOLEAN"
    INT32 = "INT32"
    INT = "INT"
    BIGINT = "BIGINT"
    FLOAT = "FLOAT"
    DOUBLE = "DOUBLE"
    CHAR = "CHAR"
    VARCHAR = "VARCHAR"
    UUID = "UUID"
    LINK = "LINK"
    DATE = "DATE"
    TIME = "TIME"
    TIMESTAMP = "TIMESTAMP"


#: Type names Prostore accepts as other spellings (REPLICA.md).
TYPE_ALIASES: dict[str, TypeKind] = {
    "INTEGER": TypeKind.INT,
    "STRING": TypeKind.VARCHAR,
    "LONG": TypeKind.BIGINT,
}

#: Kinds that take a fractional-second precision in parentheses, 0 to `MAX_PRECISION`
#: (REPLICA.md): accepted and stored with six digits whatever it says.
PRECISION_KINDS = frozenset({TypeKind.TIME, TypeKind.TIMESTAMP})
MAX_PRECISION = 6

#: Kinds that take a length in parentheses; CHAR requires it, VARCHAR may omit it.
LENGTH_KINDS = frozenset({TypeKind.CHAR, TypeKind.VARCHAR})

UUID_LENGTH = 36

# Value ranges PostgreSQL (and Greenplum) can store, in the Avro encodings' units.
# Julian day 0 (4714-11-24 BC) is the lower bound of both `date` and `timestamp`.
PG_MIN_DATE_DAYS = -2_440_588
PG_MAX_DATE_DAYS = 2_147_483_494 - 2_440_588
PG_MIN_TIMESTAMP_MICROS = PG_MIN_DATE_DAYS * 86_400_000_000
TIME_MAX_MICROS = 86_400_000_000  # PostgreSQL accepts 24:00:00


@dataclass(frozen=True, slots=True)
class AvroShape:
    """What a column must look like in a `delta.in` body: primitive plus logical type."""

    primitive: str
    logical: str | None = None

    def describe(self) -> str:
        return self.primitive if self.logical is None else f"{self.primitive}/{self.logical}"

    def to_avro(self) -> Any:
        if self.logical is None:
            return self.primitive
        return {"type": self.primitive, "logicalType": self.logical}


@dataclass(frozen=True, slots=True)
class ColumnType:
    """One Prostore type, with its length where it has one (CHAR(n), VARCHAR(n), UUID)."""

    kind: TypeKind
    length: int | None = None

    @property
    def max_chars(self) -> int | None:
        """Longest string PostgreSQL will take, or None for unbounded/non-strings."""
        if self.kind is TypeKind.UUID:
            return UUID_LENGTH
        return self.length

    @property
    def avro(self) -> AvroShape:
        return _AVRO[self.kind]

    @property
    def arrow(self) -> pa.DataType:
        return _ARROW[self.kind]

    @property
    def is_string(self) -> bool:
        return self.avro.primitive == "string"

    def to_postgres(self) -> str:
        """PostgreSQL column type, as REPLICA.md maps it."""
        if self.kind in LENGTH_KINDS:
            base = "varchar"
            return base if self.length is None else f"{base}({self.length})"
        if self.kind is TypeKind.UUID:
            return f"varchar({UUID_LENGTH})"
        return _POSTGRES[self.kind]

    def to_prostore(self) -> str:
        """Prostore DDL spelling (the canonical name, never an alias)."""
        if self.kind in LENGTH_KINDS and self.length is not None:
            return f"{self.kind.value}({self.length})"
        return self.kind.value


_AVRO: dict[TypeKind, AvroShape] = {
    TypeKind.BOOLEAN: AvroShape("boolean"),
    TypeKind.INT32: AvroShape("int"),
    TypeKind.INT: AvroShape("long"),
    TypeKind.BIGINT: AvroShape("long"),
    TypeKind.FLOAT: AvroShape("float"),
    TypeKind.DOUBLE: AvroShape("double"),
    TypeKind.CHAR: AvroShape("string"),
    TypeKind.VARCHAR: AvroShape("string"),
    TypeKind.UUID: AvroShape("string"),
    TypeKind.LINK: AvroShape("string"),
    TypeKind.DATE: AvroShape("int", "date"),
    TypeKind.TIME: AvroShape("long", "time-micros"),
    TypeKind.TIMESTAMP: AvroShape("long", "timestamp-micros"),
}

_ARROW: dict[TypeKind, pa.DataType] = {
    TypeKind.BOOLEAN: pa.bool_(),
    TypeKind.INT32: pa.int32(),
    TypeKind.INT: pa.int64(),
    TypeKind.BIGINT: pa.int64(),
    TypeKind.FLOAT: pa.float32(),
    TypeKind.DOUBLE: pa.float64(),
    TypeKind.CHAR: pa.string(),
    TypeKind.VARCHAR: pa.string(),
    TypeKind.UUID: pa.string(),
    TypeKind.LINK: pa.string(),
    TypeKind.DATE: pa.date32(),
    TypeKind.TIME: pa.time64("us"),
    TypeKind.TIMESTAMP: pa.timestamp("us"),
}

_POSTGRES: dict[TypeKind, str] = {
    TypeKind.BOOLEAN: "boolean",
    TypeKind.INT32: "integer",
    TypeKind.INT: "bigint",
    TypeKind.BIGINT: "bigint",
    TypeKind.FLOAT: "real",
    TypeKind.DOUBLE: "double precision",
    TypeKind.LINK: "varchar",
    TypeKind.DATE: "date",
    TypeKind.TIME: "time(6)",
    TypeKind.TIMESTAMP: "timestamp(6)",
}

#: `sys_op` travels as Avro int and lands as PostgreSQL integer.
SYS_OP_ARROW = pa.int32()
