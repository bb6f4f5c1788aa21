"""One writer per datamart, end to end: a second agent, or a restore, for a datamart an
agent serves stops at start with a message naming the agent, and the agent goes on.

Before `replica_store.ownership`, the second agent joined the same consumer group (the two
split the `delta.in` partitions, so neither saw a whole transfer) and its start emptied the
first one's staging tables."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from protocol.apply_model import ReplicaModel
from tests.agent.conftest import AgentProcess, agent_fixture
from tests.agent.test_hostile import apply_one
from tests.loader.staging_helpers import assert_matches_model

agent = agent_fixture(2, incomplete_timeout=600)


def test_a_second_agent_for_a_served_datamart_stops_at_start_naming_the_first(
    agent: AgentProcess, replica_dsn: str, tmp_path: Path
) -> None:
    schema = agent.take()
    second = AgentProcess(
        agent.broker,
        replica_dsn,
        tmp_path / "second",
        [schema],
        topics=agent.topics,
        group_id=agent.group_id,
    )
    started = time.monotonic()
    with pytest.raises(AssertionError, match="exited with code 2"):
        second.start()
    assert time.monotonic() - started < 60  # before Spark or Kafka: it fails fast
    assert f"datamart {schema.datamart} is already written by replica-agent on" in (
        second.log_text()
    )
    assert agent.process.poll() is None
    model = asyncio.run(apply_one(agent, schema, 0, ReplicaModel(schema)))
    assert_matches_model(replica_dsn, model)


def test_a_restore_of_a_served_datamart_is_refused_before_it_reads_anything(
    agent: AgentProcess, replica_dsn: str, tmp_path: Path
) -> None:
    schema = agent.take()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "podd_restore.cli",
            "run",
            "--topic",
            "no-such-topic",
            "--datamart",
            schema.datamart,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            **os.environ,
            "PODD_BROKER": f"kafka://{agent.broker}",
            "PODD_REPLICA_DSN": replica_dsn,
            "PODD_DATA_DIR": str(tmp_path),
        },
    )
    assert done.returncode == 2, done.stderr
    assert "is already written by replica-agent on" in done.stdout + done.stderr
    assert agent.process.poll() is None
