"""A token bucket: at most `rate` events a second, with bursts of up to `burst`.

What a hostile or broken peer can make the agent do per message (answer a `delta.rq`, log a
warning) is bounded by one of these; what is refused is counted by the caller.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RateLimit:
    """`allow()` is True for at most `burst` events at once and `rate` a second after."""

    def __init__(
        self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0:
            raise ValueError("the rate must be positive")
        self.rate = rate
        self.burst = max(1.0, rate if burst is None else burst)
        self._clock = clock
        self._tokens = self.burst
        self._at = clock()

    def allow(self) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False


class Throttle:
    """A log line per event at most `rate` a second: `allow()` says whether to write one
    now, and `suppressed` how many were not written since the last one (to say so)."""

    def __init__(self, rate: float = 1.0, burst: float = 10.0) -> None:
        self._limit = RateLimit(rate, burst)
        self._suppressed = 0

    def allow(self) -> bool:
        if self._limit.allow():
            return True
        self._suppressed += 1
        return False

    def take_suppressed(self) -> int:
        taken, self._suppressed = self._suppressed, 0
        return taken
