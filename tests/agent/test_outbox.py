"""The outbox: answers recorded once, on real files, before they are sent; what a restart
finds of them; and the finished requestIds it remembers, as many as the tracker does."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from protocol.codec import decode_delta_in_key, encode_delta_in_key
from protocol.errors import ErrorCode
from protocol.messages import DeltaInResult, DeltaStatus
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from replica_agent.admission import TransferLimits
from replica_agent.answer_records import AnswerRecords
from replica_agent.answers import error_result
from replica_agent.chunk_spool import ChunkSpool
from replica_agent.metrics import AgentMetrics
from replica_agent.outbox import Outbox
from replica_agent.service import ReplicaService
from replica_agent.tracker import TransferTracker
from replica_agent.transfers import Transfer
from tests.agent.kafka_io import chunks_of
from tests.agent.spool_writes import transfer_of
from tests.agent.test_faust_app import RecordingLoader
from tests.agent.test_intake import bomb_body

DATE = datetime(2026, 1, 1, tzinfo=UTC)


def transfer(request_id: str = "r/1 with any characters") -> Transfer:
    return transfer_of(request_id, "marketing", 0, DATE, "SELECT 1", 2)


def records_of(spool: ChunkSpool, keep_finished: int = 10_000) -> AnswerRecords:
    return AnswerRecords(spool.outbox, spool.quarantine, keep_finished=keep_finished)


def settle(records: AnswerRecords, spool: ChunkSpool, request_id: str) -> None:
    """What `Outbox` does once an answer is delivered."""
    records.sent(request_id)
    spool.remove(request_id)


def test_owed_answers_survive_and_settled_ones_finish_the_transfer(tmp_path: Path) -> None:
    spool = ChunkSpool(tmp_path)
    records = records_of(spool)
    owed, settled = transfer("owed"), transfer("settled")
    for t in (owed, settled):
        spool.open_transfer(t.framing)
        result = DeltaInResult(
            request_id=t.request_id,
            datamart="marketing",
            delta_num=0,
            delta_date=DATE,
            status=DeltaStatus.ERROR,
            error_code="BAD_CHUNK",
            error_message="x",
        )
        records.owe(result)
    settle(records, spool, "settled")
    answers = records_of(ChunkSpool(tmp_path)).recover()
    assert [r.request_id for r in answers.owed] == ["owed"]
    assert set(answers.finished) == {"owed", "settled"}
    # The owed transfer's files are cleaned up too.
    assert ChunkSpool(tmp_path).recover(answers.finished).open == []
    assert list(spool.transfers.iterdir()) == []


def test_an_unreadable_answer_is_quarantined(tmp_path: Path) -> None:
    spool = ChunkSpool(tmp_path / "staging")
    records = records_of(spool)
    (spool.outbox / "x.owed.json").write_text("not json")
    found = records.recover()
    assert found.owed == []
    assert [w.parent for w, _ in found.quarantined] == [tmp_path / "quarantine"]


def test_an_answer_is_recorded_once(tmp_path: Path) -> None:
    spool = ChunkSpool(tmp_path)
    records = records_of(spool)
    t = transfer()
    first = error_result(t, ErrorCode.BAD_CHUNK, "first")
    second = error_result(t, ErrorCode.LOAD_FAILED, "second")
    assert records.owe(first) == first
    assert records.owe(second) == first  # never a second, different answer
    settle(records, spool, t.request_id)
    assert records.owe(second) == first  # also after it was sent


def test_sent_answers_beyond_the_budget_are_pruned_as_they_settle(tmp_path: Path) -> None:
    spool = ChunkSpool(tmp_path)
    records = records_of(spool, keep_finished=3)
    for n in range(6):
        rid = f"r{n}"
        records.owe(error_result(transfer(rid), ErrorCode.BAD_CHUNK, "x"))
        settle(records, spool, rid)
    assert len(list(spool.outbox.glob("*.sent.json"))) == 3


def service_of(schema: LogicalSchema, root: Path, max_finished: int) -> ReplicaService:
    async def record(result: DeltaInResult) -> None:
        pass

    return ReplicaService(
        tracker=TransferTracker(
            {schema.datamart: schema},
            {schema.datamart: {}},
            limits=TransferLimits(max_finished=max_finished),
        ),
        spool=ChunkSpool(root),
        loader=RecordingLoader(),
        registry=lambda datamart, n: None,
        send_result=record,
        metrics=AgentMetrics(),
        incomplete_timeout=600,
    )


async def test_a_restart_remembers_the_finished_transfers_memory_knew(
    marketing: LogicalSchema, tmp_path: Path
) -> None:
    """One bound (`max_finished`) for memory and disk: after a restart, the same requestIds
    are finished, so an origin's late chunk meets the same verdict either way."""
    service = service_of(marketing, tmp_path / "staging", max_finished=4)
    await service.start()
    rows = Workload(marketing, WorkloadSpec(rows_per_delta=5, seed=3)).next_delta()
    request_ids = []
    for n in range(7):  # delta 5 each time under a new requestId: OUT_OF_SEQUENCE, finished
        (chunk, *_) = chunks_of(marketing, 5, rows)
        key = chunk.key.model_copy(update={"request_id": f"rq-{n}"})
        request_ids.append(key.request_id)
        assert await service.receive([(encode_delta_in_key(key), chunk.body)]) == [None]
    await service.stop()
    before = [r for r in request_ids if service.tracker.is_finished(r)]
    assert before == request_ids[-4:]

    restarted = service_of(marketing, tmp_path / "staging", max_finished=4)
    await restarted.start()
    await restarted.stop()
    assert [r for r in request_ids if restarted.tracker.is_finished(r)] == before


