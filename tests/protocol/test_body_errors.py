"""Bad bodies: each gets its PROTOCOL.md code, and nothing ever crashes."""

from __future__ import annotations

import copy
import io
from datetime import datetime
from typing import Any

import fastavro
import pytest
from fastavro.read import HEADER_SCHEMA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.forges.ocf import container, header, string, zigzag
from protocol.body import read_body_layout
from protocol.body_writer import body_schema, encode_body
from protocol.errors import BadChunkError, ErrorCode, ProtocolError, SchemaMismatchError
from protocol.schema import LogicalSchema, Table
from protocol.types import TIME_MAX_MICROS
from tests.protocol.tables import decode_body_table

ROW = (1, datetime(2024, 1, 1), "P-1", 3, 4, "text", 0)


@pytest.fixture
def sales(marketing: LogicalSchema) -> Table:
    return marketing.table("sales")


def _with_schema(schema: dict[str, Any], rows: list[dict[str, Any]]) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), rows)
    return buf.getvalue()


def _record(table: Table, row: tuple[Any, ...]) -> dict[str, Any]:
    names = [f["name"] for f in body_schema(table)["fields"]]
    return dict(zip(names, row, strict=True))


# ---- undecodable: BAD_CHUNK ---------------------------------------------------------


def test_truncated_body(sales: Table) -> None:
    data = encode_body(sales, [ROW] * 50)
    for cut in (len(data) - 1, len(data) - 17, len(data) // 2, 10):
        with pytest.raises(BadChunkError):
            decode_body_table(sales, data[:cut])


def test_bad_magic(sales: Table) -> None:
    data = encode_body(sales, [ROW])
    with pytest.raises(BadChunkError, match="bad magic"):
        decode_body_table(sales, b"Obj\x02" + data[4:])


def test_unknown_codec(sales: Table) -> None:
    data = container(body_schema(sales), [(0, b"")], codec="brotli-9000")
    with pytest.raises(BadChunkError, match="brotli"):
        decode_body_table(sales, data)


def test_garbage_and_bad_sync(sales: Table) -> None:
    data = bytearray(encode_body(sales, [ROW] * 3))
    data[-1] ^= 0xFF
    with pytest.raises(BadChunkError, match="sync"):
        decode_body_table(sales, bytes(data))
    with pytest.raises(BadChunkError):
        decode_body_table(sales, b"not avro")


def _sales_record(*, product_code: bytes = b"P", units: bytes = zigzag(1)) -> bytes:
    # ["null", T] everywhere: branch 1 then the value; sys_op plain int 0
    return (
        zigzag(1)
        + zigzag(1)
        + zigzag(1)
        + zigzag(0)
        + zigzag(1)
        + string(product_code)
        + zigzag(1)
        + units
        + zigzag(1)
        + zigzag(1)
        + zigzag(0)
        + zigzag(0)
    )


def test_forged_records_are_checked_byte_by_byte(sales: Table) -> None:
    schema = body_schema(sales)
    good = container(schema, [(1, _sales_record())])
    assert decode_body_table(sales, good).num_rows == 1
    cases = {
        "bad union branch": (1, b"\x04" + _sales_record()[1:]),
        "string past the end": (1, _sales_record()[:5] + zigzag(500) + b"x"),
        "negative string length": (1, _sales_record()[:5] + zigzag(-3)),
        "varint too long": (1, _sales_record(units=b"\xff" * 11 + b"\x01")),
        "bytes left over": (1, _sales_record() + b"\x00"),
        "more records claimed than bytes": (10**12, _sales_record()),
        "negative record count": (-1, _sales_record()),
        "invalid UTF-8": (1, _sales_record(product_code=b"\xff\xfe")),
    }
    for name, (count, payload) in cases.items():
        for codec in ("null", "deflate"):
            with pytest.raises(BadChunkError):
                decode_body_table(sales, container(schema, [(count, payload)], codec))
            assert name


def test_boolean_bytes_other_than_0_and_1_are_undecodable() -> None:
    table = LogicalSchema.model_validate(
        {
            "datamart": "d",
            "tables": [
                {
                    "name": "t",
                    "columns": [
                        {"name": "id", "type": {"kind": "INT", "length": None}, "not_null": True},
                        {"name": "flag", "type": {"kind": "BOOLEAN", "length": None}},
                    ],
                    "primary_key": ["id"],
                }
            ],
        }
    ).table("t")
    schema = body_schema(table, all_nullable=False)
    record = zigzag(1) + zigzag(1) + b"\x02" + zigzag(0)
    with pytest.raises(BadChunkError, match="boolean"):
        decode_body_table(table, container(schema, [(1, record)]))


def test_int_out_of_32_bits_is_undecodable(marketing: LogicalSchema) -> None:
    # sys_op is Avro int: a varint above 2**31 cannot have been written by Avro
    sales = marketing.table("sales")
    record = _sales_record()[:-1] + zigzag(2**40)
    with pytest.raises(BadChunkError, match="32 bits"):
        decode_body_table(sales, container(body_schema(sales), [(1, record)]))


# ---- does not fit the table: SCHEMA_MISMATCH ----------------------------------------


def _mutated(sales: Table, change: Any) -> dict[str, Any]:
    schema = copy.deepcopy(body_schema(sales))
    change(schema["fields"])
    return schema


@pytest.mark.parametrize(
    ("name", "change", "fragment"),
    [
        ("a field too few", lambda f: f.pop(2), "6 fields, expected 7"),
        ("a field too many", lambda f: f.insert(1, {"name": "x", "type": "long"}), "8 fields"),
        ("sys_op missing", lambda f: f.pop(), "6 fields"),
        ("fields swapped", lambda f: f.insert(0, f.pop(1)), "field 1"),
        ("wrong type", lambda f: f.__setitem__(3, {"name": "u", "type": "int"}), "field 4"),
        (
            "wrong logical type",
            lambda f: f.__setitem__(
                1, {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}}
            ),
            "field 2",
        ),
        (
            "sys_op as long",
            lambda f: f.__setitem__(6, {"name": "sys_op", "type": "long"}),
            "sys_op",
        ),
        ("sys_op first", lambda f: f.insert(0, f.pop()), "field 1"),
        (
            "three-branch union",
            lambda f: f.__setitem__(0, {"name": "id", "type": ["null", "long", "string"]}),
            "field 1",
        ),
    ],
)
def test_writer_schema_that_does_not_fit(
    sales: Table, name: str, change: Any, fragment: str
) -> None:
    schema = _mutated(sales, change)
    data = container(schema, [(0, b"")])
    with pytest.raises(SchemaMismatchError, match=fragment) as caught:
        read_body_layout(sales, data)
    assert caught.value.code is ErrorCode.SCHEMA_MISMATCH
    with pytest.raises(SchemaMismatchError):
        decode_body_table(sales, data)


