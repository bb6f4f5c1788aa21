"""The agent on real parts: Tansu, PostgreSQL, Spark; raw Kafka messages in, answers out.

One agent process serves this module; every test takes a datamart of its own from it, so
each test starts from an empty replica and its own delta sequence.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest

from protocol.apply_model import ReplicaModel, apply_delta
from protocol.errors import ErrorCode
from protocol.messages import DeltaInResult, DeltaStatus, ReplicaState
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from tests.agent.conftest import AgentProcess, renamed
from tests.agent.kafka_io import Origin, chunks_of, delta_date
from tests.loader.staging_helpers import assert_matches_model

DATAMARTS = 12


@pytest.fixture(scope="module")
def agent(
    broker: str,
    replica_dsn: str,
    marketing: LogicalSchema,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AgentProcess]:
    schemas = [renamed(marketing) for _ in range(DATAMARTS)]
    process = AgentProcess(
        broker, replica_dsn, tmp_path_factory.mktemp("agent"), schemas, incomplete_timeout=6
    ).start()
    yield process
    code = process.stop()
    assert code == 0, process.log_tail()


_taken: list[str] = []


@pytest.fixture
def schema(agent: AgentProcess) -> LogicalSchema:
    free = [s for s in agent.schemas if s.datamart not in _taken]
    _taken.append(free[0].datamart)
    return free[0]


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def final(results: list[DeltaInResult]) -> list[DeltaInResult]:
    """Answers other than the interim INCOMPLETE_DELTA."""
    return [r for r in results if r.error_code != ErrorCode.INCOMPLETE_DELTA]


async def outcome(origin: Origin, request_id: str, timeout: float = 180) -> DeltaInResult:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        found = final([r for r in origin.results if r.request_id == request_id])
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
