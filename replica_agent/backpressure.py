"""Disk faults are back-pressure, not loss: what cannot be written is retried, not skipped.

Staged files are the truth, so a chunk whose file cannot be written (a full disk, a quota,
an I/O error, a file system remounted read-only) cannot be acked: skipping it would commit
its offset, and the transfer would wait minutes for the origin's resend. Instead intake
pauses: the same messages are handled again with backoff (nothing acked meanwhile, so
Kafka holds everything after them), and resume by themselves once the disk takes writes
again; the transfer completes with no resend. An answer that cannot be recorded waits the
same way. `/health` says 503 while paused.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from podd_runtime.backoff import Backoff

log = structlog.get_logger("replica_agent")

T = TypeVar("T")

#: Seconds between attempts while paused: 0.5, doubling, then every 30 s.
BACKOFF = Backoff(0.5, cap=30.0)
#: The errors that waiting can cure (or that no skip may hide).
DISK_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EMFILE, errno.ENFILE}
)


def is_disk_fault(error: BaseException | None) -> bool:
    return isinstance(error, OSError) and error.errno in DISK_ERRNOS


class Backpressure:
    """Whether (and why, since when) the agent waits for its disk. Each kind of work that
    waits (`what`: staging a chunk, recording an answer, ...) pauses and resumes on its own,
    so one resuming does not hide another still waiting."""

    def __init__(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        #: what → (why, since when)
        self._paused: dict[str, tuple[str, float]] = {}
        self._sleep = sleep

    @property
    def reason(self) -> str | None:
        """Why the agent waits (None: it does not)."""
        return "; ".join(why for why, _ in self._paused.values()) or None

    async def wait(self, attempt: int, what: str, error: BaseException) -> None:
        """Paused by `error` while doing `what`: log (once per pause), then wait."""
        why = f"{what}: {type(error).__name__}: {error}"[:500]
        if what in self._paused:
            since = self._paused[what][1]
        else:
            since = time.time()
            log.error(
                "paused: the disk refuses writes; retrying until it takes them",
                what=what,
                error=f"{type(error).__name__}: {error}",
            )
        self._paused[what] = (why, since)
        await self._sleep(BACKOFF.delay(attempt + 1))

    def resumed(self, what: str) -> None:
        paused = self._paused.pop(what, None)
        if paused is not None:
            seconds = round(time.time() - paused[1], 1)
            log.warning("resumed: the disk takes writes again", what=what, paused_seconds=seconds)

    async def retry(self, what: str, action: Callable[[], Awaitable[T]]) -> T:
        """`action` until it does not fail with a disk fault (others propagate)."""
        attempt = 0
        while True:
            try:
                result = await action()
            except OSError as exc:
                if not is_disk_fault(exc):
                    raise
                await self.wait(attempt, what, exc)
                attempt += 1
                continue
            self.resumed(what)
            return result
