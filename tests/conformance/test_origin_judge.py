"""The origin judge's rules, one by one, on chunks framed by the protocol's own framer
(pure: no broker). Each test breaks one rule and expects exactly that rule named."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import fastavro
import pytest

from conformance.origins.judge import OriginJudge
from conformance.origins.seen import Where
from protocol.apply_model import DeltaRow
from protocol.avro_schemas import schema_json
from protocol.codec import encode_delta_in_key, write_ocf
from protocol.errors import ErrorCode
from protocol.framing import Chunk, frame_delta
from protocol.gaps import Gap
from protocol.messages import DeltaInResult, DeltaStatus
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec

DAY = datetime(2026, 1, 1, tzinfo=UTC)


def delta(schema: LogicalSchema, number: int, request_id: str | None = None) -> list[Chunk]:
    rows: dict[str, list[DeltaRow]] = Workload(
        schema, WorkloadSpec(rows_per_delta=12, seed=number)
    ).next_delta()
    return list(
        frame_delta(
            schema,
            request_id=request_id or f"r{number}",
            delta_num=number,
            delta_date=DAY + timedelta(hours=number),
            rows_by_table=rows,
            chunk_rows=2,
        )
    )


def feed(judge: OriginJudge, chunks: list[Chunk]) -> None:
    for offset, chunk in enumerate(chunks):
        transfer = judge.chunk(encode_delta_in_key(chunk.key), chunk.body, Where("in", 0, offset))
        if transfer is not None and not transfer.completed and transfer.complete():
            judge.completed(transfer)


def ok(judge: OriginJudge, request_id: str) -> None:
    transfer = judge.transfers[request_id]
    key = transfer.key
    judge.answered(
        transfer,
        DeltaInResult(
            request_id=request_id,
            datamart=key.datamart,
            delta_num=key.delta_num,
            delta_date=key.delta_date,
            status=DeltaStatus.OK,
        ),
    )


def rules(judge: OriginJudge) -> list[str]:
    return [v.rule for v in judge.finish()]


@pytest.fixture
def judge(marketing: LogicalSchema) -> OriginJudge:
    judge = OriginJudge(marketing, 0)
    judge.state_asked()
    return judge


def test_a_correct_origin_breaks_no_rule(judge: OriginJudge, marketing: LogicalSchema) -> None:
    for number in range(3):
        feed(judge, delta(marketing, number))
        ok(judge, f"r{number}")
    assert rules(judge) == []
    assert judge.expected == 3


def test_a_skipped_chunk_number(judge: OriginJudge, marketing: LogicalSchema) -> None:
    chunks = [c for c in delta(marketing, 0) if (c.key.stream_number, c.key.chunk_number) != (1, 1)]
    feed(judge, chunks)
    assert rules(judge) == ["chunk-numbering"]


def test_an_empty_stream_left_out(judge: OriginJudge, marketing: LogicalSchema) -> None:
    chunks = [c for c in delta(marketing, 0) if c.key.stream_number != 3]
    feed(judge, chunks)
    assert rules(judge) == ["empty-stream"]


def test_a_second_last_chunk(judge: OriginJudge, marketing: LogicalSchema) -> None:
    chunks = delta(marketing, 0)
    extra = next(c for c in chunks if c.key.stream_number == 1)
    bad = replace(
        extra, key=extra.key.model_copy(update={"chunk_number": 99, "is_last_chunk": True})
    )
    feed(judge, [*chunks[:-1], bad, chunks[-1]])
    assert rules(judge)[0] == "last-chunk"


def test_a_delta_before_the_previous_answer(judge: OriginJudge, marketing: LogicalSchema) -> None:
    feed(judge, delta(marketing, 0))
    feed(judge, delta(marketing, 1))
    assert rules(judge)[0] == "wait-answer"


def test_asking_state_after_a_lost_answer_allows_the_next(
    judge: OriginJudge, marketing: LogicalSchema
) -> None:
    feed(judge, delta(marketing, 0))
    judge.applied(0, DAY)  # the replica applied it; its answer was lost
    judge.state_asked()
    feed(judge, delta(marketing, 1))
    assert rules(judge) == []


def test_a_reused_request_id(judge: OriginJudge, marketing: LogicalSchema) -> None:
    feed(judge, delta(marketing, 0, "same"))
    ok(judge, "same")
    feed(judge, delta(marketing, 1, "same"))
    assert rules(judge)[0] == "request-id"


def test_a_date_not_increasing(judge: OriginJudge, marketing: LogicalSchema) -> None:
    feed(judge, delta(marketing, 0))
    ok(judge, "r0")
    chunks = [
        replace(c, key=c.key.model_copy(update={"delta_date": DAY})) for c in delta(marketing, 1)
    ]
    feed(judge, chunks)
    assert rules(judge) == ["date-order"]


def test_resending_more_than_the_gap(judge: OriginJudge, marketing: LogicalSchema) -> None:
    chunks = delta(marketing, 0)
    feed(judge, chunks)
    judge.pretend_lost(judge.transfers["r0"], [Gap(2, 1, 1)])
    feed(judge, chunks)  # everything again: only stream 2 chunk 1 was asked for
    assert rules(judge)[0] == "resend-exact"
    assert judge.transfers["r0"].completed  # the named chunk came: complete again


def test_resending_exactly_the_gap(judge: OriginJudge, marketing: LogicalSchema) -> None:
    chunks = delta(marketing, 0)
    feed(judge, chunks)
    judge.pretend_lost(judge.transfers["r0"], [Gap(2, 1, 1)])
    feed(judge, [c for c in chunks if (c.key.stream_number, c.key.chunk_number) == (2, 1)])
    assert rules(judge) == []
    assert judge.transfers["r0"].completed


def test_a_resent_delta_with_other_rows(judge: OriginJudge, marketing: LogicalSchema) -> None:
    feed(judge, delta(marketing, 0))
    del judge.transfers["r0"]  # the replica lost it
    judge.state_asked()
    other = delta(marketing, 1, "again")
    feed(
        judge,
        [
            replace(c, key=c.key.model_copy(update={"delta_num": 0, "delta_date": DAY}))
            for c in other
        ],
    )
    assert "resend-content" in rules(judge)


def test_sending_after_a_stop_code(judge: OriginJudge, marketing: LogicalSchema) -> None:
    feed(judge, delta(marketing, 0))
    transfer = judge.transfers["r0"]
    judge.answered(
        transfer,
        DeltaInResult(
            request_id="r0",
            datamart=marketing.datamart,
            delta_num=0,
            delta_date=DAY,
            status=DeltaStatus.ERROR,
            error_code=ErrorCode.BAD_CHUNK.value,
        ),
    )
    feed(judge, delta(marketing, 1))
    assert rules(judge)[0] == "error-stop"


def test_an_undecodable_body_and_key(judge: OriginJudge, marketing: LogicalSchema) -> None:
    chunk = delta(marketing, 0)[0]
    judge.chunk(encode_delta_in_key(chunk.key), b"Obj\x01garbage", Where("in", 0, 1))
    judge.chunk(b"not a key", chunk.body, Where("in", 0, 2))
    assert [v.rule for v in judge.violations] == ["body", "key"]
    assert str(judge.violations[1].where) == "in[0]@2"


def test_a_delta_before_asking_state(marketing: LogicalSchema) -> None:
    judge = OriginJudge(marketing, 0)
    feed(judge, delta(marketing, 0))
    assert rules(judge) == ["state-first"]


def test_a_key_with_another_logical_type_than_the_contracts(
    judge: OriginJudge, marketing: LogicalSchema
) -> None:
    """Its deltaDate decoded "right" with the writer's own timestamp-millis, while a reader
    of the contract's timestamp-micros reads 1970: the judge passed it."""
    chunk = delta(marketing, 0)[0]
    schema = json.loads(json.dumps(schema_json("DeltaInKey")))
    for field in schema["fields"]:
        if field["name"] == "deltaDate":
            field["type"] = {"type": "long", "logicalType": "timestamp-millis"}
    key = write_ocf(fastavro.parse_schema(schema), [chunk.key.to_avro_record()])
    assert judge.chunk(key, chunk.body, Where("in", 0, 0)) is None
    assert [v.rule for v in judge.violations] == ["key"]
    assert "timestamp-millis" in judge.violations[0].message


