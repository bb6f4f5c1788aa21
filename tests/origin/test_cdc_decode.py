"""The decoders on messages written out by hand (not by the writers): values, names, ops."""

from __future__ import annotations

import json
import re
from datetime import date, datetime, time
from typing import Any

import pytest

from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.errors import AwaitingMetadata, BadInput, TableRefused
from podd_cdc.qlik import QlikDecoder
from podd_cdc.records import Change, Heartbeat, Skipped, TableSeen


def qlik_metadata(
    columns: dict[str, tuple[str, int, int, int, int]],
    server: str = "db1",
    schema_id: str = "s1",
    table: str = "T",
) -> bytes:
    structure = {
        name: {
            "ordinal": i,
            "type": t,
            "length": ln,
            "precision": p,
            "scale": sc,
            "primaryKeyPosition": pk,
        }
        for i, (name, (t, ln, p, sc, pk)) in enumerate(columns.items(), start=1)
    }
    message = {
        "schemaId": schema_id,
        "tableStructure": {"tableColumns": structure},
        "lineage": {
            "server": server,
            "task": "t",
            "schema": "dbo",
            "table": table,
            "tableVersion": 1,
            "timestamp": "",
        },
        "dataSchema": "{}",
    }
    return json.dumps({"magic": "atMSG", "type": "MD", "message": message}).encode()


def qlik_data(
    data: dict[str, Any],
    op: str = "INSERT",
    mask: str | None = None,
    before: dict[str, Any] | None = None,
) -> bytes:
    headers = {
        "operation": op,
        "changeSequence": "20260101000000000000000000000000001",
        "timestamp": "2026-01-01T00:00:00.123",
        "transactionId": "AB",
        "transactionEventCounter": 1,
        "transactionLastEvent": True,
    }
    if mask is not None:
        headers["columnMask"] = mask
    return json.dumps(
        {
            "magic": "atMSG",
            "type": "DT",
            "messageSchemaId": "s1",
            "message": {"data": data, "beforeData": before, "headers": headers},
        }
    ).encode()


TYPES = {
    "K": ("INT4", 0, 0, 0, 1),
    "N19": ("NUMERIC", 0, 19, 0, 0),
    "N18": ("NUMERIC", 0, 18, 0, 0),
    "U8": ("UINT8", 0, 0, 0, 0),
    "R4": ("REAL4", 0, 0, 0, 0),
    "T": ("TIME", 0, 0, 0, 0),
    "D": ("DATE", 0, 0, 0, 0),
    "TS": ("DATETIME", 0, 0, 0, 0),
    "BY": ("BYTES", 8, 0, 0, 0),
    "B": ("BOOLEAN", 0, 0, 0, 0),
    "S": ("STRING", 3, 0, 0, 0),
}
ROW = {
    "K": 7,
    "N19": "1234567890123456789",
    "N18": "42",
    "U8": "9223372036854775807",
    "R4": 1.5,
    "T": "14:34:21.5",
    "D": "2023-03-21",
    "TS": "2023-03-21 14:34:21.000123",
    "BY": "0aFF",
    "B": "1",
    "S": "abc",
}


def decoder() -> QlikDecoder:
    found = QlikDecoder()
    seen = found.decode("t", qlik_metadata(TYPES))
    assert isinstance(seen, TableSeen)
    return found


def test_qlik_values_land_as_the_type_table_says() -> None:
    change = decoder().decode("t", qlik_data(ROW))
    assert isinstance(change, Change)
    (row,) = change.rows
    assert row.values == (
        7,
        "1234567890123456789",
        42,
        2**63 - 1,
        1.5,
        time(14, 34, 21, 500000),
        date(2023, 3, 21),
        datetime(2023, 3, 21, 14, 34, 21, 123),
        "0aFF",
        True,
        "abc",
    )
    assert change.source_time == datetime(2026, 1, 1, 0, 0, 0, 123000)


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        ("U8", "9223372036854775808", "is outside"),
        ("S", "abcd", "do not fit VARCHAR(3)"),
        ("BY", "xyz", "not hexadecimal"),
        ("K", True, "not an integer"),
        ("D", "21/03/2023", ""),
        ("N18", "1.5", "not an integer"),
        ("B", "yes", "not a boolean"),
        ("S", "a\x00", "NUL"),
    ],
)
def test_a_value_that_does_not_fit_is_bad_input_naming_the_column(
    column: str, value: Any, reason: str
) -> None:
    with pytest.raises(BadInput, match=f"column {column.lower()}.*{re.escape(reason)}"):
        decoder().decode("t", qlik_data(dict(ROW, **{column: value})))


def test_column_mask_bits_follow_the_ordinal() -> None:
    every = format((1 << len(TYPES)) - 1, "X")
    assert isinstance(decoder().decode("t", qlik_data(ROW, mask=every)), Change)
    with pytest.raises(BadInput, match="column s of table t was not captured"):
        decoder().decode("t", qlik_data(ROW, mask=format((1 << (len(TYPES) - 1)) - 1, "X")))
    # A delete needs only its key captured (bit 0: K, ordinal 1).
    gone = decoder().decode("t", qlik_data({"K": 7}, op="DELETE", mask="1"))
    assert isinstance(gone, Change)
    assert gone.rows[0].sys_op == 1


