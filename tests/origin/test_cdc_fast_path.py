"""The msgspec fast paths of Qlik and DataWorks messages (`podd_cdc.json_fast`) decide
exactly as the exact paths do: for good messages the same change, and for every bad one the
exact path's error (a fast path may only step aside, never accept what the exact path
refuses)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.dataworks_fast import KnownSchemas
from podd_cdc.errors import BadInput, SchemaStop
from podd_cdc.json_fast import plain_message
from podd_cdc.qlik import QlikDecoder
from podd_cdc.records import Change
from tests.origin.test_cdc_decode import ROW, TYPES, qlik_data, qlik_metadata

BIG = 10**30
UINT, HUGE = b"0" * 19, b"0" * 30  # after a 1: past a signed 64-bit integer, past 64 bits
#: A row the fast path reads itself (ROW has numbers and a boolean as text: the exact path's).
PLAIN = dict(ROW, U8=2**63 - 1, B=True)
# Values of every column's edge: what fits, what does not, what orjson reads otherwise.
VARIANTS: dict[str, list[Any]] = {
    "K": [0, -(2**31), 2**31 - 1, 2**31, 1.0, "7", True, None, BIG, [1], {"a": 1}],
    "U8": [0, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -1, "5", 1.5, BIG, None],
    "R4": [0, 1, -0.0, 1e38, 1e300, BIG, "1.5", True, None, 2**70],
    "S": ["", "abc", "abcd", "a\x00", "\ud7ff", "é", "日本", 1, None, True],
    "D": ["2023-03-21", "2023-03-21T00:00", " 2023-03-21", "2023-3-21", 19000, True, None, BIG],
    "B": [True, False, 0, 1, 2, "true", "1", "yes", None, 1.0],
    "TS": ["2023-03-21 14:34:21.000123", "2023-03-21T14:34:21+03:00", "x", 0, BIG, None],
    "N18": ["42", 42, "1.5", 1.5, BIG, None, "99999999999999999999"],
    "N19": ["1234567890123456789", 12, "1e5", BIG, None],
    "BY": ["0aFF", "xyz", "0aFF0aFF0", None, 5],
    "T": ["14:34:21.5", "25:00", 5, None],
}


def _outcome(decoder: QlikDecoder, value: bytes) -> Any:
    try:
        return decoder.decode("t", value)
    except BadInput as exc:
        return ("bad", exc.reason)


def _pair() -> tuple[QlikDecoder, QlikDecoder]:
    fast, exact = QlikDecoder(), QlikDecoder(fast=False)
    for decoder in (fast, exact):
        decoder.decode("t", qlik_metadata(TYPES))
    return fast, exact


def _swapped(message: bytes, old: bytes, new: bytes) -> bytes:
    """`message` with `old` (which it must hold) replaced by `new`."""
    assert old in message
    return message.replace(old, new)


def _messages() -> list[bytes]:
    found = []
    for column, values in VARIANTS.items():
        for value in values:
            row = dict(PLAIN, **{column: value})
            found += [qlik_data(row), qlik_data(row, op="UPDATE", before=PLAIN)]
            found.append(qlik_data({"K": 7, column: value}, op="DELETE"))
    whole = qlik_data(PLAIN)
    found += [
        qlik_data({k: v for k, v in PLAIN.items() if k != "S"}),  # a column missing
        qlik_data(dict(PLAIN, EXTRA=1)),  # a column unknown
        qlik_data({"S": "x"}, op="DELETE"),  # a delete without its key
        qlik_data(PLAIN, op="TRUNCATE"),
        qlik_data(PLAIN, mask="7FE"),  # the key not captured
        qlik_data(PLAIN, before={}),
        qlik_data(dict(PLAIN, K=8), op="UPDATE", before=PLAIN),  # the key changed
        whole.replace(b'"abc"', b'"a\\u0000c"'),  # NUL escaped in text
        whole.replace(b'"abc"', b'"a\\ud800c"'),  # a lone surrogate
        whole.replace(b'"abc"', b'"a\xffc"'),  # not UTF-8
        whole.replace(b'"transactionId": "AB"', b'"transactionId": 1000000000000000000000000'),
        whole.replace(b'"transactionEventCounter": 1', b'"transactionEventCounter": 0'),
        whole.replace(b'"transactionEventCounter": 1', b'"transactionEventCounter": true'),
        whole.replace(b'"changeSequence": "2026', b'"changeSequence": "x2026'),
        # Headers of a JSON type Qlik does not write: the exact path decides each.
        _swapped(whole, b'"changeSequence": "', b'"changeSequence": 1, "x": "'),
        _swapped(whole, b'"transactionEventCounter": 1', b'"transactionEventCounter": 1.0'),
        _swapped(whole, b'"transactionEventCounter": 1', b'"transactionEventCounter": "1"'),
        _swapped(whole, b'"transactionEventCounter": 1', b'"transactionEventCounter": 2e70'),
        _swapped(whole, b'"transactionEventCounter": 1', b'"transactionEventCounter": 1' + UINT),
        _swapped(whole, b'"transactionEventCounter": 1', b'"transactionEventCounter": 1' + HUGE),
        _swapped(whole, b'"transactionLastEvent": true', b'"transactionLastEvent": "true"'),
        _swapped(whole, b'"transactionLastEvent": true', b'"transactionLastEvent": 1'),
        _swapped(whole, b'"transactionId": "AB"', b'"transactionId": 7'),
        _swapped(whole, b'"transactionId": "AB"', b'"transactionId": null'),
        _swapped(whole, b'"operation": "INSERT"', b'"operation": 1'),
        _swapped(whole, b'"timestamp": "', b'"timestamp": 1700000000000, "x": "'),
        _swapped(qlik_data(PLAIN, mask="7FF"), b'"columnMask": "7FF"', b'"columnMask": 2047'),
        _swapped(whole, b'"headers": {', b'"headers": {"streamPosition": "\xff", '),
        whole.replace(b'"K": 7', b'"K": 7, "K": 8'),  # a key given twice: the last counts
        whole.replace(b'"data": {', b'"data": {"\\u004b": 9, '),  # an escaped column name
        whole.replace(b'"messageSchemaId": "s1"', b'"messageSchemaId": 1'),
        whole + b" ",
        whole + b"x",
        whole[:-5],
        json.dumps(
            {
                "magic": "atMSG",
                "type": "DT",
                "messageSchemaId": "s1",
                "message": {"data": PLAIN, "headers": None},
            }
        ).encode(),
    ]
    return found


@pytest.mark.parametrize("value", _messages())
def test_the_fast_path_decides_as_the_exact_path(value: bytes) -> None:
    fast, exact = _pair()
    assert _outcome(fast, value) == _outcome(exact, value)


def test_the_fast_path_reads_most_of_these_itself() -> None:
    """The comparison above means something only where the fast path answers."""
    fast, _ = _pair()
    messages = _messages()
    taken = [m for m in messages if fast._fast_path.decode(m) is not None]
    assert len(taken) > len(messages) // 3
    assert fast._fast_path.decode(qlik_data(PLAIN)) is not None
    assert fast._fast_path.decode(qlik_data({"K": 7}, op="DELETE")) is not None


# ---- DataWorks ------------------------------------------------------------------------

DW_COLUMNS = [
    ("id", "LONG"),
    ("at", "DATE"),
    ("raw", "BYTES"),
    ("s", "STRING"),
    ("b", "BOOLEAN"),
    ("d", "DOUBLE"),
]
DW_ROW = {"id": 1, "at": 1_700_000_000_123, "raw": "AAE=", "s": "x", "b": True, "d": 1.5}
DW_VARIANTS: dict[str, list[Any]] = {
    "id": [0, -(2**63), 2**63 - 1, 2**63, "5", 1.0, True, None, BIG],
    "at": [0, -1, "5", 1.5, None, BIG, 2**63],
    "raw": ["", "AAE", "!!", 5, None],
    "s": ["", "a\x00", "日本", 5, None, "\ud7ff"],
    "b": [True, False, 0, 1, "true", 2, None],
    "d": [0, -0.0, 1e308, BIG, "1.5", None, True],
}


def dw_message(
    op: str, after: Any = None, before: Any = None, seq: Any = "12", event: Any = 1_700_000_000_000
) -> bytes:
    schema = {
        "dataColumn": [{"name": n, "type": t} for n, t in DW_COLUMNS],
        "primaryKey": ["id"],
        "source": {"dbName": "shop", "schemaName": "s", "tableName": "T"},
    }

    def image(row: Any) -> Any:
        return None if row is None else {"dataColumn": row}

    payload = {
        "op": op,
        "sequenceId": seq,
        "before": image(before),
        "after": image(after),
        "timestamp": {"eventTime": event},
    }
    return json.dumps({"schema": schema, "payload": payload}).encode()


def _dw_messages() -> list[bytes]:
    found = []
    for column, values in DW_VARIANTS.items():
        for value in values:
            row = dict(DW_ROW, **{column: value})
            found += [
                dw_message("INSERT", row),
                dw_message("UPDATE_AFTER", row, DW_ROW),
                dw_message("DELETE", before={"id": 1, column: value}),
                dw_message("UPDATE_BEFOR", before=row),
            ]
    whole = dw_message("INSERT", DW_ROW)
    found += [
        dw_message("INSERT", {k: v for k, v in DW_ROW.items() if k != "s"}),
        dw_message("INSERT", dict(DW_ROW, extra=1)),
        dw_message("DELETE", before={"s": "x"}),
        dw_message("DELETE", after=DW_ROW),
        dw_message("UPDATE_AFTER", dict(DW_ROW, id=2), DW_ROW),  # the key changed
        dw_message("UPDATE_AFTER", DW_ROW, {}),
        dw_message("INSERT", DW_ROW, seq="1e3"),
        dw_message("INSERT", DW_ROW, seq=BIG),
        dw_message("INSERT", DW_ROW, seq=-1),
        dw_message("INSERT", DW_ROW, event=2**63),
        dw_message("INSERT", DW_ROW, event=None),
        dw_message("TRUNCATE"),
        whole.replace(b'"x"', b'"\\u0000"'),
        whole.replace(b'"x"', b'"\xff"'),
        whole.replace(b'"version"', b'"\xff"'),
        whole.replace(b'"dbName": "shop"', b'"dbName": "shop", "x": "\xff"'),
        whole.replace(b'"tableName": "T"', b'"tableName": 5'),
        whole.replace(b'"primaryKey": ["id"]', b'"primaryKey": []'),
        whole.replace(b'"primaryKey": ["id"]', b'"primaryKey": ["id"], "dataColumn": []'),
        whole + b"x",
    ]
    return found


def _dw_outcome(decoder: DataWorksDecoder, value: bytes) -> Any:
    try:
        return decoder.decode("t", value)
    except BadInput as exc:
        return ("bad", exc.reason)


@pytest.mark.parametrize("value", _dw_messages())
def test_the_dataworks_fast_path_decides_as_the_exact_path(value: bytes) -> None:
    fast, exact = DataWorksDecoder(), DataWorksDecoder(fast=False)
    for _ in range(2):  # the table not known yet, then known
        assert _dw_outcome(fast, value) == _dw_outcome(exact, value)


def test_the_dataworks_fast_path_reads_most_of_these_itself() -> None:
    fast = DataWorksDecoder()
    messages = _dw_messages()
    taken = [m for m in messages if plain_message(m) and fast._fast(m) is not None]
    assert len(taken) > len(messages) // 3


def test_dataworks_schemas_of_one_length_each_name_their_own_table() -> None:
    """Schemas that differ in one byte, of one length, more of them than are compared byte
    for byte: each message is decoded as its own table's, fast as exactly."""
    whole = dw_message("INSERT", DW_ROW)
    named = [whole.replace(b'"tableName": "T"', f'"tableName": "{n}"'.encode()) for n in "TUVWXYZ"]
    fast, exact = DataWorksDecoder(), DataWorksDecoder(fast=False)
    tables = []
    for value in named * 3:
        record = fast.decode("t", value)
        assert record == exact.decode("t", value)
        assert isinstance(record, Change)
        tables.append(record.rows[0].table)
    assert len(set(tables)) == len(named)
    assert tables[: len(named)] == tables[len(named) : 2 * len(named)]