def test_a_delta_rq_without_its_key(judge: OriginJudge, marketing: LogicalSchema) -> None:
    judge.request_key(marketing.datamart.encode(), marketing.datamart, Where("rq", 0, 0))
    assert judge.violations == []
    judge.request_key(None, marketing.datamart, Where("rq", 0, 1))
    judge.request_key(b"other", marketing.datamart, Where("rq", 0, 2))
    assert [v.rule for v in judge.violations] == ["key", "key"]
    assert "no key" in judge.violations[0].message


def test_a_first_delta_dated_before_the_replicas_last(marketing: LogicalSchema) -> None:
    """A replica at delta N reports its last date; the judge started with none, so a next
    delta dated 1970 passed (PROTOCOL.md: DELTA_CONFLICT)."""
    judge = OriginJudge(marketing, 3, last_date=DAY + timedelta(days=30))
    judge.state_asked()
    feed(judge, delta(marketing, 3))  # dated DAY + 3 h: before the replica's last delta
    assert rules(judge) == ["date-order"]


def test_a_missing_chunk_encoded_anew_is_the_same_chunk(
    judge: OriginJudge, marketing: LogicalSchema
) -> None:
    """Same rows, a new sync marker (an Avro writer draws one each time): the judge said
    "resent with other bytes" and failed a correct origin."""
    chunks = delta(marketing, 0)
    feed(judge, chunks)
    judge.pretend_lost(judge.transfers["r0"], [Gap(2, 1, 1)])
    again = [c for c in delta(marketing, 0) if (c.key.stream_number, c.key.chunk_number) == (2, 1)]
    original = next(c for c in chunks if (c.key.stream_number, c.key.chunk_number) == (2, 1))
    assert again[0].body != original.body  # encoded anew
    feed(judge, again)
    assert rules(judge) == []
    assert judge.transfers["r0"].completed


