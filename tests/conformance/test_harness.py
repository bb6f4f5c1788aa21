"""The conformance harness: every scenario passes against this project's agent, and a replica
agent that breaks the rules fails them (so the harness can tell the two apart)."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from conformance import cli
from conformance.scenarios import SCENARIOS
from protocol.codec import decode_delta_in_key, decode_message, encode_message
from protocol.messages import DeltaInResult, DeltaRequest, DeltaState, DeltaStatus, ReplicaState
from protocol.schema import LogicalSchema
from tests.agent.conftest import AgentProcess, agent_fixture
from tests.agent.kafka_io import Topics

pytestmark = pytest.mark.slow

LINE = re.compile(r"^(PASS|FAIL|SKIP)  (\S+)", re.MULTILINE)


def flags(broker: str, topics: Topics, datamart: str, schema_file: str) -> list[str]:
    return [
        "--broker",
        f"kafka://{broker}",
        "--datamart",
        datamart,
        "--schema",
        schema_file,
        *topics.options(),
    ]


def harness_argv(agent: AgentProcess, *extra: str) -> list[str]:
    """`podd-conformance replica`'s arguments for `agent`'s one datamart, with `extra`."""
    (schema,) = agent.schemas
    schema_file = str(agent.data_dir / f"{schema.datamart}.sql")
    return [
        *flags(agent.broker, agent.topics, schema.datamart, schema_file),
        *extra,
        "--incomplete-wait",
        "60",
        "--quiet-period",
        "1.5",
        "--load-rows",
        "200000",
    ]


def verdicts_in(out: str) -> dict[str, str]:
    """Each scenario's verdict, by name, from the harness's report."""
    return {name: verdict for verdict, name in LINE.findall(out)}


agent = agent_fixture(1, incomplete_timeout=4)


def test_every_scenario_passes_against_our_agent(
    agent: AgentProcess, replica_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = harness_argv(agent, "--replica", replica_dsn)
    code = cli.main(argv)
    out = capsys.readouterr().out
    assert verdicts_in(out) == {s.name: "PASS" for s in SCENARIOS}, out
    assert code == 0
    assert f"{len(SCENARIOS)} passed, 0 failed, 0 skipped" in out
    # A second run refuses: the datamart is no longer empty.
    assert cli.main(argv) == 2
    assert "has deltas up to" in capsys.readouterr().err


agent_on_clickhouse = agent_fixture(1, incomplete_timeout=4, extra_env={"PODD_STORE": "clickhouse"})


def test_every_scenario_passes_against_our_agent_on_clickhouse(
    agent_on_clickhouse: AgentProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same scenarios with the replica in ClickHouse (embedded, in the agent's data
    directory). The harness reads no ClickHouse tables (the agent's process holds the
    engine): it checks every answer on the wire, and skips the two scenarios that read or
    break the replica's tables through a PostgreSQL DSN."""
    agent = agent_on_clickhouse
    code = cli.main(harness_argv(agent))
    out = capsys.readouterr().out
    needs_dsn = {"load-failed", "as-of-reads"}
    expected = {s.name: "SKIP" if s.name in needs_dsn else "PASS" for s in SCENARIOS}
    assert verdicts_in(out) == expected, out
    assert code == 0
    assert "chdb://" in agent.log_text()  # (the replica line names the embedded engine)


async def lying_agent(broker: str, topics: Topics, datamart: str, stop: asyncio.Event) -> None:
    """Answers OK to every last chunk and 'expects delta 0' forever: it checks nothing."""
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    consumer = AIOKafkaConsumer(
        topics.delta_in,
        topics.delta_rq,
        bootstrap_servers=broker,
        group_id=None,
        auto_offset_reset="earliest",
    )
    await producer.start()
    await consumer.start()
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            for message in (m for batch in batches.values() for m in batch):
                if message.topic == topics.delta_rq:
                    request = decode_message(DeltaRequest, message.value or b"")
                    answer: DeltaState | DeltaInResult = DeltaState(
                        request_id=request.request_id,
                        datamart=request.datamart,
                        state=ReplicaState.IDLE,
                        expected_delta_num=0,
                    )
                    topic = topics.delta_rs
                else:
                    key = decode_delta_in_key(message.key or b"")
                    if not key.is_last_chunk:
                        continue
                    answer = DeltaInResult(
                        request_id=key.request_id,
                        datamart=key.datamart,
                        delta_num=key.delta_num,
                        delta_date=key.delta_date,
                        status=DeltaStatus.OK,
                        applied_at=datetime.now(UTC),
                    )
                    topic = topics.delta_in_rs
                await producer.send_and_wait(
                    topic, key=datamart.encode(), value=encode_message(answer)
                )
    finally:
        await consumer.stop()
        await producer.stop()


def test_an_agent_that_checks_nothing_fails(
    broker: str,
    marketing: LogicalSchema,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topics = Topics.unique()
    schema_file = tmp_path_factory.mktemp("liar") / "marketing.sql"
    schema_file.write_text(marketing.to_ddl())

    async def scenario_run() -> int:
        stop = asyncio.Event()
        liar = asyncio.create_task(lying_agent(broker, topics, "marketing", stop))
        argv = [
            *flags(broker, topics, "marketing", str(schema_file)),
            "--quiet-period",
            "0.5",
            "--answer-timeout",
            "5",
            "--load-rows",
            "2000",
        ]
        try:
            return await asyncio.to_thread(cli.main, argv)
        finally:
            stop.set()
            await liar

    assert asyncio.run(scenario_run()) == 1
    out = capsys.readouterr().out
    verdicts = verdicts_in(out)
    broken = (
        "state-unknown-datamart",
        "happy-path",
        "out-of-sequence",
        "bad-chunk-two-last",
        "unknown-table",
        "schema-mismatch-sys-op",
        "incomplete-then-completed",
    )
    assert {name: verdicts[name] for name in broken} == dict.fromkeys(broken, "FAIL"), out
    assert verdicts["load-failed"] == "SKIP"  # no --replica
