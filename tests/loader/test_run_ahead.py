"""`run_ahead`: steps on a thread, results in order, errors where they happened (pure)."""

from __future__ import annotations

import threading
import time
from functools import partial

import pytest

from spark_loader.run_ahead import run_ahead


def test_results_come_in_step_order_while_later_steps_already_run() -> None:
    second_started = threading.Event()

    def first() -> int:
        return 1

    def second() -> int:
        second_started.set()
        return 2

    with run_ahead([first, second]) as results:
        assert next(results) == 1
        # The caller has not asked for the second result: it runs anyway, ahead.
        assert second_started.wait(5)
        assert next(results) == 2
        assert list(results) == []


def test_a_failed_step_raises_in_its_place_and_no_later_step_runs() -> None:
    ran: list[str] = []

    def ok() -> str:
        ran.append("ok")
        return "ok"

    def broken() -> str:
        ran.append("broken")
        raise ValueError("staging refused")

    def later() -> str:
        ran.append("later")
        return "later"

    with run_ahead([ok, broken, later]) as results:
        assert next(results) == "ok"
        with pytest.raises(ValueError, match="staging refused"):
            next(results)
    assert ran == ["ok", "broken"]


def test_leaving_early_waits_for_the_running_step_and_skips_the_rest() -> None:
    ran: list[int] = []
    release = threading.Event()

    def slow(n: int) -> int:
        release.wait(5)
        time.sleep(0.05)
        ran.append(n)
        return n

    def apply_fails_after_the_first() -> None:
        with run_ahead([partial(slow, n) for n in range(5)]) as results:
            release.set()
            next(results)
            raise RuntimeError("apply failed")

    with pytest.raises(RuntimeError, match="apply failed"):
        apply_fails_after_the_first()
    # When the block is left, nothing runs on: at most the step that was running finished.
    after = list(ran)
    time.sleep(0.3)
    assert ran == after
    assert len(ran) < 5
