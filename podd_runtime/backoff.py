"""The one backoff rule, and `retry()`: an action tried again after waits that double, until
it succeeds, its attempts are used up, or the next wait would pass a deadline.

Every loop here that waits and tries again uses it: a load's transient failures
(`spark_loader.load_rules`), the registry read after a COMMIT whose connection broke
(`replica_store.lost_commit`), the agent's registry reads before an answer and its waits for
a full disk, and the origin's resend of a delta answered LOAD_FAILED."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
Retried = type[BaseException] | tuple[type[BaseException], ...]
OnRetry = Callable[[int, BaseException, float], None]


@dataclass(frozen=True)
class Backoff:
    """Waits between attempts: `first`, then doubling, never more than `cap`."""

    first: float
    cap: float = math.inf

    def delay(self, retry: int) -> float:
        """The wait before retry number `retry` (1: the first retry)."""
        return float(min(self.first * 2.0 ** (retry - 1), self.cap))


def _go_on(
    retry: int, waited: float, delay: float, attempts: int | None, deadline: float | None
) -> bool:
    if attempts is not None and retry >= attempts:
        return False
    return deadline is None or waited + delay <= deadline


def retry(
    action: Callable[[], T],
    *,
    retry_on: Retried,
    backoff: Backoff,
    attempts: int | None = None,
    deadline_seconds: float | None = None,
    on_retry: OnRetry | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`action()` until it returns. An error of a `retry_on` type is retried after the
    backoff's next wait (`on_retry(number, error, wait)` told first); once `attempts` were
    made, or the next wait would pass `deadline_seconds` from the start, it is raised."""
    started, number = time.monotonic(), 0
    while True:
        number += 1
        try:
            return action()
        except retry_on as error:
            delay = backoff.delay(number)
            if not _go_on(number, time.monotonic() - started, delay, attempts, deadline_seconds):
                raise
            if on_retry is not None:
                on_retry(number, error, delay)
        sleep(delay)


async def retry_async(
    action: Callable[[], Awaitable[T]],
    *,
    retry_on: Retried,
    backoff: Backoff,
    attempts: int | None = None,
    deadline_seconds: float | None = None,
    on_retry: OnRetry | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """`retry` for a coroutine: the same rule, waiting without blocking the loop."""
    started, number = time.monotonic(), 0
    while True:
        number += 1
        try:
            return await action()
        except retry_on as error:
            delay = backoff.delay(number)
            if not _go_on(number, time.monotonic() - started, delay, attempts, deadline_seconds):
                raise
            if on_retry is not None:
                on_retry(number, error, delay)
        await sleep(delay)