def test_the_schemas_kept_for_the_fast_path_are_bounded_in_bytes_and_each_kept_once() -> None:
    """Many schemas, large and of one length (a hostile topic's): what is kept stays within
    the byte bound, each schema is kept once, and every schema, kept or not, is answered
    right (a schema not kept is learnt again by the caller)."""
    known: KnownSchemas[int] = KnownSchemas(max_schemas=100, max_bytes=10_000)
    schemas = [msgspec.Raw(f'{{"n": {n:04d}, "pad": "{"x" * 990}"}}'.encode()) for n in range(30)]
    for n, raw in enumerate(schemas):
        assert known.get(raw) is None
        known.add(raw, n)
    assert known.kept == 9
    assert known.kept_bytes <= 10_000
    assert [known.get(raw) for raw in schemas] == [*range(9), *[None] * 21]
    small: KnownSchemas[int] = KnownSchemas(max_schemas=3)
    for n, raw in enumerate(schemas):
        small.add(raw, n)
    assert small.kept == 3
    assert [small.get(raw) for raw in schemas[:4]] == [0, 1, 2, None]


@pytest.mark.parametrize("fast", [True, False])
def test_a_changed_table_stops_at_every_message_of_its_new_schema(fast: bool) -> None:
    """The schema stop was kept only for the first message: the changed schema's table was
    kept before the check, so a second reading took it (and the fast path's refusal made
    the exact path's reading the second)."""
    decoder = DataWorksDecoder(fast=fast)
    decoder.decode("t", dw_message("INSERT", DW_ROW))
    other = dw_message("INSERT", DW_ROW).replace(b'"type": "DATE"', b'"type": "LONG"')
    for _ in range(2):
        with pytest.raises(SchemaStop, match="table t changed"):
            decoder.decode("t", other)
