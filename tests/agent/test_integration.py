"""The agent on real parts: Tansu, PostgreSQL, Spark; raw Kafka messages in, answers out.

One agent process serves this module; every test takes a datamart of its own from it, so
each test starts from an empty replica and its own delta sequence.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid

import psycopg
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from origin.client import OriginClient
from protocol.apply_model import DeltaRow, ReplicaModel, apply_delta
from protocol.body_writer import encode_body
from protocol.errors import ErrorCode
from protocol.framing import Chunk
from protocol.messages import DeltaInResult, DeltaStatus, ReplicaState
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from tests.agent.conftest import AgentProcess, agent_fixture
from tests.agent.kafka_io import Origin, chunks_of
from tests.loader.staging_helpers import assert_matches_model, delta_date, snapshot

pytestmark = pytest.mark.slow

DATAMARTS = 12


agent = agent_fixture(DATAMARTS, incomplete_timeout=6)


@pytest.fixture
def schema(agent: AgentProcess) -> LogicalSchema:
    return agent.take()


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def final(results: list[DeltaInResult]) -> list[DeltaInResult]:
    """Answers other than the interim INCOMPLETE_DELTA."""
    return [r for r in results if r.error_code != ErrorCode.INCOMPLETE_DELTA]


async def outcome(origin: OriginClient, request_id: str, timeout: float = 180) -> DeltaInResult:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        found = final(origin.results.get(request_id, []))
        if found:
            return found[0]
        await asyncio.sleep(0.1)
    raise TimeoutError(f"no outcome for {request_id}")


def test_several_deltas_chunks_twice_shuffled_interleaved_with_empty_tables(
    agent: AgentProcess, schema: LogicalSchema, replica_dsn: str
) -> None:
    spec = WorkloadSpec(rows_per_delta=40, seed=5)
    workload = Workload(schema, spec)
    model = ReplicaModel(schema)
    rng = random.Random(7)

    async def scenario() -> None:
        nonlocal model
        async with Origin(agent.broker, agent.topics) as origin:
            for n in range(4):
                rows = workload.next_delta()
                if n == 2:  # one table without changes: a single empty last chunk
                    rows = {name: r for name, r in rows.items() if name != schema.tables[0].name}
                chunks = chunks_of(schema, n, rows, chunk_rows=4)
                await origin.send_chunks(chunks, shuffle=rng, twice=True)
                result = await outcome(origin, chunks[0].key.request_id)
                assert result.status is DeltaStatus.OK, result
                model, counts = apply_delta(model, n, delta_date(n), rows)
                assert result.delta_num == n
                assert result.delta_date == delta_date(n)
                assert [
                    (t.table_name, t.rows_received, t.rows_upserted, t.rows_deleted)
                    for t in result.tables
                ] == [
                    (c.table_name, c.rows_received, c.rows_upserted, c.rows_deleted) for c in counts
                ]
            state = await origin.ask(schema.datamart)
            assert state.state is ReplicaState.IDLE
            assert (state.delta_ok_num, state.expected_delta_num) == (3, 4)
            assert state.delta_ok_date == delta_date(3)

    run(scenario())
    assert_matches_model(replica_dsn, model)
    metrics = agent.metrics()
    assert f'podd_current_delta{{datamart="{schema.datamart}"}} 3.0' in metrics


def test_a_quiet_agent_fetches_with_the_long_wait_and_a_delta_still_arrives(
    agent: AgentProcess, schema: LogicalSchema
) -> None:
    """Idle, the agent polls the broker with the idle wait (200 ms by default), not every
    20 ms; the chunks of a delta sent then are still received and applied."""

    def wait_ms() -> float | None:
        for line in agent.metrics().splitlines():
            if line.startswith("podd_fetch_wait_ms "):
                return float(line.split()[1])
        return None

    deadline = time.monotonic() + 60
    while wait_ms() != 200.0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert wait_ms() == 200.0

    async def scenario() -> DeltaInResult:
        async with Origin(agent.broker, agent.topics) as origin:
            chunks = chunks_of(schema, 0, _first_delta(schema), chunk_rows=10)
            await origin.send_chunks(chunks)
            return await outcome(origin, chunks[0].key.request_id)

    result = run(scenario())
    assert isinstance(result, DeltaInResult)
    assert result.error_code is None, result


def _first_delta(schema: LogicalSchema) -> dict[str, list[DeltaRow]]:
    return Workload(schema, WorkloadSpec(rows_per_delta=30, seed=3)).next_delta()


def _sent(chunk: Chunk, **changes: object) -> Chunk:
    return Chunk(chunk.key.model_copy(update=changes), chunk.body, chunk.rows)


async def _apply_first(origin: Origin, schema: LogicalSchema) -> DeltaInResult:
    chunks = chunks_of(schema, 0, _first_delta(schema), chunk_rows=7)
    await origin.send_chunks(chunks)
    result = await outcome(origin, chunks[0].key.request_id)
    assert result.status is DeltaStatus.OK, result
    return result


def _bad_transfers(schema: LogicalSchema) -> list[tuple[ErrorCode, list[Chunk]]]:
    """For delta 1 of a replica holding delta 0: one broken transfer per error code."""
    rows = Workload(schema, WorkloadSpec(rows_per_delta=30, seed=9)).next_delta()

    def good(**kw: object) -> list[Chunk]:
        return chunks_of(schema, 1, rows, chunk_rows=7, **kw)  # type: ignore[arg-type]

    sales = schema.tables[0]
    null_product = [(1, 0, None, 1, 1, None, 0)]  # product_code is NOT NULL
    cases: list[tuple[ErrorCode, list[Chunk]]] = []
    chunks = good()
    cases.append((ErrorCode.UNKNOWN_DATAMART, [_sent(c, datamart="not_served") for c in chunks]))
    cases.append((ErrorCode.OUT_OF_SEQUENCE, [_sent(c, delta_num=5) for c in good()]))
    cases.append((ErrorCode.DELTA_CONFLICT, good(date=delta_date(0))))
    chunks = good()
    cases.append((ErrorCode.BAD_CHUNK, [*chunks[:-1], _sent(chunks[-1], stream_number=9)]))
    chunks = good()
    cases.append((ErrorCode.BAD_CHUNK, [*chunks[:-1], Chunk(chunks[-1].key, b"junk", 0)]))
    chunks = good()
    cases.append((ErrorCode.UNKNOWN_TABLE, [_sent(chunks[0], table_name="nope"), *chunks[1:]]))
    chunks = good()
    other = schema.tables[1]
    wrong = encode_body(other, [])  # a stores-shaped body in the sales stream
    cases.append((ErrorCode.SCHEMA_MISMATCH, [Chunk(chunks[0].key, wrong + b"", 0), *chunks[1:]]))
    chunks = good()
    first_sales = next(c for c in chunks if c.key.table_name == sales.name)
    body = encode_body(sales, null_product)
    cases.append(
        (
            ErrorCode.SCHEMA_MISMATCH,
            [Chunk(c.key, body, 1) if c is first_sales else c for c in chunks],
        )
    )
    return cases


def test_every_rejection_is_answered_and_leaves_the_replica_unchanged(
    agent: AgentProcess, schema: LogicalSchema, replica_dsn: str
) -> None:
    async def scenario() -> None:
        async with Origin(agent.broker, agent.topics) as origin:
            await _apply_first(origin, schema)
            before = snapshot(replica_dsn, schema)
            for code, chunks in _bad_transfers(schema):
                await origin.send_chunks(chunks)
                result = await outcome(origin, chunks[0].key.request_id)
                assert (result.status, result.error_code) == (DeltaStatus.ERROR, code.value), (
                    code,
                    result,
                )
                assert result.error_message
                assert snapshot(replica_dsn, schema) == before, code
            # The replica still takes delta 1.
            rows = Workload(schema, WorkloadSpec(rows_per_delta=30, seed=9)).next_delta()
            chunks = chunks_of(schema, 1, rows)
            await origin.send_chunks(chunks)
            assert (await outcome(origin, chunks[0].key.request_id)).status is DeltaStatus.OK

    run(scenario())
    assert f'code="SCHEMA_MISMATCH",datamart="{schema.datamart}"' in agent.metrics()


def test_a_chunk_whose_key_cannot_be_decoded_is_counted_and_skipped(
    agent: AgentProcess, schema: LogicalSchema
) -> None:
    async def scenario() -> None:
        async with Origin(agent.broker, agent.topics) as origin:
            await origin.send_raw(b"not an avro key", b"")
            await _apply_first(origin, schema)

    run(scenario())
    assert 'podd_undecodable_messages_total{topic="delta.in"}' in agent.metrics()


def test_a_resent_applied_delta_is_answered_with_its_stored_result(
    agent: AgentProcess, schema: LogicalSchema, replica_dsn: str
) -> None:
    async def scenario() -> None:
        async with Origin(agent.broker, agent.topics) as origin:
            first = await _apply_first(origin, schema)
            before = snapshot(replica_dsn, schema)
            again = chunks_of(schema, 0, _first_delta(schema), chunk_rows=11)  # other chunking
            await origin.send_chunks(again)
            second = await outcome(origin, again[0].key.request_id)
            assert second.model_copy(update={"request_id": first.request_id}) == first
            assert snapshot(replica_dsn, schema) == before

    run(scenario())


def test_an_incomplete_transfer_is_reported_then_completed_by_its_missing_chunks(
    agent: AgentProcess, schema: LogicalSchema, replica_dsn: str
) -> None:
    chunks = chunks_of(schema, 0, _first_delta(schema), chunk_rows=2)
    assert sum(c.key.stream_number == 1 for c in chunks) >= 4
    held = [c for c in chunks if c.key.stream_number == 1 and c.key.chunk_number in (2, 3)]
    assert len(held) == 2

    async def scenario() -> None:
        async with Origin(agent.broker, agent.topics) as origin:
            rid = chunks[0].key.request_id
            await origin.send_chunks([c for c in chunks if c not in held])
            (report,) = await origin.results_of(rid, 1, timeout=60)
            assert report.error_code == ErrorCode.INCOMPLETE_DELTA.value
            assert report.error_message == "missing: stream 1 chunks 2-3"
            state = await origin.ask(schema.datamart)
            assert state.state is ReplicaState.RECEIVING
            assert [p.missing for p in state.in_progress] == [("stream 1 chunks 2-3",)]
            await origin.send_chunks(held)
            result = await outcome(origin, rid)
            assert result.status is DeltaStatus.OK

    run(scenario())
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), _first_delta(schema))
    assert_matches_model(replica_dsn, model)


def test_delta_rq_is_answered_during_a_load(agent: AgentProcess, schema: LogicalSchema) -> None:
    rows = Workload(schema, WorkloadSpec(rows_per_delta=200_000, seed=1)).next_delta()
    chunks = chunks_of(schema, 0, rows, chunk_rows=5000)

    async def scenario() -> None:
        async with Origin(agent.broker, agent.topics) as origin:
            await origin.send_chunks(chunks)
            seen = set()
            rid = chunks[0].key.request_id
            while not final(origin.results.get(rid, [])):
                seen.add((await origin.ask(schema.datamart, timeout=30)).state)
            assert ReplicaState.LOADING in seen
            assert (await outcome(origin, rid)).status is DeltaStatus.OK
            assert (await origin.ask(schema.datamart)).state is ReplicaState.IDLE

    run(scenario())


def test_a_datamart_not_served_is_answered_failed(agent: AgentProcess) -> None:
    async def scenario() -> None:
        async with Origin(agent.broker, agent.topics) as origin:
            state = await origin.ask(f"nope_{uuid.uuid4().hex[:6]}")
            assert state.state is ReplicaState.FAILED
            assert state.error_code == ErrorCode.UNKNOWN_DATAMART.value

    run(scenario())


def test_a_store_that_refuses_the_load_is_load_failed_then_recovers(
    agent: AgentProcess, schema: LogicalSchema, replica_dsn: str
) -> None:
    table = f'"{schema.datamart}"."sales_actual"'

    async def scenario() -> None:
        async with Origin(agent.broker, agent.topics) as origin:
            await _apply_first(origin, schema)
            before = snapshot(replica_dsn, schema)
            rows = Workload(schema, WorkloadSpec(rows_per_delta=30, seed=9)).next_delta()
            with psycopg.connect(replica_dsn, autocommit=True) as conn:
                conn.execute(f"ALTER TABLE {table} RENAME TO sales_away")
            try:
                chunks = chunks_of(schema, 1, rows)
                await origin.send_chunks(chunks)
                result = await outcome(origin, chunks[0].key.request_id)
                assert result.error_code == ErrorCode.LOAD_FAILED.value, result
                state = await origin.ask(schema.datamart)
                assert (state.state, state.error_code) == (ReplicaState.FAILED, "LOAD_FAILED")
            finally:
                with psycopg.connect(replica_dsn, autocommit=True) as conn:
                    conn.execute(
                        f'ALTER TABLE "{schema.datamart}".sales_away RENAME TO sales_actual'
                    )
            assert snapshot(replica_dsn, schema) == before
            chunks = chunks_of(schema, 1, rows)
            await origin.send_chunks(chunks)
            assert (await outcome(origin, chunks[0].key.request_id)).status is DeltaStatus.OK
            assert (await origin.ask(schema.datamart)).state is ReplicaState.IDLE

    run(scenario())


def test_the_agent_creates_no_topic_of_its_own(agent: AgentProcess) -> None:
    """On a Kafka with ACLs the agent may only read and write the protocol's topics
    (docs/operator/security.md): Faust's leader-election topic would need Create."""

    async def topics() -> list[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=agent.broker.removeprefix("kafka://"))
        await admin.start()
        try:
            return list(await admin.list_topics())
        finally:
            await admin.close()

    found = run(topics())
    assert isinstance(found, list)
    assert agent.topics.delta_in in found  # the agent's own broker, seen
    assert not [t for t in found if t.startswith(agent.group_id)], found
