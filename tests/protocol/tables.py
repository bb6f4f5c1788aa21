"""Logical tables the protocol tests decode into."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from protocol.body import arrow_schema, decode_body
from protocol.ddl import parse_schema
from protocol.schema import Table

ALL_TYPES_DDL = """
-- every Prostore type, and both aliases
CREATE TABLE edge.all_types (
  id bigint not null,
  b boolean,
  i32 int32,
  i int,
  bi bigint,
  f float,
  d double,
  c char(3),
  v varchar(10),
  vs varchar,
  u uuid,
  l link,
  dt date,
  tm time,
  ts timestamp,
  s string,
  lg long,
  PRIMARY KEY (id)
) DISTRIBUTED BY (id);
"""

ALL_TYPES: Table = parse_schema(ALL_TYPES_DDL).table("all_types")


def normalise(rows: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Rows with NaN made comparable (NaN != NaN otherwise)."""
    return [
        tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row) for row in rows
    ]


def decode_body_table(table: Table, data: bytes | None) -> pa.Table:
    """All of a body's rows as one Arrow table."""
    return pa.Table.from_batches(list(decode_body(table, data)), schema=arrow_schema(table))
