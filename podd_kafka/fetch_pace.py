"""How long a consumer's fetches may wait on the broker: short while messages flow, long
once nothing has come for a while.

A fetch that finds no data waits on the broker up to its max wait. Apache Kafka answers a
waiting fetch as soon as data arrives, but Tansu (the embedded broker) lets it wait the
whole time, so a reader that must see a message quickly fetches with a short wait (20 ms).
Idle, that is a fetch round trip every 20 ms for each consumer and the broker, burnt while
nothing happens: measured here, an idle agent, an idle origin and the broker together used
0.21 CPU seconds a second at 20 ms, 0.05 at 200 ms. And while the agent applies a big
delta, nothing arrives either (the origin waits for the answer), so the same polls take
CPU from the load.

`FetchPace` keeps the short wait for `QUIET_SECONDS` after the last activity (a message
handled, a request sent) and the long one after that. What that costs: the first message
after a quiet spell may wait up to the long wait on Tansu (on Apache Kafka, nothing).

It works on aiokafka consumers without importing aiokafka: the consumer's
`_fetch_max_wait_ms` (read when it starts) and its fetcher's (read for every fetch
request). Both are private; `attach` refuses a consumer that lacks the first, and a
test holds the second to this aiokafka's behaviour. Setting an int is atomic, so another
thread (Faust runs its consumer in one) may call `busy` and `tick`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: The short wait is kept this long after the last activity.
QUIET_SECONDS = 1.0


class FetchPace:
    """The fetch wait of the consumers attached: `busy_ms`, or `idle_ms` once quiet."""

    def __init__(
        self,
        busy_ms: int,
        idle_ms: int,
        *,
        quiet_seconds: float = QUIET_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.busy_ms = busy_ms
        self.idle_ms = max(idle_ms, busy_ms)
        self.quiet_seconds = quiet_seconds
        self._clock = clock
        self._last_activity = clock()
        self._consumers: list[Any] = []

    def attach(self, consumer: Any) -> None:
        """Pace `consumer` (an aiokafka consumer, started or not) from now on."""
        if not hasattr(consumer, "_fetch_max_wait_ms"):  # an aiokafka that moved it
            raise RuntimeError("this aiokafka keeps no _fetch_max_wait_ms to pace")
        self._consumers.append(consumer)
        self._set(consumer, self.wait_ms())

    def busy(self) -> None:
        """Something happened (a message handled, a request sent): the short wait, now."""
        self._last_activity = self._clock()
        self._apply(self.busy_ms)

    def wait_ms(self) -> int:
        """The wait fetches should use now."""
        quiet = self._clock() - self._last_activity >= self.quiet_seconds
        return self.idle_ms if quiet else self.busy_ms

    def tick(self) -> int:
        """Apply the wait due now (call it a few times a second); returns it."""
        wait = self.wait_ms()
        self._apply(wait)
        return wait

    def _apply(self, wait: int) -> None:
        # Set every time, not only on a change: a consumer that built its fetcher from the
        # value before a change (it starts in another thread) gets the new one next tick.
        for consumer in self._consumers:
            self._set(consumer, wait)

    @staticmethod
    def _set(consumer: Any, wait: int) -> None:
        consumer._fetch_max_wait_ms = wait
        fetcher = getattr(consumer, "_fetcher", None)  # built when the consumer starts
        if fetcher is not None:
            fetcher._fetch_max_wait_ms = wait