async def test_a_refused_transfer_is_answered_once_and_its_files_removed(
    marketing: LogicalSchema, tmp_path: Path
) -> None:
    """The intake's refusal (a decompression bomb within a group) reaches the origin through
    the outbox: one BAD_CHUNK answer, settled (the transfer's directory is gone); the same
    delta under a new requestId then loads."""
    sent: list[DeltaInResult] = []

    async def record(result: DeltaInResult) -> None:
        sent.append(result)

    loader = RecordingLoader()
    service = ReplicaService(
        tracker=TransferTracker({marketing.datamart: marketing}, {marketing.datamart: {}}),
        spool=ChunkSpool(tmp_path / "staging"),
        loader=loader,
        registry=lambda datamart, n: None,
        send_result=record,
        metrics=AgentMetrics(),
        incomplete_timeout=600,
    )
    await service.start()
    rows = Workload(marketing, WorkloadSpec(rows_per_delta=20, seed=0)).next_delta()
    bad = [(encode_delta_in_key(c.key), c.body) for c in chunks_of(marketing, 0, rows)]
    key = decode_delta_in_key(bad[1][0])
    bombed = (bad[1][0], bomb_body(marketing, key.table_name))
    assert await service.receive([bad[0], bombed, *bad[2:]]) == [None] * len(bad)
    (refused,) = sent
    assert refused.request_id == key.request_id
    assert refused.error_code == ErrorCode.BAD_CHUNK.value
    assert not service.spool.directory(key.request_id).exists()

    good = [
        (encode_delta_in_key(c.key), c.body) for c in chunks_of(marketing, 0, rows)
    ]  # a new requestId
    assert await service.receive(good) == [None] * len(good)
    for _ in range(300):
        if len(sent) == 2:
            break
        await asyncio.sleep(0.02)
    await service.stop()
    assert sent[1].status is DeltaStatus.OK
    assert len(loader.loaded) == 1


async def test_two_paths_answering_one_transfer_at_once_send_one_answer(tmp_path: Path) -> None:
    """The worker closing a superseded transfer while the intake refuses it: before, both
    sent and both settled, and the second rename of `….owed.json` raised."""
    sent: list[DeltaInResult] = []
    release = asyncio.Event()

    async def slow_send(result: DeltaInResult) -> None:
        sent.append(result)
        await release.wait()  # the broker takes its time: the other path arrives meanwhile

    spool = ChunkSpool(tmp_path)
    t = transfer("raced")
    spool.open_transfer(t.framing)
    tracker = TransferTracker({}, {})
    outbox = Outbox(
        records=records_of(spool),
        send_result=slow_send,
        tracker=tracker,
        spool=spool,
        metrics=AgentMetrics(),
    )
    first = asyncio.create_task(outbox.answer(error_result(t, ErrorCode.BAD_CHUNK, "first")))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(outbox.answer(error_result(t, ErrorCode.LOAD_FAILED, "2nd")))
    await asyncio.sleep(0.05)
    release.set()
    await asyncio.gather(first, second)
    assert [r.error_message for r in sent] == ["first"]
    found = records_of(ChunkSpool(tmp_path)).recover()
    assert found.owed == []
    assert set(found.finished) == {"raced"}
    assert not spool.directory("raced").exists()
    records_of(spool).sent("raced")  # settling again is a no-op, not an error
