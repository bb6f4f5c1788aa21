"""Staging files written one at a time, as durable as the agent's grouped writes make them
(`ChunkSpool.write_group`), for tests that lay out a transfer on disk by hand with
bodies that are not containers; and transfers made by hand."""

from __future__ import annotations

from datetime import datetime

from podd_runtime.files import durable_write
from replica_agent.chunk_spool import ChunkSpool
from replica_agent.transfers import StreamState, Transfer, TransferFraming


def transfer_of(
    request_id: str,
    datamart: str,
    delta_num: int,
    delta_date: datetime,
    subscription: str,
    stream_total: int,
) -> Transfer:
    """A transfer as its first chunk opens it."""
    return Transfer(
        TransferFraming(
            request_id=request_id,
            datamart=datamart,
            delta_num=delta_num,
            delta_date=delta_date,
            subscription=subscription,
            stream_total=stream_total,
        )
    )


def write_chunk(
    spool: ChunkSpool, request_id: str, stream: int, chunk: int, body: bytes | None
) -> None:
    durable_write(spool.chunk_path(request_id, stream, chunk), body or b"")


def write_stream(spool: ChunkSpool, request_id: str, number: int, state: StreamState) -> None:
    durable_write(*spool.stream_file(request_id, number, state))