def test_a_missing_chunk_with_other_rows(judge: OriginJudge, marketing: LogicalSchema) -> None:
    chunks = delta(marketing, 0)
    feed(judge, chunks)
    judge.pretend_lost(judge.transfers["r0"], [Gap(1, 1, 1)])
    other = next(c for c in delta(marketing, 5) if c.key.stream_number == 1)
    forged = replace(other, key=chunks[0].key)
    feed(judge, [forged])
    assert "resend-content" in rules(judge)


def refuse(judge: OriginJudge, request_id: str, code: ErrorCode, at_ms: int | None) -> None:
    key = judge.transfers[request_id].key
    result = DeltaInResult(
        request_id=request_id,
        datamart=key.datamart,
        delta_num=key.delta_num,
        delta_date=key.delta_date,
        status=DeltaStatus.ERROR,
        error_code=code.value,
    )
    judge.answered(judge.transfers[request_id], result, at_ms)


def test_a_copy_produced_before_the_answer_is_no_reaction_to_it(
    judge: OriginJudge, marketing: LogicalSchema
) -> None:
    """Every chunk produced twice (a producer's retry) failed four scenarios: the harness
    answered the moment the transfer was complete, then judged a copy produced before it
    (and read after it) as the origin's reaction."""
    chunks = delta(marketing, 0)
    feed(judge, chunks)
    refuse(judge, "r0", ErrorCode.LOAD_FAILED, at_ms=2_000)
    copy = encode_delta_in_key(chunks[-1].key)
    judge.chunk(copy, chunks[-1].body, Where("in", 0, 99, produced_ms=1_000))
    assert rules(judge) == []


def test_a_resend_after_load_failed_under_the_same_request_id(
    judge: OriginJudge, marketing: LogicalSchema
) -> None:
    """The contract: a resend uses a new requestId; a replica drops chunks of a finished
    transfer. The judge took it for Kafka's duplicates."""
    chunks = delta(marketing, 0)
    feed(judge, chunks)
    refuse(judge, "r0", ErrorCode.LOAD_FAILED, at_ms=2_000)
    resent = Where("in", 0, 99, produced_ms=3_000)
    judge.chunk(encode_delta_in_key(chunks[0].key), chunks[0].body, resent)
    assert rules(judge) == ["request-id"]


def test_the_whole_delta_again_under_a_new_request_id_after_incomplete(
    judge: OriginJudge, marketing: LogicalSchema
) -> None:
    """The contract lets the origin send just the missing chunks; it may also send the
    delta whole under a new requestId. The judge said a chunk the replica dropped "never
    came"."""
    feed(judge, delta(marketing, 0))
    judge.pretend_lost(judge.transfers["r0"], [Gap(1, 1, 1)])
    feed(judge, delta(marketing, 0, "again"))
    assert rules(judge) == []
    assert judge.transfers["again"].completed
