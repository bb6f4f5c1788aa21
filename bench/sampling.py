"""A reading taken every `interval` seconds on a thread while a `with` block runs, and once
more at each end (`bench.memory`, `bench.cpu`)."""

from __future__ import annotations

import threading
from typing import Self


class PeriodicSampler:
    """Subclasses define `_sample`; `started` is false only during the first reading."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.started = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._sample()
        self.started = True
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        raise NotImplementedError
