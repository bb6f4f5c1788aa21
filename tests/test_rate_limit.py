"""The token bucket and the log throttle, on a fake clock (pure logic)."""

from __future__ import annotations

import pytest

from podd_runtime.rate_limit import RateLimit, Throttle


def test_a_burst_then_the_rate() -> None:
    now = [0.0]
    limit = RateLimit(2.0, burst=3, clock=lambda: now[0])
    assert [limit.allow() for _ in range(5)] == [True, True, True, False, False]
    now[0] += 0.5  # one token back
    assert [limit.allow() for _ in range(2)] == [True, False]
    now[0] += 100  # never more than the burst
    assert sum(limit.allow() for _ in range(10)) == 3


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        RateLimit(0)


def test_the_throttle_counts_what_it_did_not_log() -> None:
    throttle = Throttle(rate=0.001, burst=2)
    allowed = [throttle.allow() for _ in range(10)]
    assert allowed[:2] == [True, True]
    assert not any(allowed[2:])
    assert throttle.take_suppressed() == 8
    assert throttle.take_suppressed() == 0
