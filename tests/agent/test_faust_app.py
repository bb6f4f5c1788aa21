"""The Faust agents with Faust's test utilities (`Agent.test_context`), without a broker.

The loader is a stand-in here (pure logic under test: the agent, the tracker, staging and the
outbox); the real loader is exercised in test_integration.py and tests/loader.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import faust

from protocol.apply_model import TableCounts
from protocol.codec import encode_delta_in_key
from protocol.messages import DeltaInResult, DeltaStatus
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from replica_agent.app import build_app
from replica_agent.chunk_spool import ChunkSpool
from replica_agent.metrics import AgentMetrics
from replica_agent.service import ReplicaService, SendResult
from replica_agent.settings import AgentSettings
from replica_agent.tracker import TransferTracker
from replica_store.registry import RegistryEntry
from replica_store.transfer import StagedTransfer
from tests.agent.kafka_io import chunks_of

APPLIED_AT = datetime(2026, 2, 1, tzinfo=UTC)


class RecordingLoader:
    """Records what it loads; with a `gate`, each load waits until the test opens it."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.loaded: list[StagedTransfer] = []
        self.gate = gate

    def load(self, transfer: StagedTransfer, opened: object = None) -> RegistryEntry:
        if self.gate is not None and not self.gate.wait(timeout=30):
            raise AssertionError("the test never opened the loader's gate")
        self.loaded.append(transfer)
        m = transfer.manifest
        counts = tuple(
            TableCounts(s.table_name, len(transfer.chunks_of(s.table_name)), 0, 0)
            for s in m.streams
        )
        return RegistryEntry(
            m.datamart, m.delta_num, m.delta_date, m.request_id, counts, APPLIED_AT
        )


def faust_app(
    schema: LogicalSchema,
    spool: ChunkSpool,
    loader: RecordingLoader,
    send: SendResult,
    metrics: AgentMetrics,
) -> tuple[faust.App, ReplicaService]:
    """The agent's Faust app around a service whose answers go to `send`."""

    def make_service(_: SendResult) -> ReplicaService:
        return ReplicaService(
            tracker=TransferTracker({schema.datamart: schema}, {schema.datamart: {}}),
            spool=spool,
            loader=loader,
            registry=lambda datamart, n: None,
            send_result=send,
            metrics=metrics,
            incomplete_timeout=600,
        )

    return build_app(AgentSettings(), ["127.0.0.1:9"], metrics, make_service)


def chunk_agent(app: faust.App) -> Any:
    (agent,) = [a for name, a in app.agents.items() if name.endswith("receive_chunks")]
    return agent


async def test_the_chunk_agent_stages_dedups_loads_and_answers(
    tmp_path: Path, marketing: LogicalSchema
) -> None:
    sent: list[DeltaInResult] = []
    # The load waits for every duplicate: they all meet a transfer the loader holds.
    gate = threading.Event()
    loader = RecordingLoader(gate)
    spool = ChunkSpool(tmp_path / "staging")
    metrics = AgentMetrics()

    async def record(result: DeltaInResult) -> None:
        sent.append(result)

    app, service = faust_app(marketing, spool, loader, record, metrics)
    receive = chunk_agent(app)
    rows = Workload(marketing, WorkloadSpec(rows_per_delta=20, seed=2)).next_delta()
    chunks = chunks_of(marketing, 0, rows, chunk_rows=3)
    await service.start()
    service.ready.set()
    async with receive.test_context() as agent:
        for chunk in [*chunks, *chunks]:  # every chunk twice
            await agent.put(key=encode_delta_in_key(chunk.key), value=chunk.body)
        gate.set()
        # Answered and settled: the answer is sent, then, in a thread, marked sent and the
        # transfer's files removed. A stop meanwhile would leave that to the restart.
        for _ in range(200):
            if sent and not any(spool.transfers.iterdir()):
                break
            await asyncio.sleep(0.05)
        # After the answer, a chunk of the transfer is dropped, not counted as a duplicate.
        await agent.put(key=encode_delta_in_key(chunks[0].key), value=chunks[0].body)
    await service.stop()

    (result,) = sent
    assert result.status is DeltaStatus.OK
    assert result.request_id == chunks[0].key.request_id
    (transfer,) = loader.loaded
    assert [s.chunk_count for s in transfer.manifest.streams] == [
        sum(c.key.stream_number == n for c in chunks) for n in (1, 2, 3)
    ]
    # Settled: the transfer's files are gone, its answer is recorded as sent.
    assert list(spool.transfers.iterdir()) == []
    assert [p.name.endswith(".sent.json") for p in spool.outbox.iterdir()] == [True]
    assert service.tracker.expected("marketing") == 1
    text = metrics.render().decode()
    assert f'podd_chunk_duplicates_total{{datamart="marketing"}} {len(chunks)}.0' in text
    assert 'podd_chunks_dropped_total{reason="finished"} 1.0' in text


async def test_an_undecodable_key_is_skipped(tmp_path: Path, marketing: LogicalSchema) -> None:
    metrics = AgentMetrics()

    async def record(result: DeltaInResult) -> None:
        raise AssertionError("nothing to answer")

    app, service = faust_app(marketing, ChunkSpool(tmp_path), RecordingLoader(), record, metrics)
    receive = chunk_agent(app)
    service.ready.set()
    async with receive.test_context() as agent:
        await agent.put(key=b"\x00garbage", value=b"")
    assert 'podd_undecodable_messages_total{topic="delta.in"} 1.0' in metrics.render().decode()


async def test_the_chunk_consumer_fetches_with_the_configured_wait(
    tmp_path: Path, marketing: LogicalSchema
) -> None:
    """Faust fixes its consumer's fetch wait at 1,500 ms; the agent's is a setting."""
    settings = AgentSettings(fetch_max_wait_ms=35)
    loader = RecordingLoader()

    def make_service(send: SendResult) -> ReplicaService:
        return ReplicaService(
            tracker=TransferTracker({marketing.datamart: marketing}, {marketing.datamart: {}}),
            spool=ChunkSpool(tmp_path / "staging"),
            loader=loader,
            registry=lambda datamart, n: None,
            send_result=send,
            metrics=AgentMetrics(),
            incomplete_timeout=600,
        )

    app, _ = build_app(settings, ["127.0.0.1:9"], AgentMetrics(), make_service)
    thread = app.consumer._thread  # type: ignore[attr-defined]
    consumer = thread._create_worker_consumer(app.transport)
    assert consumer._fetch_max_wait_ms == 35
