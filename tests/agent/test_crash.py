"""`kill -9` of the agent process at the worst moments, then a restart on the same files.

After each: every delta is applied exactly once (one registry row each, the replica equals
the reference model) and every transfer got its answer.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import psycopg
import pytest

from protocol.apply_model import ReplicaModel, apply_delta
from protocol.exit_codes import ExitCode
from protocol.messages import DeltaStatus
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from tests.agent.conftest import AgentProcess, renamed
from tests.agent.kafka_io import Origin, chunks_of
from tests.agent.test_integration import outcome
from tests.loader.staging_helpers import assert_matches_model, delta_date

pytestmark = pytest.mark.slow


def registry_rows(dsn: str, datamart: str) -> list[tuple[int, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT delta_num, request_id FROM podd_replica.delta_registry "
            "WHERE datamart = %s ORDER BY delta_num",
            (datamart,),
        ).fetchall()
    return [(int(r[0]), str(r[1])) for r in rows]


def scenario(
    agent: AgentProcess, schema: LogicalSchema, dsn: str, crash: str, rows_per_delta: int
) -> None:
    """Deltas 0..2; the crash hits delta 1 at `crash`; the agent restarts and finishes."""
    workload = Workload(schema, WorkloadSpec(rows_per_delta=rows_per_delta, seed=17))
    deltas = [workload.next_delta() for _ in range(3)]
    transfers = [chunks_of(schema, n, rows, chunk_rows=500) for n, rows in enumerate(deltas)]
    rng = random.Random(1)

    async def run() -> None:
        async with Origin(agent.broker, agent.topics) as origin:
            await origin.send_chunks(transfers[0])
            assert (await outcome(origin, transfers[0][0].key.request_id)).status is DeltaStatus.OK
            chunks = transfers[1]
            rid = chunks[0].key.request_id
            if crash == "mid-transfer":
                half = len(chunks) // 2
                await origin.send_chunks(chunks[:half], shuffle=rng)
                await asyncio.to_thread(agent.wait_for_log, "first chunk", rid)
                await asyncio.sleep(0.5)
                agent.kill()
                await asyncio.to_thread(agent.start)
                await asyncio.to_thread(agent.wait_for_log, "transfer recovered from staging", rid)
                await origin.send_chunks(chunks[half:], shuffle=rng)
            elif crash == "during-load":
                await origin.send_chunks(chunks, shuffle=rng)
                await asyncio.to_thread(agent.wait_for_log, "load start", rid)
                agent.kill()
                await asyncio.to_thread(agent.start)
                await asyncio.to_thread(agent.wait_for_log, "transfer recovered from staging", rid)
            else:  # after the commit, before the answer: the agent exits by itself
                await origin.send_chunks(chunks, shuffle=rng)
                assert agent.process is not None
                assert await asyncio.to_thread(agent.process.wait, 300) == ExitCode.CRASH_INJECTED
                assert rid not in origin.results
                await asyncio.to_thread(agent.start)
                await asyncio.to_thread(
                    agent.wait_for_log, "already applied: answering the stored result", rid
                )
            result = await outcome(origin, chunks[0].key.request_id, timeout=300)
            assert result.status is DeltaStatus.OK, result
            await origin.send_chunks(transfers[2])
            assert (await outcome(origin, transfers[2][0].key.request_id)).status is DeltaStatus.OK
            assert all(t[0].key.request_id in origin.results for t in transfers)

    try:
        asyncio.run(run())
    finally:
        agent.stop()
    assert registry_rows(dsn, schema.datamart) == [
        (n, t[0].key.request_id) for n, t in enumerate(transfers)
    ]
    model = ReplicaModel(schema)
    for n, rows in enumerate(deltas):
        model, _ = apply_delta(model, n, delta_date(n), rows)
    assert_matches_model(dsn, model)


@pytest.mark.parametrize(
    ("crash", "rows"),
    [("mid-transfer", 6000), ("during-load", 20_000), ("after-commit", 3000)],
)
def test_kill_9_then_restart(
    crash: str,
    rows: int,
    broker: str,
    replica_dsn: str,
    marketing: LogicalSchema,
    tmp_path: Path,
) -> None:
    schema = renamed(marketing)
    env = {"PODD_FAULT_CRASH_AFTER_COMMIT_OF": "1"} if crash == "after-commit" else {}
    agent = AgentProcess(broker, replica_dsn, tmp_path / "agent", [schema], extra_env=env)
    agent.start()
    scenario(agent, schema, replica_dsn, crash, rows)