def test_the_early_check_reads_only_the_header(sales: Table) -> None:
    data = encode_body(sales, [ROW] * 100)
    stream = io.BytesIO(data)
    fastavro.schemaless_reader(stream, HEADER_SCHEMA)
    header_end = stream.tell()
    assert read_body_layout(sales, data[: header_end + 3]) is not None  # blocks cut
    wrong = header(_mutated(sales, lambda f: f.pop()))
    with pytest.raises(SchemaMismatchError):
        read_body_layout(sales, wrong)  # nothing but a header


@pytest.mark.parametrize(
    ("row", "fragment"),
    [
        ((1, datetime(2024, 1, 1), "P", 3, 4, None, 2), "row 2: sys_op is 2, not 0 or 1"),
        ((1, datetime(2024, 1, 1), "P", 3, 4, None, -1), "sys_op is -1"),
        ((1, datetime(2024, 1, 1), None, 3, 4, None, 0), "row 2: product_code is NOT NULL"),
        ((None, datetime(2024, 1, 1), "P", 3, 4, None, 0), "row 2: id is NOT NULL"),
        ((1, datetime(2024, 1, 1), "P" * 257, 3, 4, None, 0), "longer than 256"),
        ((1, datetime(2024, 1, 1), "P", 3, 4, "a\x00b", 0), "NUL"),
        ((1, -(2**62), "P", 3, 4, None, 0), "transaction_date is"),
    ],
)
def test_row_checks(sales: Table, row: tuple[Any, ...], fragment: str) -> None:
    data = encode_body(sales, [ROW, row, ROW])
    with pytest.raises(SchemaMismatchError, match=fragment):
        decode_body_table(sales, data)


