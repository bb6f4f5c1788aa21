"""`bench.cdc_columnar`: the columnar prototype makes the rows today's origin makes from the
same messages, and its compiled reading reads only what it is sure of."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from bench import cdc_columnar, cdc_columnar_kernel
from bench.cdc_instructions import prepared


def _garbage(shape: Any, dtype: Any) -> Any:
    """An array as `numpy.empty` may hand it out: here, full of a far index."""
    return np.full(shape, 7 if dtype == np.uint8 else 10**12, dtype)


@pytest.mark.parametrize("allocate", [np.empty, _garbage])
def test_the_prototype_makes_the_rows_of_todays_path(allocate: Any) -> None:
    """(With `_garbage`: a null DATE field's text range was never set, and the first CI run
    of this test crashed reading it.)"""
    data = prepared("qlik", 2_000)
    messages = [value for _, value in data["messages"]]
    batch = cdc_columnar.read(messages, allocate)
    data_messages = sum(b'"type": "DT"' in m for m in messages)
    assert int(batch.read.sum()) == data_messages > 0  # every data message, no description
    changes, bodies = cdc_columnar.table_bodies(batch, data["schema"])
    assert changes == data_messages
    assert cdc_columnar.body_rows(bodies) == cdc_columnar.today_rows(data)


def _message(data: str = '{"ID": 7, "NAME": "a\\"b"}', **envelope: str) -> bytes:
    headers = {
        "operation": "UPDATE",
        "changeSequence": "20231114221320030000000000000000043",
        "timestamp": "2023-11-14T22:13:20.038",
        "transactionId": "00A",
        "transactionEventCounter": 2,
        "transactionLastEvent": False,
        "columnMask": "03",
    }
    fields = {"magic": '"atMSG"', "type": '"DT"', "messageSchemaId": '"t-v1-x"'} | envelope
    top = ", ".join(f'"{k}": {v}' for k, v in fields.items())
    return (
        f'{{{top}, "headers": null, "message": {{"data": {data}, '
        f'"beforeData": null, "headers": {json.dumps(headers)}}}}}'
    ).encode()


def _texts(batch: cdc_columnar.Batch, m: int, column: int) -> bytes:
    start, end = batch.heads[m, column : column + 2]
    return bytes(batch.out[start:end])


def test_a_plain_message_is_read_with_its_headers_and_fields() -> None:
    plain = _message('{"ID": -7, "NAME": "a\\"b\\/c é", "GONE": null}')
    batch = cdc_columnar.read([plain, plain])
    assert batch.read.tolist() == [True, True]
    assert _texts(batch, 1, cdc_columnar_kernel.M_OP) == b"UPDATE"
    assert _texts(batch, 1, cdc_columnar_kernel.M_SCHEMA_ID) == b"t-v1-x"
    assert _texts(batch, 1, cdc_columnar_kernel.M_TX) == b"00A"
    head = batch.heads[1]
    assert (head[cdc_columnar_kernel.M_COUNTER], head[cdc_columnar_kernel.M_LAST]) == (2, 0)
    k = cdc_columnar_kernel
    fields = [f for f in batch.fields if f[k.F_MSG] == 1]
    assert [bytes(batch.out[f[k.F_KEY0] : f[k.F_KEY1]]) for f in fields] == [
        b"ID",
        b"NAME",
        b"GONE",
    ]
    assert [f[k.F_KIND] for f in fields] == [k.V_INT, k.V_STR, k.V_NULL]
    assert fields[0][k.F_INT] == -7
    assert bytes(batch.out[fields[1][k.F_STR0] : fields[1][k.F_STR1]]).decode() == 'a"b/c é'


@pytest.mark.parametrize(
    "message",
    [
        _message('{"ID": 7, "NAME": "\\u00e9"}'),  # \u: the exact path decides
        _message().replace(b'"a\\"b"', b'"\xffb"'),  # not UTF-8
        _message('{"ID": 1.5}'),  # not an int64
        _message('{"ID": 9223372036854775808}'),  # one over int64
        _message('{"ID": {"deep": 1}}'),
        _message('{"ID": [1]}'),
        _message('{"ID": 7,}'),
        _message(magic='"atMSX"'),
        _message(type='"MD"'),
        _message(messageSchemaId="7"),
        _message(other='"field"'),
        _message()[:-1],  # truncated
        _message() + b" x",  # trailing bytes
        _message().replace(b'"columnMask"', b'"unknownHeader"'),
        _message().replace(b'"NAME": "a', b'"NAME": "\x01a'),  # a control character
        _message("{" + ",".join(['"":1'] * 10_000) + "}"),  # more fields than there is room for
        _message().replace(b'a\\"b', "\u00e9".encode()[:1] + b"b"),  # a cut UTF-8 sequence
    ],
)
def test_what_the_kernel_is_not_sure_of_is_not_read(message: bytes) -> None:
    plain = _message()
    batch = cdc_columnar.read([plain, message, plain])
    assert message != plain
    assert batch.read.tolist() == [True, False, True]
    k = cdc_columnar_kernel
    # no field of the message not read is kept, and the next message's are whole
    assert sorted(int(f[k.F_MSG]) for f in batch.fields) == [0, 0, 2, 2]
