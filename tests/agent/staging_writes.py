"""Staging files written one at a time, as durable as the agent's grouped writes make them
(`TransferStaging.write_group`), for tests that lay out a transfer on disk by hand with
bodies that are not containers."""

from __future__ import annotations

from podd_runtime.files import durable_write
from replica_agent.staging import TransferStaging
from replica_agent.transfers import StreamState


def write_chunk(
    staging: TransferStaging, request_id: str, stream: int, chunk: int, body: bytes | None
) -> None:
    durable_write(staging.chunk_path(request_id, stream, chunk), body or b"")


def write_stream(
    staging: TransferStaging, request_id: str, number: int, state: StreamState
) -> None:
    durable_write(*staging.stream_file(request_id, number, state))
