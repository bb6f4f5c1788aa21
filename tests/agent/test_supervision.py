"""The load worker under unexpected faults: it answers, tells no secrets, and goes on.

The service runs without Faust or Kafka here (answers are recorded); the loader is a
stand-in that fails as told. The real loader's faults are in tests/loader/test_failures.py.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from protocol.apply_model import TableCounts
from protocol.codec import encode_delta_in_key
from protocol.errors import ErrorCode
from protocol.messages import DeltaInResult, DeltaStatus
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from replica_agent.answers import MAX_ERROR_CHARS, error_result
from replica_agent.chunk_spool import ChunkSpool
from replica_agent.metrics import AgentMetrics
from replica_agent.service import ReplicaService
from replica_agent.tracker import TransferTracker
from replica_store.errors import LoadFailedError
from replica_store.registry import RegistryEntry
from replica_store.transfer import StagedTransfer
from tests.agent.kafka_io import chunks_of
from tests.agent.spool_writes import transfer_of
from tests.loader.staging_helpers import delta_date

SECRET = "password=hunter2 host=db.internal"


class FailingLoader:
    """Raises `error` for the deltas in `failing`, else records an applied entry."""

    def __init__(self, failing: set[int], error: Exception) -> None:
        self.failing, self.error = failing, error
        self.applied: dict[int, RegistryEntry] = {}

    def load(self, transfer: StagedTransfer, opened: object = None) -> RegistryEntry:
        m = transfer.manifest
        if m.delta_num in self.failing:
            raise self.error
        counts = tuple(TableCounts(s.table_name, 0, 0, 0) for s in m.streams)
        entry = RegistryEntry(
            m.datamart, m.delta_num, m.delta_date, m.request_id, counts, datetime.now(UTC)
        )
        self.applied[m.delta_num] = entry
        return entry


async def drive(
    schema: LogicalSchema, tmp_path: Path, loader: FailingLoader, deltas: int
) -> list[DeltaInResult]:
    sent: list[DeltaInResult] = []

    async def record(result: DeltaInResult) -> None:
        sent.append(result)

    service = ReplicaService(
        tracker=TransferTracker({schema.datamart: schema}, {schema.datamart: {}}),
        spool=ChunkSpool(tmp_path / "staging"),
        loader=loader,
        registry=lambda datamart, n: loader.applied.get(n),
        send_result=record,
        metrics=AgentMetrics(),
        incomplete_timeout=600,
    )
    await service.start()
    workload = Workload(schema, WorkloadSpec(rows_per_delta=10, seed=1))
    for n in range(deltas):
        rows = workload.next_delta()
        for chunk in chunks_of(schema, n, rows):
            (failure,) = await service.receive([(encode_delta_in_key(chunk.key), chunk.body)])
            assert failure is None
        for _ in range(200):
            if len(sent) > n:
                break
            await asyncio.sleep(0.02)
    assert service.health()["worker_alive"] is True
    await service.stop()
    return sent


async def test_an_unexpected_load_error_is_load_failed_without_its_text_and_work_goes_on(
    marketing: LogicalSchema, tmp_path: Path
) -> None:
    loader = FailingLoader({1}, RuntimeError(f"cannot reach {SECRET}"))
    first, failed = await drive(marketing, tmp_path, loader, 2)
    assert first.status is DeltaStatus.OK
    assert failed.error_code == ErrorCode.LOAD_FAILED
    assert "reference" in (failed.error_message or "")
    assert "hunter2" not in (failed.error_message or "")


async def test_a_fault_after_the_commit_is_answered_ok_from_the_registry(
    marketing: LogicalSchema, tmp_path: Path
) -> None:
    loader = FailingLoader(set(), RuntimeError("never"))
    original = loader.load

    def commit_then_fail(transfer: StagedTransfer, opened: object = None) -> RegistryEntry:
        original(transfer)  # applied: the registry has it
        raise RuntimeError(f"the answer could not be built: {SECRET}")

    loader.load = commit_then_fail  # type: ignore[method-assign]
    (answer,) = await drive(marketing, tmp_path, loader, 1)
    assert answer.status is DeltaStatus.OK  # never LOAD_FAILED for an applied delta
    assert answer.delta_num == 0


def test_long_error_messages_are_cut_and_marked() -> None:
    transfer = transfer_of("r", "marketing", 0, delta_date(0), "s", 1)
    result = error_result(transfer, ErrorCode.BAD_CHUNK, "x" * 100_000)
    assert len(result.error_message or "") == MAX_ERROR_CHARS
    assert (result.error_message or "").endswith("(truncated)")


async def test_the_stores_refusal_is_load_failed_without_its_text(
    marketing: LogicalSchema, tmp_path: Path
) -> None:
    """LOAD_FAILED from the loader (the store refused after its retries) carries the driver's
    words, which may name hosts and paths: the origin gets a reference, the log the text."""
    loader = FailingLoader({0}, LoadFailedError(f"the store refused: cannot reach {SECRET}"))
    (failed,) = await drive(marketing, tmp_path, loader, 1)
    assert failed.error_code == ErrorCode.LOAD_FAILED
    assert "reference" in (failed.error_message or "")
    assert "hunter2" not in (failed.error_message or "")
