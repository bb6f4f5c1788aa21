"""Fetch pacing: the short wait while messages flow, the long one once quiet.

Pure rules against a fake clock, then a real aiokafka consumer on the embedded broker:
its fetch requests are counted as they go out, so the test sees the traffic change."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from podd_kafka.client import ensure_topics
from podd_kafka.fetch_pace import FetchPace
from podd_kafka.settings import KafkaSettings


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_short_while_busy_long_once_quiet_and_short_again_at_once() -> None:
    clock = Clock()
    pace = FetchPace(20, 300, quiet_seconds=1.0, clock=clock)
    started = SimpleNamespace(_fetch_max_wait_ms=1500, _fetcher=SimpleNamespace())
    unstarted = SimpleNamespace(_fetch_max_wait_ms=1500)
    pace.attach(started)
    pace.attach(unstarted)
    assert started._fetch_max_wait_ms == started._fetcher._fetch_max_wait_ms == 20
    assert unstarted._fetch_max_wait_ms == 20  # its fetcher will be built from this

    clock.now += 0.99
    assert pace.tick() == 20
    clock.now += 0.01
    assert pace.tick() == 300
    assert started._fetcher._fetch_max_wait_ms == unstarted._fetch_max_wait_ms == 300

    pace.busy()  # no tick needed: the next fetch request already waits briefly
    assert started._fetcher._fetch_max_wait_ms == unstarted._fetch_max_wait_ms == 20
    clock.now += 5
    assert pace.wait_ms() == 300


def test_a_tick_repairs_a_fetcher_built_from_an_older_wait() -> None:
    """A consumer starting in another thread may build its fetcher from the value before a
    change; the next tick sets it again."""
    clock = Clock()
    pace = FetchPace(20, 300, clock=clock)
    consumer = SimpleNamespace(_fetch_max_wait_ms=1500)
    pace.attach(consumer)
    consumer._fetcher = SimpleNamespace(_fetch_max_wait_ms=1500)
    assert pace.tick() == 20
    assert consumer._fetcher._fetch_max_wait_ms == 20


def test_an_idle_wait_below_the_busy_one_is_raised_to_it() -> None:
    clock = Clock()
    pace = FetchPace(50, 10, clock=clock)
    clock.now += 10
    assert pace.wait_ms() == 50


def test_a_consumer_without_the_wait_is_refused() -> None:
    with pytest.raises(RuntimeError, match="_fetch_max_wait_ms"):
        FetchPace(20, 200).attach(object())


async def _fetches_in(consumer: AIOKafkaConsumer, seconds: float) -> int:
    """Fetch requests the consumer sends to the broker in `seconds`."""
    client: Any = consumer._client
    sent = 0
    send = client.send

    async def counting(node_id: int, request: Any, **kwargs: Any) -> Any:
        nonlocal sent
        sent += type(request).__name__.startswith("FetchRequest")
        return await send(node_id, request, **kwargs)

    client.send = counting
    try:
        await asyncio.sleep(seconds)
    finally:
        client.send = send
    return sent


async def test_a_quiet_consumer_fetches_less_and_a_message_makes_it_fetch_often(
    broker: str,
) -> None:
    prefix = f"pace-{uuid.uuid4().hex[:8]}."
    topic = prefix + "delta.in"
    settings = KafkaSettings(
        broker=broker,
        topic_delta_in=topic,
        topic_delta_in_rs=prefix + "delta.in.rs",
        topic_delta_rq=prefix + "delta.rq",
        topic_delta_rs=prefix + "delta.rs",
    )
    await ensure_topics(settings, [broker])
    pace = FetchPace(20, 500, quiet_seconds=0.5)
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=broker, group_id=None, auto_offset_reset="earliest"
    )
    pace.attach(consumer)
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await consumer.start()
    await producer.start()
    try:
        pace.busy()
        busy = await _fetches_in(consumer, 1.0)  # no tick: the short wait holds throughout
        pace.tick()
        assert pace.wait_ms() == 500
        quiet = await _fetches_in(consumer, 2.0)
        await producer.send_and_wait(topic, b"hello")
        message = await asyncio.wait_for(consumer.getone(), 30)
        assert message.value == b"hello"
        pace.busy()  # what the agent does on each message it handles
        # A fetch sent with the long wait before `busy` may still be out for up to 500 ms.
        again = await _fetches_in(consumer, 1.0)
    finally:
        await producer.stop()
        await consumer.stop()
    assert quiet <= 6, f"{quiet} fetches in 2 s at a 500 ms wait"
    assert again >= 5, f"{again} fetches in 1 s at a 20 ms wait"
    assert busy > quiet
