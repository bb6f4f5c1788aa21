"""A delta sent as a real origin over a real network sends it: spread over some seconds.

`send_paced` produces a prepared delta's messages evenly over `seconds`, its streams one
after another (table order) or interleaved (chunk 1 of every stream, then chunk 2, ...),
and times what the replica's lag is made of: from the last chunk acknowledged by the broker
to the `delta.in.rs`. Divided by floor (b) of the same run (a keyed COPY of the same rows),
it says how much of the load is still left when the last chunk arrives.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from typing import Any

from bench.e2e import Sent, _check
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
    client: OriginClient, delta: PreparedDelta, seconds: float, interleaved: bool, timeout: float
) -> dict[str, Any]:
    """Produce the delta over about `seconds`, then wait for its answer."""
    topic = client.settings.topic_delta_in
    count = sum(s.chunk_count for s in delta.transfer.manifest.streams)
    interval = seconds / max(1, count)
    sent, window = Sent(), list[asyncio.Future[Any]]()
    started = time.perf_counter()
    for index, (key, value) in enumerate(ordered_messages(delta, interleaved)):
        wait = started + index * interval - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        window.append(await client.producer.send(topic, key=key, value=value,
                                                 headers=client.sign(key, value)))  # fmt: skip
        while len(window) > 64:
            meta = await window.pop(0)
            sent.add(meta.partition, meta.offset)
    for pending in window:
        meta = await pending
        sent.add(meta.partition, meta.offset)
    last_acked = time.perf_counter()
    result = await client.result(delta.transfer.manifest.request_id, timeout)
    answered = time.perf_counter()
    _check(delta, result, timeout)
    return {
        "order": "interleaved" if interleaved else "table order",
        "rows": delta.rows,
        "messages": count,
        "send_seconds": round(last_acked - started, 3),
        "after_last_chunk_seconds": round(answered - last_acked, 3),
    }
