"""What a start does before the first chunk is consumed: the agent's state rebuilt from what
survives `kill -9`, and nothing else (no Faust table, no memory of the last run).

1. the outbox's records: answers owed, requestIds finished;
2. staging: open transfers (those of finished requestIds removed, unreadable ones
   quarantined, those of datamarts no longer served quarantined);
3. owed answers sent again (an answer is delivered at least once);
4. open transfers re-opened, each armed for INCOMPLETE_DELTA again; complete ones sealed
   and handed to the load worker;
5. transfers whose delta the registry already holds answered with its stored result.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import structlog

from replica_agent.answer_records import AnswerRecords
from replica_agent.chunk_spool import ChunkSpool
from replica_agent.intake import ChunkIntake
from replica_agent.load_worker import LoadWorker
from replica_agent.metrics import AgentMetrics
from replica_agent.outbox import Outbox
from replica_agent.tracker import TransferTracker

log = structlog.get_logger("replica_agent")


async def recover(
    *,
    records: AnswerRecords,
    spool: ChunkSpool,
    tracker: TransferTracker,
    intake: ChunkIntake,
    outbox: Outbox,
    worker: LoadWorker,
    metrics: AgentMetrics,
    deadline: float,
) -> None:
    """Steps 1-5 above; `deadline` is when a recovered, still incomplete transfer is
    answered INCOMPLETE_DELTA."""
    answers = await asyncio.to_thread(records.recover)
    found = await asyncio.to_thread(spool.recover, answers.finished)
    for where, why in [*answers.quarantined, *found.quarantined]:
        _quarantined(metrics, where, why)
    tracker.remember_finished(answers.finished)
    for result in answers.owed:
        log.info("resending an owed answer", requestId=result.request_id)
        await outbox.deliver(result)
    for transfer in found.open:
        if transfer.datamart not in tracker.schemas:
            why = f"transfer of datamart {transfer.datamart!r}, which is no longer served"
            directory = spool.directory(transfer.request_id)
            _quarantined(
                metrics, await asyncio.to_thread(spool.quarantine.move, directory, why), why
            )
            continue
        tracker.restore(transfer, deadline)
        log.info(
            "transfer recovered from staging",
            **transfer.log_ids(),
            chunks=transfer.chunks_received,
            complete=transfer.complete,
        )
        if transfer.complete:
            sealed = await intake.seal(transfer)
            worker.submit(sealed.transfer, sealed.staged)
    for name in tracker.schemas:
        await worker.close_superseded(name)
    metrics.open_transfers.set(len(tracker.open))


def _quarantined(metrics: AgentMetrics, where: Path, why: str) -> None:
    metrics.quarantined.inc()
    log.error("unreadable staged state moved to quarantine", path=str(where), error=why)
