"""Decoding `delta.in` bodies: Prostore's style, every type's edge values, the fastavro oracle."""

from __future__ import annotations

import io
import math
import time as clock
from datetime import date, datetime, time
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.forges.ocf import read_records
from protocol.body import arrow_schema, decode_body
from protocol.body_writer import body_schema, encode_body
from protocol.schema import LogicalSchema, Table
from tests.protocol.tables import ALL_TYPES, decode_body_table, normalise

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
F32_MAX = 3.4028234663852886e38
F32_TINY = 1.401298464324817e-45  # the smallest float32 subnormal

# fmt: off
EDGE_ROWS: list[tuple[Any, ...]] = [
    # id, b, i32, i, bi, f, d,
    # c (char 3), v (varchar 10), vs (varchar), u (uuid), l (link),
    # dt, tm, ts, s (string), lg (long), sys_op
    (I64_MAX, True, I32_MAX, I64_MAX, I64_MIN, math.inf, -math.inf,
     "", "Привет😀", "x" * 10_000, "123e4567-e89b-12d3-a456-426614174000", "https://e.org/a?b",
     date(1, 1, 1), time(0), datetime(1900, 1, 1, 0, 0, 0, 1), "", I64_MIN, 0),
    (I64_MIN, False, I32_MIN, I64_MIN, I64_MAX, math.nan, math.nan,
     "ÿé😀", "", "", "", "",
     date(1969, 12, 31), time(23, 59, 59, 999_999), datetime(1969, 12, 31, 23, 59, 59, 999_999),
     "ключ", I64_MAX, 1),
    (0, None, None, None, None, None, None,
     None, None, None, None, None,
     None, None, None, None, None, 0),
    (1, True, 0, 0, 0, -0.0, 5e-324,
     "abc", "0123456789", "\t\n\"'\\", "u", "l",
     date(9999, 12, 31), time(12, 0, 0, 1), datetime(2024, 2, 29, 12, 34, 56, 789_012),
     "🙂" * 3, 0, 1),
    (2, False, 1, -1, -1, F32_MAX, 1.7976931348623157e308,
     "a b", "v", "x", "u", "l",
     date(1970, 1, 1), time(0, 0, 0, 1), datetime(1, 1, 1), "s", 1, 0),
    (3, True, -1, 1, 1, F32_TINY, -2.2250738585072014e-308,
     "  ", "v", "x", "u", "l",
     date(2000, 2, 29), time(23, 59, 59), datetime(9999, 12, 31, 23, 59, 59, 999_999),
     "s", -1, 0),
]
# fmt: on


def _decoded_rows(table: Table, data: bytes | None) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in decode_body_table(table, data).to_pylist()]


@pytest.mark.parametrize("codec", ["null", "deflate"])
@pytest.mark.parametrize("all_nullable", [True, False])
def test_every_type_with_edge_values_survives(codec: Any, all_nullable: bool) -> None:
    data = encode_body(ALL_TYPES, EDGE_ROWS, codec=codec, all_nullable=all_nullable)
    table = decode_body_table(ALL_TYPES, data)
    assert table.schema == arrow_schema(ALL_TYPES)
    assert normalise(_decoded_rows(ALL_TYPES, data)) == normalise(EDGE_ROWS)
    # signed zero and the exact float32 value survive, not just compare equal
    assert math.copysign(1.0, table.column("f")[3].as_py()) == -1.0
    assert table.column("f")[5].as_py() == F32_TINY


