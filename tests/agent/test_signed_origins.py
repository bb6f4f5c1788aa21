"""Origins proven by a shared key: real Tansu, PostgreSQL and Spark, the agent a process.

Anyone who could write `delta.in` owned the replica: a message for the expected delta with
rows of their own, dated 9999-12-31, was applied, and every real delta after it was a
DELTA_CONFLICT. With `PODD_ORIGIN_KEY`, the agent reads only messages signed with it, and
the origin only answers signed with it; a delta dated beyond the clock skew is refused."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from origin.client import OriginClient
from protocol.apply_model import ReplicaModel, apply_delta
from protocol.codec import encode_datamart_key, encode_message
from protocol.errors import ErrorCode
from protocol.messages import DeltaInResult, DeltaStatus
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from tests.agent.conftest import AgentProcess, agent_fixture
from tests.agent.kafka_io import chunks_of
from tests.agent.test_hostile import metric
from tests.agent.test_integration import outcome
from tests.loader.staging_helpers import assert_matches_model, delta_date

KEY = "test-origin-key-7f3a9c2e41d8"
agent = agent_fixture(2, incomplete_timeout=600, extra_env={"PODD_ORIGIN_KEY": KEY})


def client(agent: AgentProcess, key: str | None) -> OriginClient:
    settings = agent.topics.settings(agent.broker)
    if key is not None:
        settings = settings.model_copy(update={"origin_key": SecretStr(key)})
    return OriginClient(settings, [agent.broker])


def wait_metric(agent: AgentProcess, name: str, at_least: float, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while metric(agent, name) < at_least:
        assert time.monotonic() < deadline, f"{name} stayed below {at_least}"
        time.sleep(0.2)


def rows_of(schema: LogicalSchema, seed: int) -> dict[str, list]:  # type: ignore[type-arg]
    return Workload(schema, WorkloadSpec(rows_per_delta=40, seed=seed)).next_delta()


def test_unsigned_and_wrongly_signed_messages_are_dropped_and_signed_ones_apply(
    agent: AgentProcess, replica_dsn: str
) -> None:
    schema = agent.take()
    forged_rows = rows_of(schema, 99)
    doomsday = datetime(9999, 12, 31, tzinfo=UTC)
    before = metric(agent, "podd_unsigned_messages_total")

    async def scenario() -> tuple[list[DeltaInResult], DeltaInResult]:
        sent = 0
        for key in (None, "a-wrong-key-of-enough-length"):
            async with client(agent, key) as forger:
                forged = chunks_of(schema, 0, forged_rows, chunk_rows=9, date=doomsday)
                sent += await forger.send_chunks(forged)
                await forger.request_state(schema.datamart)  # unsigned delta.rq: unanswered
                sent += 1
        await asyncio.to_thread(wait_metric, agent, "podd_unsigned_messages_total", before + sent)
        async with client(agent, KEY) as origin:
            state = await origin.ask(schema.datamart, timeout=60)  # signed: answered
            assert state is not None
            assert state.expected_delta_num == 0  # nothing forged was applied
            chunks = chunks_of(schema, 0, rows_of(schema, 1), chunk_rows=9)
            await origin.send_chunks(chunks)
            result = await outcome(origin, chunks[0].key.request_id)
            return [r for rs in origin.results.values() for r in rs], result

    answers, result = asyncio.run(scenario())
    assert result.status is DeltaStatus.OK
    assert [a.request_id for a in answers] == [result.request_id]  # no forgery was answered
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows_of(schema, 1))
    assert_matches_model(replica_dsn, model)


def test_a_signed_delta_dated_beyond_the_skew_is_refused_and_a_forged_answer_ignored(
    agent: AgentProcess, replica_dsn: str
) -> None:
    schema = agent.take()

    async def scenario() -> tuple[DeltaInResult, int]:
        async with client(agent, KEY) as origin:
            far = chunks_of(
                schema, 0, rows_of(schema, 2), chunk_rows=9, date=datetime(9999, 12, 31, tzinfo=UTC)
            )
            await origin.send_chunks(far)
            refused = await outcome(origin, far[0].key.request_id)
            # Someone answers the next transfer OK, unsigned, before the agent does.
            chunks = chunks_of(schema, 0, rows_of(schema, 3), chunk_rows=9)
            fake = DeltaInResult(
                request_id=chunks[0].key.request_id,
                datamart=schema.datamart,
                delta_num=0,
                delta_date=delta_date(0),
                status=DeltaStatus.OK,
            )
            async with client(agent, None) as forger:
                await forger.producer.send_and_wait(
                    agent.topics.delta_in_rs,
                    key=encode_datamart_key(schema.datamart),
                    value=encode_message(fake),
                )
            await origin.send_chunks(chunks)
            result = await outcome(origin, chunks[0].key.request_id)
            assert result.tables, "the forged OK (no tables) was taken for the agent's"
            assert result.status is DeltaStatus.OK
            return refused, origin.unsigned

    refused, unsigned = asyncio.run(scenario())
    assert refused.status is DeltaStatus.ERROR
    assert refused.error_code == ErrorCode.BAD_CHUNK
    assert "ahead of this replica's clock" in (refused.error_message or "")
    assert unsigned >= 1
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows_of(schema, 3))
    assert_matches_model(replica_dsn, model)


def test_a_key_too_short_to_be_a_secret_is_refused() -> None:
    from podd_kafka.settings import KafkaSettings  # noqa: PLC0415

    with pytest.raises(ValueError, match="at least 16"):
        KafkaSettings(origin_key="short")
