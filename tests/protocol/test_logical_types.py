"""A key or control message whose writer schema gives a field another logical type than the
contract's is refused: it decoded "right" here (by the writer's own logical type) while a
reader of the contract's schema, as Java's Avro, reads another value."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import fastavro
import pytest

from protocol.avro_schemas import schema_json
from protocol.codec import decode_delta_in_key, decode_message, encode_message, write_ocf
from protocol.errors import MessageDecodeError
from protocol.messages import DeltaInKey, DeltaState, ReplicaState

WHEN = datetime(2026, 1, 1, tzinfo=UTC)
KEY = DeltaInKey(
    request_id="r",
    datamart="m",
    delta_num=1,
    delta_date=WHEN,
    subscription="s",
    table_name="t",
    stream_number=1,
    stream_total=1,
    chunk_number=1,
    is_last_chunk=True,
)


def written_with(name: str, field: str, kind: Any, record: dict[str, Any]) -> bytes:
    schema = json.loads(json.dumps(schema_json(name)))
    for entry in schema["fields"]:
        if entry["name"] == field:
            entry["type"] = kind
    return write_ocf(fastavro.parse_schema(schema), [record])


def test_a_key_whose_date_is_written_as_millis_is_refused_naming_the_field() -> None:
    millis = {"type": "long", "logicalType": "timestamp-millis"}
    data = written_with("DeltaInKey", "deltaDate", millis, KEY.to_avro_record())
    with pytest.raises(MessageDecodeError, match="deltaDate is written as timestamp-millis"):
        decode_delta_in_key(data)


def test_a_plain_long_is_read_as_the_contract_says_and_the_contracts_own_type_too() -> None:
    micros = int(WHEN.timestamp() * 1_000_000)
    record = dict(KEY.to_avro_record(), deltaDate=micros)
    assert decode_delta_in_key(written_with("DeltaInKey", "deltaDate", "long", record)) == KEY
    assert decode_delta_in_key(encode_message(KEY)) == KEY


def test_a_union_branch_with_another_logical_type_is_refused() -> None:
    state = DeltaState(
        request_id="q",
        datamart="m",
        state=ReplicaState.IDLE,
        delta_ok_num=0,
        delta_ok_date=WHEN,
        expected_delta_num=1,
    )
    millis = ["null", {"type": "long", "logicalType": "timestamp-millis"}]
    data = written_with("DeltaState", "deltaOkDate", millis, state.to_avro_record())
    with pytest.raises(MessageDecodeError, match="deltaOkDate is written as timestamp-millis"):
        decode_message(DeltaState, data)
    assert decode_message(DeltaState, encode_message(state)) == state
