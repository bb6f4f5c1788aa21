"""All 13 types, with nulls and edge values, survive into PostgreSQL exactly."""

from __future__ import annotations

import math
from pathlib import Path

import psycopg

from protocol.apply_model import DeltaRow
from protocol.ddl import parse_schema
from replica_store.store_sql import physical, q
from tests.loader.conftest import NewLoader, unique
from tests.loader.staging_helpers import stage
from tests.protocol.tables import ALL_TYPES_DDL, normalise
from tests.protocol.test_body import EDGE_ROWS


def test_every_type_and_edge_value_lands_exactly(
    new_loader: NewLoader, staging_root: Path, replica_dsn: str
) -> None:
    schema = unique(parse_schema(ALL_TYPES_DDL))
    table = schema.table("all_types")
    loader = new_loader(schema)
    rows = [DeltaRow(tuple(r[:-1]), 0) for r in EDGE_ROWS]
    loader.load(stage(staging_root, schema, 0, {"all_types": rows}, chunk_rows=2))
    select = ", ".join(
        f"{q(c.name)}::float8" if c.name == "f" else q(c.name) for c in table.columns
    )
    with psycopg.connect(replica_dsn) as conn:
        got = conn.execute(
            f"SELECT {select} FROM {physical(schema.datamart, 'all_types', 'actual')} ORDER BY id"
        ).fetchall()
        # bit-exact floats: signed zero and the smallest subnormals, compared as text
        zero, tiny = conn.execute(
            f"SELECT f::text, d::text FROM {physical(schema.datamart, 'all_types', 'actual')} "
            "WHERE id = 1"
        ).fetchone() or (None, None)
    expected = sorted((r.values for r in rows), key=lambda v: v[0])
    assert normalise(got) == normalise(expected)
    assert (zero, tiny) == ("-0", "5e-324")
    nan_row = next(r for r in got if r[0] == -(2**63))
    assert sum(1 for v in nan_row if isinstance(v, float) and math.isnan(v)) == 2