@pytest.mark.parametrize("operation", [["INSERT"], {"op": "INSERT"}, None, 1])
def test_an_operation_of_another_json_type_is_bad_input(operation: Any) -> None:
    """A list or an object failed the operation's set lookups with an uncaught TypeError
    (found by mutating the bench's messages), which stopped the origin at every restart."""
    with pytest.raises(BadInput, match=r"operation .* is not one Qlik writes"):
        decoder().decode("t", qlik_data(ROW, op=operation))
    with pytest.raises(BadInput, match=r"op .* is not one DataWorks writes"):
        DataWorksDecoder().decode("t", dataworks(operation, after=ROW, key=["id"]))


def test_an_update_that_changes_the_key_deletes_the_old_one() -> None:
    change = decoder().decode("t", qlik_data(dict(ROW, K=8), op="UPDATE", before=ROW))
    assert isinstance(change, Change)
    assert [(r.sys_op, r.values[0]) for r in change.rows] == [(1, 7), (0, 8)]


def test_data_before_its_metadata_waits_and_two_sources_on_one_name_are_refused() -> None:
    with pytest.raises(AwaitingMetadata):
        QlikDecoder().decode("t", qlik_data(ROW))
    found = decoder()
    with pytest.raises(
        TableRefused, match=r"two source tables map to table t: db1\.dbo\.T and db2"
    ):
        found.decode("t", qlik_metadata(TYPES, server="db2", schema_id="s2"))
    with pytest.raises(TableRefused, match="not a plain identifier"):
        found.decode("t", qlik_metadata(TYPES, table="bad$name", schema_id="s3"))


Row = dict[str, Any] | None


def dataworks(
    op: str,
    *,
    after: Row = None,
    before: Row = None,
    key: list[str] | None = None,
    db: str = "shop",
    seq: Any = "12",
) -> bytes:
    schema = {
        "dataColumn": [
            {"name": "id", "type": "LONG"},
            {"name": "at", "type": "DATE"},
            {"name": "raw", "type": "BYTES"},
        ],
        "primaryKey": key,
        "source": {"dbName": db, "schemaName": "s", "tableName": "T"},
    }

    def image(row: Row) -> dict[str, Any] | None:
        return None if row is None else {"dataColumn": row}

    payload = {
        "op": op,
        "sequenceId": seq,
        "before": image(before),
        "after": image(after),
        "timestamp": {"eventTime": 1_700_000_000_000},
    }
    return json.dumps({"schema": schema, "payload": payload}).encode()


def test_dataworks_values_ops_and_sequence_order() -> None:
    found = DataWorksDecoder()
    row = {"id": 1, "at": 1_700_000_000_123, "raw": "AAE="}
    change = found.decode("t", dataworks("INSERT", after=row, key=["id"]))
    assert isinstance(change, Change)
    assert change.rows[0].values == (1, datetime(2023, 11, 14, 22, 13, 20, 123000), "AAE=")
    assert change.order == (12, 1)
    half = found.decode("t", dataworks("UPDATE_BEFOR", before=row, key=["id"]))
    assert isinstance(half, Change)
    assert (half.order, half.rows[0].sys_op) == ((12, 0), 1)  # before the AFTER of id 12
    beat = found.decode("t", b'{"payload": {"op": "MHEARTBEAT", "timestamp": {"eventTime": 5}}}')
    assert beat == Heartbeat(5)
    assert found.decode("t", b'{"payload": {"op": "GTID"}}') == Skipped("GTID")
    with pytest.raises(BadInput, match="sequenceId '1e3' is not a whole number"):
        found.decode("t", dataworks("INSERT", after=row, key=["id"], seq="1e3"))
    for digits in ("²", "١٢", True, -1):  # `int` refused '²' with a ValueError, uncaught
        with pytest.raises(BadInput, match=r"sequenceId .* is not a whole number"):
            found.decode("t", dataworks("INSERT", after=row, key=["id"], seq=digits))
    padded = found.decode("t", dataworks("DELETE", before=row, key=["id"], seq=" 7 "))
    assert isinstance(padded, Change)
    assert padded.order == (7, 1)
    with pytest.raises(BadInput, match="not base64"):
        found.decode("t", dataworks("INSERT", after=dict(row, raw="!!"), key=["id"]))


def test_dataworks_keys_names_and_ddl() -> None:
    found = DataWorksDecoder()
    with pytest.raises(TableRefused, match="table T has no primary key"):
        found.decode("t", dataworks("INSERT", after={"id": 1, "at": 0, "raw": None}))
    found.decode("t", dataworks("INSERT", after={"id": 1, "at": 0, "raw": None}, key=["id"]))
    with pytest.raises(TableRefused, match="two source tables map to table t"):
        found.decode(
            "t", dataworks("INSERT", after={"id": 1, "at": 0, "raw": None}, key=["id"], db="other")
        )
    # DDL of a table the replica does not hold is counted; of one it holds, a schema stop.
    other = json.loads(dataworks("ALTER", key=["id"]))
    other["schema"]["source"]["tableName"] = "elsewhere"
    assert found.decode("t", json.dumps(other).encode()) == Skipped("ALTER")
    with pytest.raises(BadInput, match="ALTER of replicated table t"):
        found.decode("t", dataworks("ALTER", key=["id"]))
