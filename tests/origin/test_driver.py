"""The reference origin against the real agent (Tansu, PostgreSQL, Spark): in order, resumed
from the replica's state, and through every recovery path of its loop."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from origin import cli
from origin.client import OriginClient
from origin.errors import ReplicaRefused
from origin.reference import ReferenceOrigin
from origin.session import DeltaOutcome, SessionOptions
from origin.sources import START_DATE, WorkloadSource, replica_model
from protocol.apply_model import ReplicaModel
from protocol.errors import ErrorCode
from protocol.framing import Chunk
from protocol.messages import DeltaInResult
from protocol.schema import LogicalSchema
from protocol.workload import WorkloadSpec
from replica_store.replica_reader import differences
from tests.agent.conftest import AgentProcess, agent_fixture

pytestmark = pytest.mark.slow

SPEC = WorkloadSpec(rows_per_delta=60, seed=11)


agent = agent_fixture(7, incomplete_timeout=3)


@pytest.fixture
def schema(agent: AgentProcess) -> LogicalSchema:
    return agent.take()


class FaultyClient(OriginClient):
    """A real client that loses chunks of its first send, or the answers of a transfer."""

    drop_on_first_send: Callable[[Chunk], bool] | None = None
    hide_answers_of_first_transfer = False
    _first: str | None = None

    async def send_chunks(
        self,
        chunks: Iterable[Chunk],
        *,
        shuffle: random.Random | None = None,
        rows_per_second: float = 0.0,
    ) -> int:
        items = list(chunks)
        if self._first is None:
            self._first = items[0].key.request_id
            if self.drop_on_first_send is not None:
                kept = [c for c in items if not self.drop_on_first_send(c)]
                await super().send_chunks(kept, shuffle=shuffle, rows_per_second=rows_per_second)
                return len(items)
        return await super().send_chunks(items, shuffle=shuffle, rows_per_second=rows_per_second)

    async def result(
        self, request_id: str, timeout: float, *, after: int = 0
    ) -> DeltaInResult | None:
        if self.hide_answers_of_first_transfer and request_id == self._first:
            await asyncio.sleep(timeout)
            return None
        return await super().result(request_id, timeout, after=after)


async def drive(
    agent: AgentProcess,
    schema: LogicalSchema,
    count: int,
    *,
    client_type: type[OriginClient] = OriginClient,
    options: SessionOptions | None = None,
    setup: Callable[[OriginClient], None] = lambda _: None,
) -> tuple[list[DeltaOutcome], OriginClient]:
    settings = agent.topics.settings(agent.broker)
    async with client_type(settings, [agent.broker]) as client:
        setup(client)
        driver = ReferenceOrigin(client, WorkloadSource(schema, SPEC), options or SessionOptions())
        return await driver.run(count), client


def model_of(schema: LogicalSchema, last: int, spec: WorkloadSpec = SPEC) -> ReplicaModel:
    return replica_model(WorkloadSource(schema, spec), last)


def test_deltas_in_order_then_resumed_from_the_replicas_state(
    agent: AgentProcess, schema: LogicalSchema, replica_dsn: str
) -> None:
    first, _ = asyncio.run(drive(agent, schema, 3, options=SessionOptions(chunk_rows=7)))
    assert [o.delta_num for o in first] == [0, 1, 2]
    assert all(o.result is not None and o.resends == 0 for o in first)
    assert first[0].chunks_sent > len(schema.tables)  # chunked as asked
    again, _ = asyncio.run(drive(agent, schema, 2))  # a new origin asks where to go on
    assert [o.delta_num for o in again] == [3, 4]
    assert differences(replica_dsn, model_of(schema, 4), as_of=range(5)) == []


def test_a_paced_origin_sends_each_delta_over_the_time_its_rate_asks(
    agent: AgentProcess, schema: LogicalSchema, replica_dsn: str
) -> None:
    """`--rate`: 60 rows at 30 rows/s in chunks of at most 10: the last chunk is due after
    50 rows at least, 1.67 s (an unpaced 60-row delta is answered in about 0.1 s)."""
    options = SessionOptions(chunk_rows=10, rows_per_second=30)
    outcomes, _ = asyncio.run(drive(agent, schema, 2, options=options))
    assert [o.delta_num for o in outcomes] == [0, 1]
    assert all(o.rows == 60 and o.seconds >= 1.66 for o in outcomes), outcomes
    assert differences(replica_dsn, model_of(schema, 1), as_of=range(2)) == []


def test_incomplete_delta_is_completed_by_resending_only_the_missing_chunk(
    agent: AgentProcess, schema: LogicalSchema, replica_dsn: str
) -> None:
    def lose(client: OriginClient) -> None:
        assert isinstance(client, FaultyClient)
        client.drop_on_first_send = lambda c: c.key.stream_number == 2 and c.key.chunk_number == 2

    outcomes, client = asyncio.run(
        drive(
            agent,
            schema,
            1,
            client_type=FaultyClient,
            options=SessionOptions(chunk_rows=5),
            setup=lose,
        )
    )
    (outcome,) = outcomes
    assert outcome.result is not None
    assert outcome.resends == 1
    answers = client.results[outcome.result.request_id]
    assert [a.error_code for a in answers] == [ErrorCode.INCOMPLETE_DELTA, None]
    assert "stream 2 chunks 2-2" in (answers[0].error_message or "")
    assert differences(replica_dsn, model_of(schema, 0)) == []


def test_a_transfer_lost_entirely_is_sent_again_after_asking_the_state(
    agent: AgentProcess, schema: LogicalSchema, replica_dsn: str
) -> None:
    def lose_all(client: OriginClient) -> None:
        assert isinstance(client, FaultyClient)
        client.drop_on_first_send = lambda _: True

    options = SessionOptions(answer_timeout=6)
    outcomes, client = asyncio.run(
        drive(agent, schema, 2, client_type=FaultyClient, options=options, setup=lose_all)
    )
    assert [(o.delta_num, o.resends) for o in outcomes] == [(0, 1), (1, 0)]
    assert outcomes[0].result is not None
    assert isinstance(client, FaultyClient)
    assert outcomes[0].result.request_id != client._first  # a new requestId
    assert differences(replica_dsn, model_of(schema, 1)) == []


def test_a_lost_answer_is_settled_from_the_replicas_state(
    agent: AgentProcess, schema: LogicalSchema, replica_dsn: str
) -> None:
    def hide(client: OriginClient) -> None:
        assert isinstance(client, FaultyClient)
        client.hide_answers_of_first_transfer = True

    options = SessionOptions(answer_timeout=6)
    outcomes, _ = asyncio.run(
        drive(agent, schema, 2, client_type=FaultyClient, options=options, setup=hide)
    )
    assert [o.delta_num for o in outcomes] == [0, 1]
    assert outcomes[0].result is None  # applied, its answer unseen
    assert outcomes[0].resends == 0
    assert differences(replica_dsn, model_of(schema, 1)) == []


def test_an_error_it_cannot_fix_stops_the_origin_and_says_why(
    agent: AgentProcess, schema: LogicalSchema, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(drive(agent, schema, 1))
    source = WorkloadSource(schema, SPEC, start=START_DATE.replace(year=2020))

    async def conflicting() -> None:
        async with OriginClient(agent.topics.settings(agent.broker), [agent.broker]) as client:
            await ReferenceOrigin(client, source).run(1)

    with pytest.raises(ReplicaRefused, match="DELTA_CONFLICT") as refused:
        asyncio.run(conflicting())
    assert refused.value.delta_num == 1
    assert refused.value.code == ErrorCode.DELTA_CONFLICT
    # The command says the same and exits 1.
    code = cli.main(["run", *cli_flags(agent, schema), "--start-date", "2020-01-01T00:00:00"])
    assert code == 1
    assert "stopped: delta 1: the replica answered DELTA_CONFLICT" in capsys.readouterr().err


def cli_flags(agent: AgentProcess, schema: LogicalSchema) -> list[str]:
    schema_file = str(agent.data_dir / f"{schema.datamart}.sql")
    return [
        "--broker",
        f"kafka://{agent.broker}",
        "--datamart",
        schema.datamart,
        "--schema",
        schema_file,
        *agent.topics.options(),
    ]


def test_recorded_deltas_replay_through_the_command(
    agent: AgentProcess,
    schema: LogicalSchema,
    replica_dsn: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = WorkloadSpec(rows_per_delta=45, seed=9)
    schema_file = str(agent.data_dir / f"{schema.datamart}.sql")
    recorded = [
        "record",
        "--datamart",
        schema.datamart,
        "--schema",
        schema_file,
        "--out",
        str(tmp_path),
        "--deltas",
        "3",
        "--rows-per-delta",
        "45",
        "--seed",
        "9",
    ]
    assert cli.main(recorded) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"delta-00000{n}" for n in range(3)]
    code = cli.main(["run", *cli_flags(agent, schema), "--source-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "3 delta(s) applied, 135 rows" in out
    assert differences(replica_dsn, model_of(schema, 2, spec)) == []
    assert cli.main(["state", *cli_flags(agent, schema)]) == 0
    assert '"expectedDeltaNum": 3' in capsys.readouterr().out