def test_a_null_sys_op_is_invalid(sales: Table) -> None:
    schema = _mutated(
        sales, lambda f: f.__setitem__(6, {"name": "sys_op", "type": ["null", "int"]})
    )
    rows = [_record(sales, ROW), _record(sales, (*ROW[:-1], None))]
    with pytest.raises(SchemaMismatchError, match="row 2: sys_op is null"):
        decode_body_table(sales, _with_schema(schema, rows))
    assert decode_body_table(sales, _with_schema(schema, rows[:1])).num_rows == 1


def test_strings_at_their_length_limit_pass(sales: Table) -> None:
    # the limit counts characters, as PostgreSQL's varchar(n) does, not bytes
    row = (1, datetime(2024, 1, 1), "Ж" * 256, 3, 4, "😀" * 256, 0)
    assert decode_body_table(sales, encode_body(sales, [row])).num_rows == 1


def test_times_and_dates_outside_what_postgres_stores(marketing: LogicalSchema) -> None:
    table = LogicalSchema.model_validate(
        {
            "datamart": "d",
            "tables": [
                {
                    "name": "t",
                    "columns": [
                        {"name": "id", "type": {"kind": "INT"}, "not_null": True},
                        {"name": "tm", "type": {"kind": "TIME"}},
                        {"name": "dt", "type": {"kind": "DATE"}},
                    ],
                    "primary_key": ["id"],
                }
            ],
        }
    ).table("t")
    assert decode_body_table(table, encode_body(table, [(1, TIME_MAX_MICROS, 0, 0)])).num_rows
    for bad, fragment in [
        ((1, TIME_MAX_MICROS + 1, 0, 0), "tm is"),
        ((1, -1, 0, 0), "tm is"),
        ((1, 0, -2_440_589, 0), "dt is"),
    ]:
        with pytest.raises(SchemaMismatchError, match=fragment):
            decode_body_table(table, encode_body(table, [bad]))


# ---- nothing crashes -------------------------------------------------------------------


ALLOWED_OUTCOMES = ("decoded", ErrorCode.BAD_CHUNK, ErrorCode.SCHEMA_MISMATCH)


def _outcome(table: Table, data: bytes) -> str:
    """'decoded', or the code of the typed error; any other exception fails the test."""
    try:
        decode_body_table(table, data)
    except ProtocolError as error:
        return error.code
    return "decoded"


def _valid_body(sales: Table) -> bytes:
    return encode_body(sales, [ROW, (2, datetime(1960, 5, 5), "Q", -1, 0, None, 1)] * 5)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.data())
def test_mutated_bodies_fail_only_with_protocol_errors(marketing: LogicalSchema, data: Any) -> None:
    sales = marketing.table("sales")
    body = bytearray(_valid_body(sales))
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        at = data.draw(st.integers(0, max(len(body) - 1, 0)))
        if action == "flip" and body:
            body[at] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del body[at:]
        elif action == "insert":
            body[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif body:
            del body[at : at + data.draw(st.integers(1, 8))]
    assert _outcome(sales, bytes(body)) in ALLOWED_OUTCOMES


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_after_the_magic_fail_only_with_protocol_errors(
    marketing: LogicalSchema, tail: bytes
) -> None:
    assert _outcome(marketing.table("sales"), b"Obj\x01" + tail) in ALLOWED_OUTCOMES
