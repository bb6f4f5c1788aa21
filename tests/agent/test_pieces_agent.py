"""Streams sent interleaved (chunk 1 of every stream, then chunk 2, …), in the agent process
on real Tansu, PostgreSQL and Spark: no stream is complete before the last chunks, and the
agent prestages and applies them in pieces meanwhile (`replica_store.pieces`). The delta ends
as the model says; a kill -9, a bad last chunk or an interim INCOMPLETE_DELTA after pieces
were applied changes nothing the protocol promises."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable

import pytest

from protocol.apply_model import DeltaRow, ReplicaModel, apply_delta
from protocol.errors import ErrorCode
from protocol.framing import Chunk
from protocol.messages import DeltaStatus
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from tests.agent.conftest import AgentProcess, agent_fixture
from tests.agent.kafka_io import Origin, chunks_of
from tests.agent.test_integration import outcome
from tests.agent.test_prestage_agent import early_then_late, nothing
from tests.loader.staging_helpers import assert_matches_model, delta_date, snapshot

pytestmark = pytest.mark.slow

# Pieces of about 1 KiB decoded: every few chunks of a stream make one.
agent = agent_fixture(
    4,
    incomplete_timeout=6,
    extra_env={"PODD_PRESTAGE_MIN_KIB": "0", "PODD_PRESTAGE_PIECE_KIB": "1"},
)

Rows = dict[str, list[DeltaRow]]


def interleaved(chunks: list[Chunk]) -> tuple[list[Chunk], list[Chunk]]:
    """Every chunk but each stream's last, interleaved; and those last chunks."""
    last = {c.key.stream_number: c.key.chunk_number for c in chunks if c.key.is_last_chunk}
    early = [c for c in chunks if c.key.chunk_number != last[c.key.stream_number]]
    early.sort(key=lambda c: (c.key.chunk_number, c.key.stream_number))
    return early, [c for c in chunks if c.key.chunk_number == last[c.key.stream_number]]


def deltas(schema: LogicalSchema, seed: int, count: int) -> list[tuple[Rows, list[Chunk]]]:
    spec = WorkloadSpec(
        rows_per_delta=400, insert_ratio=0.4, update_ratio=0.4, delete_ratio=0.2, seed=seed
    )
    workload = Workload(schema, spec)
    out = []
    for n in range(count):
        rows = workload.next_delta()
        out.append((rows, chunks_of(schema, n, rows, chunk_rows=25)))
    return out


def pieces_applied(agent: AgentProcess, request_id: str) -> dict[str, str]:
    """The pieces the agent's prestages applied for the transfer (table: chunks)."""
    out: dict[str, str] = {}
    for line in agent.log_text().splitlines():
        if request_id in line and '"prestaged"' in line:
            out.update(json.loads(line).get("pieces") or {})
    return out


def send_interleaved(
    agent: AgentProcess, chunks: list[Chunk], between: Callable[[Origin], Awaitable[None]] = nothing
) -> DeltaStatus:
    """Every chunk but each stream's last, interleaved; once a piece is prestaged (and
    `between` ran), the last chunks: the transfer's answer."""
    return early_then_late(agent, chunks, between, interleaved)


def test_interleaved_streams_are_applied_in_pieces_and_end_as_the_model(
    agent: AgentProcess, replica_dsn: str
) -> None:
    schema = agent.take()
    model = ReplicaModel(schema)
    for n, (rows, chunks) in enumerate(deltas(schema, 41, 2)):
        assert send_interleaved(agent, chunks) is DeltaStatus.OK
        model, _ = apply_delta(model, n, delta_date(n), rows)
        assert_matches_model(replica_dsn, model)
        assert pieces_applied(agent, chunks[0].key.request_id), "no piece was prestaged"


def test_a_kill_after_pieces_were_applied_then_the_rest_applies_exactly(
    agent: AgentProcess, replica_dsn: str
) -> None:
    schema = agent.take()
    ((rows, chunks),) = deltas(schema, 42, 1)
    rid = chunks[0].key.request_id

    async def kill_and_restart(origin: Origin) -> None:
        agent.kill()
        await asyncio.to_thread(agent.start)
        await asyncio.to_thread(agent.wait_for_log, "transfer recovered from staging", rid)

    assert send_interleaved(agent, chunks, kill_and_restart) is DeltaStatus.OK
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows)
    assert_matches_model(replica_dsn, model)


def test_a_delta_answered_incomplete_after_pieces_completes_exactly(
    agent: AgentProcess, replica_dsn: str
) -> None:
    """The interim INCOMPLETE_DELTA rolls the pieces' transaction back; the load after
    the last chunks stages every stream whole."""
    schema = agent.take()
    ((rows, chunks),) = deltas(schema, 43, 1)
    rid = chunks[0].key.request_id

    async def incomplete(origin: Origin) -> None:
        answer = (await origin.results_of(rid, timeout=60))[0]
        assert answer.error_code == ErrorCode.INCOMPLETE_DELTA

    assert send_interleaved(agent, chunks, incomplete) is DeltaStatus.OK
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows)
    assert_matches_model(replica_dsn, model)


def test_a_bad_last_chunk_after_pieces_leaves_the_replica_unchanged(
    agent: AgentProcess, replica_dsn: str
) -> None:
    schema = agent.take()
    (_, first), (_, chunks) = deltas(schema, 44, 2)
    assert send_interleaved(agent, first) is DeltaStatus.OK
    early, late = interleaved(chunks)
    late[-1] = dataclasses.replace(late[-1], body=b"not an avro container at all")
    rid = chunks[0].key.request_id
    before = snapshot(replica_dsn, schema)

    async def run() -> tuple[str | None, object]:
        async with Origin(agent.broker, agent.topics) as origin:
            await origin.send_chunks(early)
            await asyncio.to_thread(agent.wait_for_log, "prestaged", rid)
            await origin.send_chunks(late)
            refused = await outcome(origin, rid)
            return refused.error_code, await asyncio.to_thread(snapshot, replica_dsn, schema)

    code, after = asyncio.run(run())
    assert code == ErrorCode.BAD_CHUNK
    assert after == before
    assert pieces_applied(agent, rid), "no piece was prestaged"
