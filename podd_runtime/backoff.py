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
from dataclasses import dataclass, field
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


@dataclass
class _Attempts:
    """The one rule both `retry` and `retry_async` follow, counting as they go."""

    backoff: Backoff
    attempts: int | None
    deadline_seconds: float | None
    on_retry: OnRetry | None
    started: float = field(default_factory=time.monotonic)
    made: int = 0

    def wait_after(self, error: BaseException) -> float:
        """The wait before the next attempt, once `error` ended this one; `error` raised
        again when the attempts are used up or the wait would pass the deadline."""
        self.made += 1
        delay = self.backoff.delay(self.made)
        if self.attempts is not None and self.made >= self.attempts:
            raise error
        waited = time.monotonic() - self.started
        if self.deadline_seconds is not None and waited + delay > self.deadline_seconds:
            raise error
        if self.on_retry is not None:
            self.on_retry(self.made, error, delay)
        return delay


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
    rule = _Attempts(backoff, attempts, deadline_seconds, on_retry)
    while True:
        try:
            return action()
        except retry_on as error:
            delay = rule.wait_after(error)
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
    rule = _Attempts(backoff, attempts, deadline_seconds, on_retry)
    while True:
        try:
            return await action()
        except retry_on as error:
            delay = rule.wait_after(error)
        await sleep(delay)
