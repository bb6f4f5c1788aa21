"""The four protocol messages and the backup formats: schemas, round trips, bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TypeVar

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.forges.ocf import read_records
from protocol.avro_schemas import SCHEMA_NAMES, parsed_schema, schema_json
from protocol.backup import BackupKey, BackupMessageType, ChangelogRecord
from protocol.codec import (
    decode_delta_in_key,
    decode_message,
    encode_datamart_key,
    encode_delta_in_key,
    encode_message,
    write_ocf,
)
from protocol.errors import MessageDecodeError
from protocol.messages import (
    INT64_MAX,
    INT64_MIN,
    DeltaInKey,
    DeltaInResult,
    DeltaRequest,
    DeltaState,
    DeltaStatus,
    ReplicaState,
    TableResult,
    TransferProgress,
    WireModel,
    to_micros,
)
from tests.conftest import REPO
from tests.protocol.test_contract_docs import json_schemas

longs = st.integers(INT64_MIN, INT64_MAX)
texts = st.text(max_size=40)
stamps = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)
codecs = st.sampled_from(["null", "deflate"])
W = TypeVar("W", bound=WireModel)


def model(cls: type[W], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[W]:
    """Models built from field strategies (st.builds would also fill the aliases)."""
    return st.fixed_dictionaries(fields).map(lambda values: cls(**values))


def contract_schemas() -> dict[str, dict[str, Any]]:
    """The message schemas as `docs/contracts/PROTOCOL.md` writes them."""
    return json_schemas(REPO / "docs" / "contracts" / "PROTOCOL.md")


def test_every_shipped_schema_parses() -> None:
    for name in SCHEMA_NAMES:
        assert schema_json(name)["name"] == name


@given(
    model(
        DeltaInKey,
        request_id=texts,
        datamart=texts,
        delta_num=longs,
        delta_date=stamps,
        subscription=texts,
        table_name=texts,
        stream_number=longs,
        stream_total=longs,
        chunk_number=longs,
        is_last_chunk=st.booleans(),
    ),
    codecs,
)
def test_delta_in_key_round_trip(key: DeltaInKey, codec: Any) -> None:
    assert decode_delta_in_key(encode_delta_in_key(key, codec)) == key


table_results = model(
    TableResult, table_name=texts, rows_received=longs, rows_upserted=longs, rows_deleted=longs
)


@given(
    model(
        DeltaInResult,
        request_id=texts,
        datamart=texts,
        delta_num=longs,
        delta_date=stamps,
        status=st.sampled_from(DeltaStatus),
        error_code=st.none() | texts,
        error_message=st.none() | texts,
        tables=st.lists(table_results, max_size=4).map(tuple),
        applied_at=st.none() | stamps,
    ),
    codecs,
)
def test_delta_in_result_round_trip(result: DeltaInResult, codec: Any) -> None:
    assert decode_message(DeltaInResult, encode_message(result, codec)) == result


@given(model(DeltaRequest, request_id=texts, datamart=texts, sent_at=stamps), codecs)
def test_delta_request_round_trip(request: DeltaRequest, codec: Any) -> None:
    assert decode_message(DeltaRequest, encode_message(request, codec)) == request


progress = model(
    TransferProgress,
    request_id=texts,
    delta_num=longs,
    stream_total=longs,
    streams_complete=longs,
    chunks_received=longs,
    missing=st.lists(texts, max_size=3).map(tuple),
)


@given(
    model(
        DeltaState,
        request_id=texts,
        datamart=texts,
        state=st.sampled_from(ReplicaState),
        delta_ok_num=st.none() | longs,
        delta_ok_date=st.none() | stamps,
        expected_delta_num=longs,
        in_progress=st.lists(progress, max_size=3).map(tuple),
        error_code=st.none() | texts,
        error_message=st.none() | texts,
    ),
    codecs,
)
def test_delta_state_round_trip(state: DeltaState, codec: Any) -> None:
    assert decode_message(DeltaState, encode_message(state, codec)) == state


def test_a_key_written_by_another_writer_with_the_contract_schema() -> None:
    schema = fastavro.parse_schema(contract_schemas()["DeltaInKey"])
    record = {
        "requestId": "r-1",
        "datamart": "marketing",
        "deltaNum": 7,
        "deltaDate": 1_700_000_000_123_456,  # raw micros, as a JVM writer sends them
        "subscription": "SELECT * FROM marketing.sales",
        "tableName": "sales",
        "streamNumber": 1,
        "streamTotal": 3,
        "chunkNumber": 2,
        "isLastChunk": False,
    }
    key = decode_delta_in_key(write_ocf(schema, [record], "deflate"))
    assert key.delta_num == 7
    assert to_micros(key.delta_date) == 1_700_000_000_123_456
    assert key.delta_date.tzinfo is UTC
    assert (key.table_name, key.stream_total, key.chunk_number) == ("sales", 3, 2)


def test_a_writer_with_a_later_added_field_still_reads() -> None:
    schema = json.loads(json.dumps(schema_json("DeltaRequest")))
    schema["fields"].append({"name": "origin", "type": "string", "default": ""})
    data = write_ocf(
        fastavro.parse_schema(schema),
        [{"requestId": "q", "datamart": "m", "sentAt": 0, "origin": "podd-1"}],
    )
    request = decode_message(DeltaRequest, data)
    assert request.sent_at == datetime(1970, 1, 1, tzinfo=UTC)


def test_naive_timestamps_are_taken_as_utc() -> None:
    naive = DeltaRequest(request_id="q", datamart="m", sent_at=datetime(2024, 5, 6, 7, 8, 9))
    assert naive.sent_at == datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    moscow = timezone(timedelta(hours=3))
    aware = DeltaRequest(
        request_id="q", datamart="m", sent_at=datetime(2024, 5, 6, 10, 8, 9, tzinfo=moscow)
    )
    assert decode_message(DeltaRequest, encode_message(aware)).sent_at == naive.sent_at
    assert aware.sent_at.tzinfo is UTC


def test_models_are_frozen() -> None:
    request = DeltaRequest(request_id="q", datamart="m", sent_at=datetime.now(UTC))
    with pytest.raises(ValueError, match="frozen"):
        request.datamart = "other"  # type: ignore[misc]


def _valid_request() -> bytes:
    return encode_message(DeltaRequest(request_id="q", datamart="m", sent_at=datetime.now(UTC)))


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("empty", b""),
        ("none", None),
        ("bad magic", b"Obj\x02" + _valid_request()[4:]),
        ("truncated", _valid_request()[:-20]),
        ("header only", _valid_request()[:40]),
        ("garbage", b"\x00\x01\x02not avro at all"),
        ("no records", write_ocf(fastavro.parse_schema(schema_json("DeltaRequest")), [])),
        (
            "two records",
            write_ocf(
                fastavro.parse_schema(schema_json("DeltaRequest")),
                [{"requestId": "a", "datamart": "m", "sentAt": 0}] * 2,
            ),
        ),
        (
            "another message",
            encode_message(ChangelogRecord(change_num=1, entity_name="t", change_query="q")),
        ),
    ],
)
def test_undecodable_control_messages_raise_a_typed_error(name: str, data: bytes | None) -> None:
    with pytest.raises(MessageDecodeError):
        decode_message(DeltaRequest, data)


def test_a_key_of_another_schema_is_not_a_delta_in_key() -> None:
    with pytest.raises(MessageDecodeError, match="DeltaInKey"):
        decode_delta_in_key(_valid_request())


def test_values_outside_avro_long_are_refused_by_the_model() -> None:
    with pytest.raises(ValueError, match="less than or equal"):
        TableResult(table_name="t", rows_received=INT64_MAX + 1, rows_upserted=0, rows_deleted=0)


def test_datamart_key_is_utf8() -> None:
    assert encode_datamart_key("маркетинг") == "маркетинг".encode()


@given(
    model(
        BackupKey,
        increment_id=texts,
        message_type=st.sampled_from(BackupMessageType),
        datamart=texts,
        delta_num=longs,
        delta_date=stamps,
        table_name=st.none() | texts,
        stream_number=longs,
        stream_total=longs,
        chunk_number=longs,
        is_last_chunk=st.booleans(),
    ),
    codecs,
)
def test_backup_key_round_trip(key: BackupKey, codec: Any) -> None:
    assert decode_message(BackupKey, encode_message(key, codec)) == key


def test_backup_changelog_record_reads_from_an_ocf_of_many() -> None:
    changes = [
        ChangelogRecord(
            change_num=n, entity_name=f"t{n}", change_query=f"CREATE TABLE m.t{n} (...)"
        )
        for n in range(3)
    ]
    data = write_ocf(parsed_schema("ChangelogRecord"), [c.to_avro_record() for c in changes])
    read = [ChangelogRecord.from_avro_record(r) for r in read_records(data)]
    assert read == changes
    assert decode_message(ChangelogRecord, encode_message(changes[0])) == changes[0]