def test_naive_timestamps_are_written_as_utc_whatever_the_machines_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fastavro writes a naive datetime as local time; the writer reads it as UTC."""
    monkeypatch.setenv("TZ", "America/New_York")
    clock.tzset()
    try:
        data = encode_body(ALL_TYPES, EDGE_ROWS, codec="null")
    finally:
        monkeypatch.delenv("TZ")
        clock.tzset()
    assert normalise(_decoded_rows(ALL_TYPES, data)) == normalise(EDGE_ROWS)


def test_arrow_types_follow_replica_md() -> None:
    types = {f.name: str(f.type) for f in arrow_schema(ALL_TYPES)}
    assert types == {
        "id": "int64",
        "b": "bool",
        "i32": "int32",
        "i": "int64",
        "bi": "int64",
        "f": "float",
        "d": "double",
        "c": "string",
        "v": "string",
        "vs": "string",
        "u": "string",
        "l": "string",
        "dt": "date32[day]",
        "tm": "time64[us]",
        "ts": "timestamp[us]",
        "s": "string",
        "lg": "int64",
        "sys_op": "int32",
    }
    assert not arrow_schema(ALL_TYPES).field("id").nullable


def test_a_body_in_prostores_own_upload_style(marketing: LogicalSchema) -> None:
    sales = marketing.table("sales")
    java_string = {"type": "string", "avro.java.string": "String"}
    schema = {
        "type": "record",
        "name": "sales",
        "namespace": "ru.datamart.prostore",
        "fields": [
            {"name": "id", "type": ["null", "long"], "default": None},
            {
                "name": "transaction_date",
                "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
                "default": None,
            },
            {"name": "product_code", "type": ["null", java_string], "default": None},
            {"name": "product_units", "type": ["null", "long"], "default": None},
            {"name": "store_id", "type": ["null", "long"], "default": None},
            {"name": "description", "type": ["null", java_string], "default": None},
            {"name": "sys_op", "type": "int", "default": 0},
        ],
    }
    rows = [
        {
            "id": 1,
            "transaction_date": 1_700_000_000_000_001,
            "product_code": "ABC",
            "product_units": 5,
            "store_id": 10,
            "description": None,
            "sys_op": 0,
        },
        {
            "id": 2,
            "transaction_date": -1,
            "product_code": "Ж",
            "product_units": 0,
            "store_id": 11,
            "description": "Описание",
            "sys_op": 1,
        },
    ]
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), rows, codec="deflate")
    assert _decoded_rows(sales, buf.getvalue()) == [
        (1, datetime(2023, 11, 14, 22, 13, 20, 1), "ABC", 5, 10, None, 0),
        (2, datetime(1969, 12, 31, 23, 59, 59, 999_999), "Ж", 0, 11, "Описание", 1),
    ]


def test_fields_are_resolved_by_position_never_by_name(marketing: LogicalSchema) -> None:
    sales = marketing.table("sales")
    schema = body_schema(sales)
    for position, field in enumerate(schema["fields"]):
        field["name"] = f"renamed_{len(schema['fields']) - position}"
    row = (7, datetime(2024, 1, 1), "P", 1, 2, "d", 0)
    data = io.BytesIO()
    names = [f["name"] for f in schema["fields"]]
    fastavro.writer(data, fastavro.parse_schema(schema), [dict(zip(names, row, strict=True))])
    assert _decoded_rows(sales, data.getvalue()) == [row]


def test_null_second_unions_are_accepted() -> None:
    schema = body_schema(ALL_TYPES)
    for field in schema["fields"][:-1]:
        field["type"] = [field["type"][1], "null"]
        field.pop("default")
    data = io.BytesIO()
    names = [f["name"] for f in schema["fields"]]
    fastavro.writer(data, schema, [dict(zip(names, r, strict=True)) for r in EDGE_ROWS])
    assert normalise(_decoded_rows(ALL_TYPES, data.getvalue())) == normalise(EDGE_ROWS)


def test_empty_bodies_have_no_rows(marketing: LogicalSchema) -> None:
    sales = marketing.table("sales")
    assert list(decode_body(sales, b"")) == []
    assert list(decode_body(sales, None)) == []
    assert decode_body_table(sales, encode_body(sales, [])).num_rows == 0


def test_large_chunks_come_in_several_batches_in_order() -> None:
    rows = [(i, *EDGE_ROWS[3][1:]) for i in range(1000)]
    data = encode_body(ALL_TYPES, rows)
    batches = list(decode_body(ALL_TYPES, data, batch_rows=300))
    assert len(batches) >= 3
    ids = [i for b in batches for i in b.column(0).to_pylist()]
    assert ids == list(range(1000))


# ---- the fastavro oracle --------------------------------------------------------------


def _value(column_kind: str) -> st.SearchStrategy[Any]:
    strategies: dict[str, st.SearchStrategy[Any]] = {
        "BOOLEAN": st.booleans(),
        "INT32": st.integers(I32_MIN, I32_MAX),
        "INT": st.integers(I64_MIN, I64_MAX),
        "BIGINT": st.integers(I64_MIN, I64_MAX),
        "FLOAT": st.floats(width=32),
        "DOUBLE": st.floats(),
        "CHAR": st.text(st.characters(exclude_characters="\x00", codec="utf-8"), max_size=3),
        "VARCHAR": st.text(st.characters(exclude_characters="\x00", codec="utf-8"), max_size=10),
        "UUID": st.uuids().map(str),
        "LINK": st.text(st.characters(exclude_characters="\x00", codec="utf-8")),
        "DATE": st.dates(),
        "TIME": st.times(),
        "TIMESTAMP": st.datetimes(),
    }
    return strategies[column_kind]


@st.composite
def all_types_rows(draw: st.DrawFn) -> tuple[Any, ...]:
    values: list[Any] = []
    for column in ALL_TYPES.columns:
        value = _value(column.type.kind.value)
        values.append(draw(value if column.not_null else st.none() | value))
    return (*values, draw(st.sampled_from([0, 1])))


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.lists(all_types_rows(), max_size=40),
    st.sampled_from(["null", "deflate"]),
    st.integers(0, 2000),
)
def test_decoding_agrees_with_fastavro(rows: list[tuple[Any, ...]], codec: str, sync: int) -> None:
    schema = body_schema(ALL_TYPES)
    names = [f["name"] for f in schema["fields"]]
    buf = io.BytesIO()
    records = [dict(zip(names, r, strict=True)) for r in rows]
    fastavro.writer(buf, schema, records, codec=codec, sync_interval=sync)
    data = buf.getvalue()
    oracle = [
        tuple(v.replace(tzinfo=None) if isinstance(v, datetime) else v for v in r.values())
        for r in read_records(data)
    ]
    assert normalise(_decoded_rows(ALL_TYPES, data)) == normalise(oracle)
