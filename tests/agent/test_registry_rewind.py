"""The database goes back in time under a running agent (a failover to a standby that was
behind, a point-in-time restore): the agent takes the registry's word and the origin
resends what the replica lost. Real Tansu, PostgreSQL and Spark; the agent a process.

Before, the agent kept the applied-delta map it read at start: it answered `delta.rq` with
"expect N + 1", the loader refused N + 1 as OUT_OF_SEQUENCE, and the origin looped until
someone restarted the agent."""

from __future__ import annotations

import asyncio

from conformance.chaos_faults import rewind_replica
from origin.driver import DriverOptions, OriginDriver
from origin.sources import WorkloadSource, replica_model
from protocol.workload import WorkloadSpec
from spark_loader.store import ReplicaStore
from tests.agent.conftest import AgentProcess, agent_fixture
from tests.agent.kafka_io import Origin
from tests.agent.test_hostile import metric
from tests.loader.staging_helpers import assert_matches_model

agent = agent_fixture(1, incomplete_timeout=600)


def drive(agent: AgentProcess, source: WorkloadSource, count: int) -> list[int]:
    async def scenario() -> list[int]:
        async with Origin(agent.broker, agent.topics) as client:
            driver = OriginDriver(client, source, DriverOptions(chunk_rows=25))
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
    assert metric(agent, "podd_current_delta") >= 5
    assert "the registry disagrees with what this agent applied" in agent.log_text()
