"""The msgspec fast path of Qlik data messages (`origin.cdc.json_fast`) decides exactly as the
exact path does: for good messages the same change, and for every bad one the exact path's
error (the fast path may only step aside, never accept what the exact path refuses)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from origin.cdc.errors import BadInput
from origin.cdc.qlik import QlikDecoder
from tests.origin.test_cdc_decode import ROW, TYPES, qlik_data, qlik_metadata

BIG = 10**30
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
        whole.replace(b'"headers": {', b'"headers": {"streamPosition": "\xff", '),
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
    taken = [m for m in messages if fast._fast(m) is not None]
    assert len(taken) > len(messages) // 3
    assert fast._fast(qlik_data(PLAIN)) is not None
    assert fast._fast(qlik_data({"K": 7}, op="DELETE")) is not None
