"""The agent on a shared Kafka: hostile messages and faults never stop it, never crash-loop
it, and never make it lie. Real Tansu, PostgreSQL and Spark; the agent is a process."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
import uuid
from collections import Counter
from typing import Any

import psutil
import pytest
from aiokafka import AIOKafkaConsumer

from conformance.forges.hostile import HostileMessages
from protocol.apply_model import ReplicaModel, apply_delta
from protocol.codec import decode_delta_in_key, encode_delta_in_key
from protocol.errors import ErrorCode
from protocol.messages import DeltaStatus, ReplicaState
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from replica_agent.chunk_spool import transfer_id
from tests.agent.conftest import AgentProcess, agent_fixture
from tests.agent.kafka_io import Origin, chunks_of, wait_consumed
from tests.agent.test_integration import outcome
from tests.loader.staging_helpers import assert_matches_model, delta_date

pytestmark = pytest.mark.slow

FUZZ_MESSAGES = 2000
#: The agent's own Python process (Spark's JVM and workers aside) stays below this.
AGENT_RSS_BOUND_MIB = 700
DEAD_LETTER = f"fuzz-dead-letter-{uuid.uuid4().hex[:8]}"

agent = agent_fixture(
    6,
    incomplete_timeout=600,
    extra_env={"PODD_MAX_OPEN_TRANSFERS": "3", "PODD_TOPIC_DEAD_LETTER": DEAD_LETTER},
)


def health(agent: AgentProcess) -> tuple[int, dict[str, object]]:
    url = f"http://127.0.0.1:{agent.metrics_port}/health"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def metric(agent: AgentProcess, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in agent.metrics().splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


async def apply_one(
    agent: AgentProcess, schema: LogicalSchema, n: int, model: ReplicaModel
) -> ReplicaModel:
    rows = Workload(schema, WorkloadSpec(rows_per_delta=30, seed=n)).next_delta()
    async with Origin(agent.broker, agent.topics) as origin:
        chunks = chunks_of(schema, n, rows, chunk_rows=7)
        await origin.send_chunks(chunks)
        result = await outcome(origin, chunks[0].key.request_id)
        assert result.status is DeltaStatus.OK, result
    model, _ = apply_delta(model, n, delta_date(n), rows)
    return model


def test_two_thousand_malformed_messages_then_a_valid_delta_applies(
    agent: AgentProcess, replica_dsn: str
) -> None:
    schema = agent.take()
    hostile = HostileMessages(schema, seed=13)
    sent: Counter[str] = Counter()
    process = psutil.Process(agent.process.pid)
    peak = 0.0

    async def fuzz() -> None:
        nonlocal peak
        async with Origin(agent.broker, agent.topics) as origin:
            # Sent as a burst, not one round trip at a time (that took about 30 s of CI).
            landing: list[tuple[str, asyncio.Future[Any]]] = []
            for number, (kind, topic, key, value) in enumerate(hostile):
                if number == FUZZ_MESSAGES:
                    break
                name = agent.topics.delta_in if topic == "delta.in" else agent.topics.delta_rq
                landing.append((topic, await origin.producer.send(name, key=key, value=value)))
                sent[kind] += 1
            last: dict[int, int] = {}  # delta.in partition → its last message's offset
            for topic, future in landing:
                landed = await future
                if topic == "delta.in":
                    last[landed.partition] = max(last.get(landed.partition, -1), landed.offset)
                peak = max(peak, process.memory_info().rss / 2**20)
            # Every malformed message handled: the agent committed past each of them, and
            # answers delta.rq after all of those.
            await wait_consumed(agent.broker, agent.group_id, agent.topics.delta_in, last)
            await asyncio.wait_for(origin.ask(schema.datamart), 300)
            peak = max(peak, process.memory_info().rss / 2**20)

    asyncio.run(fuzz())
    assert sum(sent.values()) == FUZZ_MESSAGES
    assert len(sent) == 11, sent  # every kind was sent
    assert agent.process.poll() is None, agent.log_tail()
    assert peak < AGENT_RSS_BOUND_MIB, f"agent RSS peaked at {peak:.0f} MiB"
    model = asyncio.run(apply_one(agent, schema, 0, ReplicaModel(schema)))
    assert_matches_model(replica_dsn, model)
    status, body = health(agent)
    assert status == 200
    assert body["worker_alive"] is True
    assert metric(agent, "podd_undecodable_messages_total") > 0
    assert metric(agent, 'podd_chunks_dropped_total{reason="oversize"}') > 0
    assert agent.process.poll() is None


def test_an_oversize_datamart_name_is_dropped_and_no_restart_loops(
    agent: AgentProcess, replica_dsn: str
) -> None:
    schema = agent.take()
    hostile = HostileMessages(schema, seed=1)

    async def send() -> None:
        async with Origin(agent.broker, agent.topics) as origin:
            key = hostile.key(datamart="m" * 340_000, request_id="too-long")
            await origin.producer.send_and_wait(
                agent.topics.delta_in, key=encode_delta_in_key(key, codec="deflate"), value=None
            )
            await asyncio.wait_for(origin.ask(schema.datamart), 120)
            assert origin.results.get("too-long") is None  # never answered

    asyncio.run(send())
    assert agent.stop() == 0
    agent.start()  # nothing owed: the restart is clean
    model = asyncio.run(apply_one(agent, schema, 0, ReplicaModel(schema)))
    assert_matches_model(replica_dsn, model)


def test_beyond_the_open_budget_the_oldest_transfer_is_answered_and_removed(
    agent: AgentProcess,
) -> None:
    schema = agent.take()
    rows = Workload(schema, WorkloadSpec(rows_per_delta=30, seed=3)).next_delta()
    transfers = [chunks_of(schema, 0, rows, chunk_rows=5) for _ in range(4)]

    async def scenario() -> str:
        async with Origin(agent.broker, agent.topics) as origin:
            for chunks in transfers:  # the first chunk of each: four open, budget three
                await origin.send_chunks(chunks[:1])
            # Partitions decide the order they arrive in: the first to arrive is evicted.
            ids = [chunks[0].key.request_id for chunks in transfers]
            deadline = asyncio.get_running_loop().time() + 120
            while not any(origin.results.get(i) for i in ids):
                assert asyncio.get_running_loop().time() < deadline, agent.log_tail()
                await asyncio.sleep(0.1)
            (evicted,) = [i for i in ids if origin.results.get(i)]
            (answer,) = origin.results[evicted]
            assert answer.error_code == ErrorCode.INCOMPLETE_DELTA
            assert "removed to keep the replica's staging budget" in (answer.error_message or "")
            state = await origin.ask(schema.datamart)
            assert state.state is ReplicaState.RECEIVING
            assert {t.request_id for t in state.in_progress} == set(ids) - {evicted}
            return evicted

    evicted = asyncio.run(scenario())
    staged = agent.data_dir / "staging" / "transfers"
    assert not (staged / transfer_id(evicted)).exists()


def test_an_open_transfer_of_a_delta_applied_meanwhile_is_closed_with_its_result(
    agent: AgentProcess,
) -> None:
    schema = agent.take()
    rows = Workload(schema, WorkloadSpec(rows_per_delta=30, seed=4)).next_delta()
    stalled = chunks_of(schema, 0, rows, chunk_rows=5)
    complete = chunks_of(schema, 0, rows, chunk_rows=5)

    async def scenario() -> None:
        async with Origin(agent.broker, agent.topics) as origin:
            await origin.send_chunks(stalled[:2])
            deadline = asyncio.get_running_loop().time() + 60
            while not (await origin.ask(schema.datamart)).in_progress:  # it is open there
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.1)
            await origin.send_chunks(complete)
            applied = await outcome(origin, complete[0].key.request_id)
            assert applied.status is DeltaStatus.OK
            closed = await outcome(origin, stalled[0].key.request_id)
            assert closed.status is DeltaStatus.OK  # delta 0 is applied: that is its truth
            assert closed.tables == applied.tables
            state = await origin.ask(schema.datamart)
            assert state.in_progress == ()
            assert state.state is ReplicaState.IDLE

    asyncio.run(scenario())


def test_a_message_that_fails_unexpectedly_is_skipped_counted_and_dead_lettered(
    agent: AgentProcess, replica_dsn: str
) -> None:
    schema = agent.take()
    rows = Workload(schema, WorkloadSpec(rows_per_delta=10, seed=5)).next_delta()
    poisoned = chunks_of(schema, 0, rows, chunk_rows=5)
    # A file where the transfer's staging directory must go: staging fails with an OSError.
    blocker = agent.data_dir / "staging" / "transfers" / transfer_id(poisoned[0].key.request_id)
    blocker.write_text("in the way")
    before = metric(agent, "podd_poison_messages_total")

    async def scenario() -> list[bytes]:
        async with Origin(agent.broker, agent.topics) as origin:
            await origin.send_chunks(poisoned[:1])
            deadline = time.monotonic() + 60
            while metric(agent, "podd_poison_messages_total") == before:
                assert time.monotonic() < deadline, agent.log_tail()
                await asyncio.sleep(0.2)
        reader = AIOKafkaConsumer(
            DEAD_LETTER,
            bootstrap_servers=agent.broker,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await reader.start()
        try:
            batch = await reader.getmany(timeout_ms=10_000)
            return [m.key for messages in batch.values() for m in messages]
        finally:
            await reader.stop()

    keys = asyncio.run(scenario())
    assert [decode_delta_in_key(k) for k in keys] == [poisoned[0].key]
    log = agent.log_path.read_text()
    assert '"event": "message skipped after an unexpected error"' in log
    assert '"offset"' in log
    blocker.unlink()
    model = asyncio.run(apply_one(agent, schema, 0, ReplicaModel(schema)))  # it goes on
    assert_matches_model(replica_dsn, model)


def test_unreadable_staged_state_is_quarantined_and_the_agent_starts(
    agent: AgentProcess,
) -> None:
    assert agent.stop() == 0
    staging = agent.data_dir / "staging"
    broken = staging / "transfers" / ("f" * 40)
    broken.mkdir(parents=True)
    (broken / "transfer.json").write_text("{ not json")
    (staging / "outbox" / ("e" * 40 + ".owed.json")).write_text("garbage")
    agent.start()
    deadline = time.monotonic() + 60
    while metric(agent, "podd_quarantined_total") < 2:  # recovery runs as the agent starts
        assert time.monotonic() < deadline, agent.log_tail()
        time.sleep(0.2)
    quarantine = agent.data_dir / "quarantine"
    moved = sorted(p.name for p in quarantine.iterdir() if not p.name.endswith(".why.txt"))
    assert [name.split(".")[0] for name in moved] == ["e" * 40, "f" * 40]
    assert metric(agent, "podd_quarantined_total") == 2
    assert health(agent)[0] == 200
