"""A restore and the agent share a replica: a restored replica goes on with `replica-agent`
and the reference origin from the next delta (the agent reading the schema from the
replica's catalog, no --schema), and an agent's replica is topped up from a backup topic."""

from __future__ import annotations

import asyncio

import pytest

from origin.reference import ReferenceOrigin
from origin.session import SessionOptions
from origin.sources import WorkloadSource, replica_model
from protocol.schema import LogicalSchema
from protocol.workload import WorkloadSpec
from replica_store.store import ReplicaStore
from tests.agent.conftest import AgentProcess
from tests.agent.kafka_io import Origin
from tests.loader.staging_helpers import assert_matches_model
from tests.restore.conftest import Restore, renamed, write_topic
from tests.restore.test_restore import assert_as_of_every_delta
from tools.backup_topic import BackupLayout, incremental

pytestmark = pytest.mark.slow


def _drive(agent: AgentProcess, source: WorkloadSource, count: int) -> list[int]:
    async def scenario() -> list[int]:
        async with Origin(agent.broker, agent.topics) as client:
            driver = ReferenceOrigin(client, source, SessionOptions(chunk_rows=25))
            return [o.delta_num for o in await driver.run(count)]

    return asyncio.run(scenario())


def test_a_restored_replica_continues_with_the_agent_and_an_agents_replica_is_topped_up(
    restore: Restore,
    topic: str,
    marketing: LogicalSchema,
    replica_dsn: str,
    broker: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    restored, driven = renamed(marketing), renamed(marketing)
    spec = WorkloadSpec(rows_per_delta=50, seed=17)
    layout = BackupLayout(threads=2, partitions=2, chunk_rows=20)
    source_r, source_d = WorkloadSource(restored, spec), WorkloadSource(driven, spec)
    write_topic(broker, topic, 2, incremental(source_r, range(10), layout, None))
    write_topic(broker, topic, 2, incremental(source_d, range(10), layout, None))

    # A replica restored up to delta 5 continues from 6 with the agent and an origin.
    done = restore("run", "--topic", topic, "--datamart", restored.datamart, "--to-delta", "5")
    assert done.returncode == 0, done.stderr
    agent = AgentProcess(
        broker,
        replica_dsn,
        tmp_path_factory.mktemp("shared") / "var",
        [restored],
        extra_env={"PODD_SCHEMA": ""},  # the schema comes from the replica's catalog
    ).start()
    try:
        assert _drive(agent, source_r, 4) == [6, 7, 8, 9]
    finally:
        assert agent.stop() == 0, agent.log_tail()
    model = replica_model(source_r, 9)
    assert_matches_model(replica_dsn, model)
    assert_as_of_every_delta(replica_dsn, model, 9)

    # The reverse: an agent applies deltas 0-3, a restore from the topic applies 4-9.
    agent = AgentProcess(broker, replica_dsn, tmp_path_factory.mktemp("agent") / "var", [driven])
    agent.start()
    try:
        assert _drive(agent, source_d, 4) == [0, 1, 2, 3]
    finally:
        assert agent.stop() == 0, agent.log_tail()
    done = restore("run", "--topic", topic, "--datamart", driven.datamart)
    assert done.returncode == 0, done.stderr
    assert "restored deltas 4-9" in done.stdout
    assert_matches_model(replica_dsn, replica_model(source_d, 9))
    registry = ReplicaStore(replica_dsn).registry(driven.datamart)
    assert [e.delta_num for e in registry] == list(range(10))
    assert [e.request_id.startswith("restore:") for e in registry] == [False] * 4 + [True] * 6
