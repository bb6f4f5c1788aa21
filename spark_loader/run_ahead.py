"""Steps run in order on a thread, their results taken in the same order by the caller.

The loader stages the next tables in Spark while it applies those already staged in
PostgreSQL: the apply is one backend's CPU, staging is the executors' and the COPY
backends', so on a machine with two cores or more the two overlap. A step's exception is
raised to the caller where its result would have been, and no later step starts. Leaving
the block early (an error in the caller) stops the steps after the one running, and waits
for that one: nothing of the load runs on once the caller has moved on (a retry empties
the staging tables first).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


@contextmanager
def run_ahead(
    steps: Sequence[Callable[[], T]], name: str = "podd-run-ahead"
) -> Iterator[Iterator[T]]:
    """`with run_ahead(steps) as results:` iterate `results` for each step's result."""
    done: queue.Queue[T | _Failed] = queue.Queue()
    stop = threading.Event()

    def work() -> None:
        for step in steps:
            if stop.is_set():
                return
            try:
                done.put(step())
            except BaseException as exc:
                done.put(_Failed(exc))
                return

    def results() -> Iterator[T]:
        for _ in steps:
            item = done.get()
            if isinstance(item, _Failed):
                raise item.error
            yield item

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    try:
        yield results()
    finally:
        stop.set()
        thread.join()
