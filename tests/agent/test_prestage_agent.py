"""Streams staged while their delta still arrives, in the agent process on real Tansu,
PostgreSQL and Spark: the origin sends its tables one after another and the tables complete
first are staged before the last chunk; a kill -9 after that, or a bad chunk in a later
stream, changes nothing the protocol promises."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable

import psycopg
import pytest

from protocol.apply_model import ReplicaModel, apply_delta
from protocol.errors import ErrorCode
from protocol.framing import Chunk
from protocol.messages import DeltaStatus
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from replica_store.store_sql import META_SCHEMA, q
from tests.agent.conftest import AgentProcess, agent_fixture
from tests.agent.kafka_io import Origin, chunks_of
from tests.agent.test_integration import outcome
from tests.loader.staging_helpers import assert_matches_model, delta_date, snapshot

pytestmark = pytest.mark.slow

# A short incomplete timeout: a transfer waiting for its last stream is answered
# INCOMPLETE_DELTA (an interim answer) after 6 s, and completes later all the same.
agent = agent_fixture(4, incomplete_timeout=6, extra_env={"PODD_PRESTAGE_MIN_KIB": "0"})


def split(chunks: list[Chunk]) -> tuple[list[Chunk], list[Chunk]]:
    """The chunks of every stream but the last, and the last stream's."""
    last = max(c.key.stream_number for c in chunks)
    return (
        [c for c in chunks if c.key.stream_number < last],
        [c for c in chunks if c.key.stream_number == last],
    )


def prestaged_tables(dsn: str, request_id: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            f"SELECT table_name FROM {q(META_SCHEMA)}.staged_stream WHERE request_id = %s",
            (request_id,),
        ).fetchall()
    return {str(r[0]) for r in rows}


def delta_zero(schema: LogicalSchema, seed: int) -> tuple[dict, list[Chunk]]:  # type: ignore[type-arg]
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=seed)).next_delta()
    return rows, chunks_of(schema, 0, rows, chunk_rows=40)


async def nothing(origin: Origin) -> None:
    return None


def early_then_late(
    agent: AgentProcess,
    chunks: list[Chunk],
    between: Callable[[Origin], Awaitable[None]] = nothing,
    parts: Callable[[list[Chunk]], tuple[list[Chunk], list[Chunk]]] = split,
) -> DeltaStatus:
    """The early chunks (`parts`: every stream but the last), then (once something is
    prestaged, and `between` ran) the late ones: the transfer's answer."""
    early, late = parts(chunks)
    rid = chunks[0].key.request_id

    async def run() -> DeltaStatus:
        async with Origin(agent.broker, agent.topics) as origin:
            await origin.send_chunks(early)
            await asyncio.to_thread(agent.wait_for_log, "prestaged", rid)
            await between(origin)
            await origin.send_chunks(late)
            return (await outcome(origin, rid, timeout=300)).status

    return asyncio.run(run())


def assert_applied(dsn: str, schema: LogicalSchema, rows: dict) -> None:  # type: ignore[type-arg]
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows)
    assert_matches_model(dsn, model)


def test_tables_sent_one_after_another_are_staged_before_the_last_chunk(
    agent: AgentProcess, replica_dsn: str
) -> None:
    schema = agent.take()
    rows, chunks = delta_zero(schema, 31)
    assert early_then_late(agent, chunks) is DeltaStatus.OK
    assert_applied(replica_dsn, schema, rows)
    early_tables = {c.key.table_name for c in split(chunks)[0]}
    assert prestaged_tables(replica_dsn, chunks[0].key.request_id) == early_tables
    assert opened_before(agent, chunks[0].key.request_id) == early_tables  # applied early


def opened_before(agent: AgentProcess, request_id: str) -> set[str]:
    """The tables the load found applied in the delta's open transaction."""
    for line in agent.log_text().splitlines():
        if request_id in line and '"opened_before"' in line:
            return set(json.loads(line)["opened_before"])
    return set()


def test_a_kill_after_prestaging_then_the_rest_applies_exactly(
    agent: AgentProcess, replica_dsn: str
) -> None:
    schema = agent.take()
    rows, chunks = delta_zero(schema, 32)
    rid = chunks[0].key.request_id

    async def kill_and_restart(origin: Origin) -> None:
        agent.kill()
        await asyncio.to_thread(agent.start)
        await asyncio.to_thread(agent.wait_for_log, "transfer recovered from staging", rid)

    assert early_then_late(agent, chunks, kill_and_restart) is DeltaStatus.OK
    assert_applied(replica_dsn, schema, rows)


def test_a_delta_answered_incomplete_after_prestaging_completes_with_its_prestaged_tables(
    agent: AgentProcess, replica_dsn: str
) -> None:
    schema = agent.take()
    rows, chunks = delta_zero(schema, 34)
    rid = chunks[0].key.request_id
    last = max(c.key.stream_number for c in chunks)

    async def incomplete(origin: Origin) -> None:
        answer = (await origin.results_of(rid, timeout=60))[0]
        assert answer.error_code == ErrorCode.INCOMPLETE_DELTA
        assert f"stream {last}" in (answer.error_message or "")

    assert early_then_late(agent, chunks, incomplete) is DeltaStatus.OK
    assert_applied(replica_dsn, schema, rows)
    early_tables = {c.key.table_name for c in split(chunks)[0]}
    assert prestaged_tables(replica_dsn, rid) == early_tables  # kept, and used


def test_a_bad_chunk_after_prestaged_tables_leaves_the_replica_unchanged(
    agent: AgentProcess, replica_dsn: str
) -> None:
    schema = agent.take()
    rows, chunks = delta_zero(schema, 33)
    early, late = split(chunks)
    rid = chunks[0].key.request_id
    late[-1] = dataclasses.replace(late[-1], body=b"not an avro container at all")
    before = snapshot(replica_dsn, schema)
    again = chunks_of(schema, 0, rows, chunk_rows=40)

    async def run() -> tuple[str | None, object, DeltaStatus]:
        async with Origin(agent.broker, agent.topics) as origin:
            await origin.send_chunks(early)
            await asyncio.to_thread(agent.wait_for_log, "prestaged", rid)
            await origin.send_chunks(late)
            refused = await outcome(origin, rid)
            after_refusal = await asyncio.to_thread(snapshot, replica_dsn, schema)
            await origin.send_chunks(again)  # the origin sends the delta anew
            return (
                refused.error_code,
                after_refusal,
                (await outcome(origin, again[0].key.request_id)).status,
            )

    code, after_refusal, status = asyncio.run(run())
    assert code == ErrorCode.BAD_CHUNK
    assert after_refusal == before
    assert status is DeltaStatus.OK
    assert_applied(replica_dsn, schema, rows)
