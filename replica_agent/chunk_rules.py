"""PROTOCOL.md's rules between the chunks of one transfer: the same framing throughout, and
one last chunk per stream with nothing beyond it. Each raises `ProtocolError` (BAD_CHUNK)."""

from __future__ import annotations

from protocol.errors import ProtocolError
from protocol.messages import DeltaInKey
from replica_agent.transfers import StreamState, Transfer


def check_same_transfer(transfer: Transfer, key: DeltaInKey) -> None:
    for name, mine, theirs in (
        ("datamart", transfer.datamart, key.datamart),
        ("deltaNum", transfer.delta_num, key.delta_num),
        ("deltaDate", transfer.delta_date, key.delta_date),
        ("streamTotal", transfer.stream_total, key.stream_total),
    ):
        if mine != theirs:
            raise ProtocolError(f"{name} differs between chunks: {mine} and {theirs}")


def check_last(stream: StreamState, s: int, c: int, is_last: bool) -> bool:
    """The last-chunk rules; True when this chunk makes the stream's last chunk known."""
    if is_last:
        if stream.last is not None and stream.last != c:
            raise ProtocolError(f"stream {s} has two last chunks: {stream.last} and {c}")
        if stream.chunks and max(stream.chunks) > c:
            raise ProtocolError(
                f"stream {s}: chunk {max(stream.chunks)} is beyond the last chunk {c}"
            )
        if stream.last is None:
            stream.last = c
            return True
        return False
    if stream.last is not None and c > stream.last:
        raise ProtocolError(f"stream {s}: chunk {c} is beyond the last chunk {stream.last}")
    if stream.last == c:
        raise ProtocolError(f"stream {s}: chunk {c} arrived as the last chunk and as not last")
    return False
