"""The answers' contents: `delta.in.rs` from the registry, `delta.rs` from the tracker.

What the answers say, not who sends them: `Outbox` sends every `delta.in.rs`, `StateDesk`
every `delta.rs`."""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import ErrorCode
from protocol.messages import DeltaInResult, DeltaState, DeltaStatus, ReplicaState, TableResult
from replica_agent.tracker import TransferTracker
from replica_agent.transfers import Transfer, TransferFraming
from replica_store.registry import RegistryEntry


@dataclass(frozen=True)
class LastError:
    """A datamart's latest ERROR answer."""

    code: str
    message: str
    request_id: str


#: The longest `errorMessage` an answer carries; longer ones are cut (with a mark).
MAX_ERROR_CHARS = 4000


def error_result(
    transfer: Transfer | TransferFraming, code: ErrorCode, message: str
) -> DeltaInResult:
    """`delta.in.rs` ERROR for a transfer, with the framing of its first chunk."""
    if len(message) > MAX_ERROR_CHARS:
        mark = " … (truncated)"
        message = message[: MAX_ERROR_CHARS - len(mark)] + mark
    return DeltaInResult(
        request_id=transfer.request_id,
        datamart=transfer.datamart,
        delta_num=transfer.delta_num,
        delta_date=transfer.delta_date,
        status=DeltaStatus.ERROR,
        error_code=code.value,
        error_message=message,
    )


def result_from_registry(transfer: Transfer, entry: RegistryEntry) -> DeltaInResult:
    return DeltaInResult(
        request_id=transfer.request_id,
        datamart=entry.datamart,
        delta_num=entry.delta_num,
        delta_date=entry.delta_date,
        status=DeltaStatus.OK,
        tables=tuple(
            TableResult(
                table_name=c.table_name,
                rows_received=c.rows_received,
                rows_upserted=c.rows_upserted,
                rows_deleted=c.rows_deleted,
            )
            for c in entry.tables
        ),
        applied_at=entry.applied_at,
    )


def replica_state(
    request_id: str,
    datamart: str,
    tracker: TransferTracker,
    *,
    failed: bool,
    last_error: LastError | None,
) -> DeltaState:
    """The `delta.rs` answer: the datamart's state as this agent sees it now. `failed`: its
    last load ended LOAD_FAILED."""
    if datamart not in tracker.schemas:
        return DeltaState(
            request_id=request_id,
            datamart=datamart,
            state=ReplicaState.FAILED,
            expected_delta_num=0,
            error_code=ErrorCode.UNKNOWN_DATAMART.value,
            error_message=f"datamart {datamart!r} is not served by this replica",
        )
    last = tracker.last_applied(datamart)
    limit = tracker.limits.max_missing_items
    in_progress = tuple(t.progress(limit) for t in tracker.open.values() if t.datamart == datamart)
    if tracker.loading(datamart) is not None:
        state = ReplicaState.LOADING
    elif failed:
        state = ReplicaState.FAILED
    elif in_progress:
        state = ReplicaState.RECEIVING
    else:
        state = ReplicaState.IDLE
    error = last_error if state is ReplicaState.FAILED else None
    return DeltaState(
        request_id=request_id,
        datamart=datamart,
        state=state,
        delta_ok_num=None if last is None else last.delta_num,
        delta_ok_date=None if last is None else last.delta_date,
        expected_delta_num=tracker.expected(datamart),
        in_progress=in_progress,
        error_code=None if error is None else error.code,
        error_message=None if error is None else error.message,
    )
