"""Agents of different datamarts on one topic set: real Tansu, PostgreSQL and Spark, two agent
processes, two reference origins at once. Each agent answers UNKNOWN_DATAMART for the
datamart it does not serve (the contract's answer); the origins set those answers aside once
the serving replica has answered, so both finish (docs/contracts/PROTOCOL.md, "Shared topics").

Before, an origin took the other agent's UNKNOWN_DATAMART for its replica's word and stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from origin.reference import ReferenceOrigin
from origin.session import SessionOptions
from origin.sources import WorkloadSource, replica_model
from protocol.schema import LogicalSchema
from protocol.workload import WorkloadSpec
from tests.agent.conftest import AgentProcess, renamed
from tests.agent.kafka_io import Origin, Topics
from tests.loader.staging_helpers import assert_matches_model


@pytest.fixture
def two_agents(
    broker: str, replica_dsn: str, marketing: LogicalSchema, tmp_path: Path
) -> Iterator[tuple[AgentProcess, AgentProcess]]:
    topics = Topics.unique()
    agents = [
        AgentProcess(broker, replica_dsn, tmp_path / name, [renamed(marketing)], topics=topics)
        for name in ("a", "b")
    ]
    for agent in agents:
        agent.start()
    try:
        yield agents[0], agents[1]
    finally:
        for agent in agents:
            assert agent.stop() == 0, agent.log_tail()


def test_two_agents_of_two_datamarts_on_one_topic_set_and_both_origins_finish(
    two_agents: tuple[AgentProcess, AgentProcess], replica_dsn: str
) -> None:
    first, second = two_agents
    sources = [
        WorkloadSource(agent.schemas[0], WorkloadSpec(rows_per_delta=40, seed=n))
        for n, agent in enumerate(two_agents)
    ]

    async def drive(agent: AgentProcess, source: WorkloadSource) -> list[int]:
        async with Origin(agent.broker, agent.topics) as client:
            driver = ReferenceOrigin(client, source, SessionOptions(chunk_rows=25))
            outcomes = await asyncio.wait_for(driver.run(3), timeout=240)
            return [o.delta_num for o in outcomes]

    async def both() -> list[list[int]]:
        return list(await asyncio.gather(drive(first, sources[0]), drive(second, sources[1])))

    assert asyncio.run(both()) == [[0, 1, 2], [0, 1, 2]]
    for source in sources:
        assert_matches_model(replica_dsn, replica_model(source, 2))
