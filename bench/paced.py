"""A delta sent as a real origin over a real network sends it: spread over some seconds.

`send_paced` produces a prepared delta's messages evenly over `seconds`, its streams one
after another (table order) or interleaved (chunk 1 of every stream, then chunk 2, ...),
and times what the replica's lag is made of: from the last chunk acknowledged by the broker
to the `delta.in.rs`. Divided by floor (b) of the same run (a keyed COPY of the same rows),
it says how much of the load is still left when the last chunk arrives.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

from bench.cpu import MachineCpu
from bench.e2e import Sent, check_answer, produce_chunks
from bench.e2e_data import PreparedDelta, delta_in_messages, stream_messages
from origin.client import OriginClient


def ordered_messages(delta: PreparedDelta, interleaved: bool) -> Iterator[tuple[bytes, bytes]]:
    """The delta's messages, streams one after another or interleaved (one body read at a
    time either way)."""
    if not interleaved:
        yield from delta_in_messages(delta)
        return
    streams = [stream_messages(delta, s.stream_number) for s in delta.transfer.manifest.streams]
    for group in itertools.zip_longest(*streams):
        yield from (message for message in group if message is not None)


async def send_paced(
    client: OriginClient,
    delta: PreparedDelta,
    seconds: float,
    interleaved: bool,
    timeout: float,
    agent_pid: int | None = None,
) -> dict[str, Any]:
    """Produce the delta over about `seconds`, then wait for its answer; the CPU account
    of both (`agent_pid`: the agent's process, whose children are Spark's)."""
    count = sum(s.chunk_count for s in delta.transfer.manifest.streams)
    with MachineCpu(agent_pid) as cpu:
        started = time.time()
        await produce_chunks(
            client, ordered_messages(delta, interleaved), Sent(), interval=seconds / max(1, count)
        )
        last_acked = time.time()
        result = await client.result(delta.transfer.manifest.request_id, timeout)
        answered = time.time()
    check_answer(delta, result, timeout)
    return {
        "order": "interleaved" if interleaved else "table order",
        "rows": delta.rows,
        "messages": count,
        "send_seconds": round(last_acked - started, 3),
        "after_last_chunk_seconds": round(answered - last_acked, 3),
        # CPU seconds by process group while the chunks were sent, and after the last.
        "cpu": {
            "sending": cpu.timeline.between(started, last_acked),
            "after_last_chunk": cpu.timeline.between(last_acked, answered),
        },
    }
