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
    """`with run_ahead(steps) as results:` iterate `results` for each step's result (every
    step may run ahead of the caller: `iterate_ahead` with room for all)."""
    with iterate_ahead((step() for step in steps), max(1, len(steps)), name) as results:
        yield results


_END = object()


@contextmanager
def iterate_ahead(
    items: Iterator[T], depth: int, name: str = "podd-iterate-ahead"
) -> Iterator[Iterator[T]]:
    """`items` produced on a thread at most `depth` ahead of the caller (memory stays
    bounded by what `depth` items hold); the same rules as `run_ahead` for errors and for
    leaving early."""
    done: queue.Queue[object] = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                done.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in items:
                if not put(item):
                    return
        except BaseException as exc:
            put(_Failed(exc))
            return
        put(_END)

    def results() -> Iterator[T]:
        while True:
            item = done.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item  # type: ignore[misc]

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    try:
        yield results()
    finally:
        stop.set()
        thread.join()
