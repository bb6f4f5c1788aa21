"""A full disk is back-pressure, not loss: real Tansu, PostgreSQL and Spark, the agent a
process whose staging directory is a small tmpfs filled to the brim.

Before, each chunk that could not be written was skipped as poison and its offset
committed: the transfer waited minutes for the origin's resend (or for ever, when the
manifest was what failed), and `/health` said 200 throughout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from protocol.apply_model import ReplicaModel, apply_delta
from protocol.messages import DeltaStatus
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from reliability.chaos_faults import DiskFiller
from tests.agent.conftest import AgentProcess, renamed
from tests.agent.kafka_io import Origin, chunks_of
from tests.agent.test_hostile import health
from tests.agent.test_integration import outcome
from tests.loader.staging_helpers import assert_matches_model, delta_date

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[DiskFiller]:
    """A 48 MiB tmpfs (mounting needs root's CAP_SYS_ADMIN, as CI and this machine have)."""
    disk = DiskFiller(tmp_path / "staging-fs", 48)
    if not disk.available:
        pytest.skip(f"cannot mount a tmpfs here: {disk.why_not}")
    try:
        yield disk
    finally:
        disk.unmount()


def wait_until(condition: Callable[[], object], failure: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.2)


def _agent_on(
    disk: DiskFiller, broker: str, replica_dsn: str, tmp_path: Path, schema: LogicalSchema
) -> AgentProcess:
    """An agent serving `schema` that spools its chunks on the small `disk`."""
    return AgentProcess(
        broker,
        replica_dsn,
        tmp_path / "agent",
        [schema],
        extra_env={"PODD_STAGING_DIR": str(disk.mount)},
    ).start()


def test_a_full_staging_disk_pauses_intake_and_the_same_transfer_completes_once_freed(
    broker: str,
    replica_dsn: str,
    marketing: LogicalSchema,
    tmp_path: Path,
    small_disk: DiskFiller,
) -> None:
    schema = renamed(marketing)
    agent = _agent_on(small_disk, broker, replica_dsn, tmp_path, schema)
    try:
        rows = Workload(schema, WorkloadSpec(rows_per_delta=3000, seed=8)).next_delta()
        chunks = chunks_of(schema, 0, rows, chunk_rows=200)
        wait_until(lambda: health(agent)[0] == 200, "the agent never became healthy")
        small_disk.fill()

        async def scenario() -> None:
            async with Origin(agent.broker, agent.topics) as origin:
                await origin.send_chunks(chunks)  # once: no resend at any point
                await asyncio.to_thread(
                    wait_until, lambda: health(agent)[1]["paused"], "the agent never paused"
                )
                code, body = await asyncio.to_thread(health, agent)
                assert code == 503
                assert "staging a chunk" in str(body["paused"])
                await asyncio.sleep(3)  # paused: nothing skipped, nothing answered
                assert chunks[0].key.request_id not in origin.results
                assert (await asyncio.to_thread(health, agent))[0] == 503
                small_disk.free()
                result = await outcome(origin, chunks[0].key.request_id)
                assert result.status is DeltaStatus.OK, result

        asyncio.run(scenario())
        assert health(agent)[0] == 200
        model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows)
        assert_matches_model(replica_dsn, model)
        log = agent.log_text()
        assert "paused: the disk refuses writes" in log
        assert "resumed: the disk takes writes again" in log
        assert "message skipped after an unexpected error" not in log
    finally:
        assert agent.stop() == 0, agent.log_tail()


def test_a_disk_full_of_junk_transfers_makes_room_and_the_delta_completes_unaided(
    broker: str,
    replica_dsn: str,
    marketing: LogicalSchema,
    tmp_path: Path,
    small_disk: DiskFiller,
) -> None:
    """Incomplete transfers (abandoned attempts, or anyone's when no key is set) held the
    disk, and intake waited for a person to free it. Now the transfers least far along are
    removed (answered INCOMPLETE_DELTA) and the delta that is arriving completes."""
    schema = renamed(marketing)
    agent = _agent_on(small_disk, broker, replica_dsn, tmp_path, schema)
    try:
        junk_rows = Workload(schema, WorkloadSpec(rows_per_delta=40_000, seed=3)).next_delta()
        junk = [chunks_of(schema, 0, junk_rows, chunk_rows=2000)[:-1] for _ in range(3)]
        rows = Workload(schema, WorkloadSpec(rows_per_delta=3000, seed=9)).next_delta()
        chunks = chunks_of(schema, 0, rows, chunk_rows=200)
        wait_until(lambda: health(agent)[0] == 200, "the agent never became healthy")

        async def scenario() -> tuple[DeltaStatus, list[str]]:
            async with Origin(agent.broker, agent.topics) as origin:
                for transfer in junk:
                    await origin.send_chunks(transfer)
                await asyncio.to_thread(
                    wait_until,
                    lambda: agent.logged("first chunk", junk[-1][0].key.request_id),
                    "the junk never arrived",
                )
                await asyncio.sleep(2)
                small_disk.fill()  # the rest of the disk: nobody frees it in this test
                await origin.send_chunks(chunks)
                result = await outcome(origin, chunks[0].key.request_id)
                removed = [
                    t[0].key.request_id for t in junk if t[0].key.request_id in origin.results
                ]
                return result.status, removed

        status, removed = asyncio.run(scenario())
        assert status is DeltaStatus.OK
        assert removed  # answered INCOMPLETE_DELTA: the origin resends them whole if it wants
        model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows)
        assert_matches_model(replica_dsn, model)
    finally:
        small_disk.free()
        assert agent.stop() == 0, agent.log_tail()
