"""The compiled body writer (`protocol.avro_encoder`) against fastavro, the oracle: the same
record bytes in the same blocks for every type's edge values and for random rows; and what it
does not take (values not plain) still written, or refused, by fastavro."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.avro_encoder import fast_body
from protocol.body_writer import body_schema, encode_body, fastavro_body, row_records
from protocol.ocf import OcfLimits, iter_blocks, read_header
from protocol.schema import Table
from tests.protocol.tables import ALL_TYPES, decode_body_table
from tests.protocol.test_body import EDGE_ROWS, all_types_rows


def _blocks(data: bytes) -> list[tuple[int, bytes]]:
    header = read_header(data, OcfLimits())
    return [(b.count, b.payload) for b in iter_blocks(data, header, OcfLimits())]


def _fast(table: Table, rows: list[Any], *, all_nullable: bool = True) -> bytes | None:
    schema = body_schema(table, all_nullable=all_nullable)
    nullable = [isinstance(f["type"], list) for f in schema["fields"][:-1]]
    return fast_body(table, rows, schema, "null", nullable)


@pytest.mark.parametrize("codec", ["null", "deflate"])
@pytest.mark.parametrize("all_nullable", [True, False])
def test_edge_values_are_the_bytes_fastavro_writes(codec: str, all_nullable: bool) -> None:
    rows = [r for r in EDGE_ROWS if all_nullable or r[1] is not None] * 40  # several blocks
    assert _fast(ALL_TYPES, rows, all_nullable=all_nullable) is not None  # the compiled path
    ours = encode_body(ALL_TYPES, rows, codec=codec, all_nullable=all_nullable)  # type: ignore[arg-type]
    schema = body_schema(ALL_TYPES, all_nullable=all_nullable)
    theirs = fastavro_body(ALL_TYPES, rows, schema, codec)
    assert len(_blocks(ours)) > 1
    assert _blocks(ours) == _blocks(theirs)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(all_types_rows(), min_size=1, max_size=40), st.sampled_from(["null", "deflate"]))
def test_random_rows_are_the_bytes_fastavro_writes(rows: list[tuple[Any, ...]], codec: str) -> None:
    ours = encode_body(ALL_TYPES, rows, codec=codec)  # type: ignore[arg-type]
    assert _blocks(ours) == _blocks(fastavro_body(ALL_TYPES, rows, body_schema(ALL_TYPES), codec))


def test_aware_timestamps_are_written_as_their_utc_instant() -> None:
    row = list(EDGE_ROWS[3])
    stamp = ALL_TYPES.column_names.index("ts")
    row[stamp] = datetime(2024, 5, 1, 12, tzinfo=timezone(timedelta(hours=3)))
    data = encode_body(ALL_TYPES, [tuple(row)])
    assert decode_body_table(ALL_TYPES, data).column("ts")[0].as_py() == datetime(2024, 5, 1, 9)
    assert _blocks(data) == _blocks(fastavro_body(ALL_TYPES, [row], body_schema(ALL_TYPES), "null"))
    assert datetime(2024, 5, 1, 9, tzinfo=UTC) == row[stamp]


def test_values_that_are_not_plain_go_to_fastavro() -> None:
    row = list(EDGE_ROWS[3])
    row[ALL_TYPES.column_names.index("dt")] = 19_000  # the Avro encoding of a date: days
    assert _fast(ALL_TYPES, [tuple(row)]) is None
    data = encode_body(ALL_TYPES, [tuple(row)])
    decoded = decode_body_table(ALL_TYPES, data)
    assert decoded.column("dt")[0].as_py() == date(1970, 1, 1) + timedelta(days=19_000)


def test_bad_rows_are_still_refused() -> None:
    with pytest.raises(ValueError, match="needs"):
        encode_body(ALL_TYPES, [EDGE_ROWS[0][:-1]])  # a value short
    row = list(EDGE_ROWS[3])
    row[ALL_TYPES.column_names.index("i32")] = 2**31  # no int32
    assert _fast(ALL_TYPES, [tuple(row)]) is None
    with pytest.raises(ValueError, match="do not match"):
        encode_body(ALL_TYPES, [tuple(row)])
    as_int = list(EDGE_ROWS[3])
    as_int[ALL_TYPES.column_names.index("b")] = 1  # an int where a bool goes
    assert _fast(ALL_TYPES, [tuple(as_int)]) is None
    with pytest.raises(ValueError, match="do not match"):
        encode_body(ALL_TYPES, [tuple(as_int)])
    nulled = list(EDGE_ROWS[3])
    nulled[-1] = None  # sys_op is never null
    assert _fast(ALL_TYPES, [tuple(nulled)]) is None
    with pytest.raises((TypeError, ValueError)):
        encode_body(ALL_TYPES, [tuple(nulled)])


def test_no_rows_is_a_header_only_body() -> None:
    data = encode_body(ALL_TYPES, [])
    assert _blocks(data) == []
    assert decode_body_table(ALL_TYPES, data).num_rows == 0


def test_row_records_are_the_same_bytes_from_the_compiled_writer_and_from_fastavro() -> None:
    """`row_records` (what a records digest hashes) is the same for the same rows whichever
    writer takes them: plain rows go to the compiled writer, a date as its days to fastavro;
    and they are the records a body of those rows holds."""
    rows = [r for r in EDGE_ROWS if r[ALL_TYPES.column_names.index("dt")] is not None]
    plain = row_records(ALL_TYPES, rows)
    at = ALL_TYPES.column_names.index("dt")
    as_days = [(*r[:at], (r[at] - date(1970, 1, 1)).days, *r[at + 1 :]) for r in rows]
    assert _fast(ALL_TYPES, as_days) is None  # fastavro writes these
    assert row_records(ALL_TYPES, as_days) == plain
    assert [p for _, p in _blocks(encode_body(ALL_TYPES, rows))] == [plain]
    assert row_records(ALL_TYPES, []) == b""
