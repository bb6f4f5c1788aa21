"""The database goes back in time under a running agent (a failover to a standby that was
behind, a point-in-time restore): the agent takes the registry's word and the origin
resends what the replica lost. Real Tansu, PostgreSQL and Spark; the agent a process.

Before, the agent kept the applied-delta map it read at start: it answered `delta.rq` with
"expect N + 1", the loader refused N + 1 as OUT_OF_SEQUENCE, and the origin looped until
someone restarted the agent."""

from __future__ import annotations

import asyncio

from origin.reference import ReferenceOrigin
from origin.session import SessionOptions
from origin.sources import WorkloadSource, replica_model
from protocol.workload import WorkloadSpec
from reliability.chaos_faults import rewind_replica
from replica_store.store import ReplicaStore
from tests.agent.conftest import AgentProcess, agent_fixture
from tests.agent.kafka_io import Origin
from tests.agent.test_hostile import metric
from tests.loader.staging_helpers import assert_matches_model

agent = agent_fixture(2, incomplete_timeout=600)


def expected_after_rewind(agent: AgentProcess, datamart: str, wanted: int) -> list[int]:
    """What `delta.rq` answers, asked up to five times a second and a half apart (the agent
    reads the registry again at most once a second), until it answers `wanted`."""

    async def ask() -> list[int]:
        answers: list[int] = []
        async with Origin(agent.broker, agent.topics) as client:
            for _ in range(5):
                answers.append((await client.ask(datamart)).expected_delta_num)
                if answers[-1] == wanted:
                    break
                await asyncio.sleep(1.5)
        return answers

    return asyncio.run(ask())


def drive(agent: AgentProcess, source: WorkloadSource, count: int) -> list[int]:
    async def scenario() -> list[int]:
        async with Origin(agent.broker, agent.topics) as client:
            driver = ReferenceOrigin(client, source, SessionOptions(chunk_rows=25))
            outcomes = await asyncio.wait_for(driver.run(count), timeout=240)
            return [o.delta_num for o in outcomes]

    return asyncio.run(scenario())


def test_a_registry_gone_back_in_time_is_believed_and_the_origin_resends(
    agent: AgentProcess, replica_dsn: str
) -> None:
    schema = agent.take()
    source = WorkloadSource(schema, WorkloadSpec(rows_per_delta=40, seed=23))
    assert drive(agent, source, 4) == [0, 1, 2, 3]
    assert_matches_model(replica_dsn, replica_model(source, 3))

    assert rewind_replica(replica_dsn, schema, to_delta=1) == [3, 2]
    assert_matches_model(replica_dsn, replica_model(source, 1))  # the rewind is exact

    assert drive(agent, source, 4) == [2, 3, 4, 5]
    assert_matches_model(replica_dsn, replica_model(source, 5))
    registry = ReplicaStore(replica_dsn).registry(schema.datamart)
    assert [e.delta_num for e in registry] == list(range(6))
    assert agent.starts == 1  # no restart was needed
    assert metric(agent, f'podd_current_delta{{datamart="{schema.datamart}"}}') == 5
    assert "the registry disagrees with what this agent applied" in agent.log_text()


def test_a_database_gone_back_while_no_delta_arrives_is_told_on_the_next_delta_rq(
    agent: AgentProcess, replica_dsn: str
) -> None:
    """The rewind falls after the origin's last delta: nothing of it reaches the loader, so
    only `delta.rq` can tell the origin. Before, the agent answered from memory ("expect 3")
    and the origin, satisfied, never resent deltas 1 and 2."""
    schema = agent.take()
    source = WorkloadSource(schema, WorkloadSpec(rows_per_delta=30, seed=29))
    assert drive(agent, source, 3) == [0, 1, 2]
    assert rewind_replica(replica_dsn, schema, to_delta=0) == [2, 1]

    assert expected_after_rewind(agent, schema.datamart, 1)[-1] == 1
    assert drive(agent, source, 2) == [1, 2]
    assert_matches_model(replica_dsn, replica_model(source, 2))
    assert [e.delta_num for e in ReplicaStore(replica_dsn).registry(schema.datamart)] == [0, 1, 2]
